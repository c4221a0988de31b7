//! kvctl against etcdctl 3.4 on a three-member cluster: `--cluster` for `endpoint
//! status|health|hashkv` and `defrag`, `member list` as a table, `move-leader`, and `member
//! add|update|remove|promote`, against real etcd and against ours.
//!
//! Read-only commands run through both tools against the same cluster one after the other, so
//! their outputs must be identical but for durations (and the order of `endpoint health` lines,
//! which follows the order the answers arrive in). Membership changes cannot be repeated on one
//! cluster with the same result, so each tool makes its own (a learner with its own peer URLs) and
//! the new member's id and URLs are masked.
//!
//! Our server answers HashKV and Defragment with Unimplemented: there the `--cluster` steps check
//! that kvctl reports each endpoint's failure as etcdctl does.

mod common;

use std::process::Output;
use std::time::{Duration, Instant};

use common::{etcd_tools_present, kvctl, run, ETCDCTL};
use proto::etcdserverpb as pb;
use tests::{Cluster, ClusterConfig, ServerKind};

/// How long a membership change may be refused as `unhealthy cluster` (etcd's strict reconfig
/// check right after a bootstrap) or a promotion as "not in sync" (a learner still catching up).
const RECONFIG_TIMEOUT: Duration = Duration::from_secs(30);
const NOT_IN_SYNC: &str = "Error: etcdserver: can only promote a learner member which is in sync with leader";
const UNHEALTHY: &str = "Error: etcdserver: unhealthy cluster";

/// stdout, the stderr lines that are not Go client logs, and the exit code.
type View = (String, Vec<String>, Option<i32>);

fn view(out: &Output) -> View {
    let stderr = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|line| !line.starts_with("{\"level\""))
        .map(str::to_string)
        .collect();
    (String::from_utf8_lossy(&out.stdout).into_owned(), stderr, out.status.code())
}

/// The first line of `view`'s stderr that starts with `Error:`.
fn error_line(view: &View) -> Option<&str> {
    view.1.iter().map(String::as_str).find(|line| line.starts_with("Error:"))
}

/// Read-only commands, compared byte for byte on the same cluster.
const CLUSTER_SCRIPT: &[&[&str]] = &[
    &["endpoint", "status", "--cluster"],
    &["-w", "json", "endpoint", "status", "--cluster"],
    &["-w", "fields", "endpoint", "status", "--cluster"],
    &["-w", "table", "endpoint", "status", "--cluster"],
    &["endpoint", "hashkv", "--cluster"],
    &["-w", "json", "endpoint", "hashkv", "--cluster"],
    &["-w", "fields", "endpoint", "hashkv", "--cluster"],
    &["-w", "table", "endpoint", "hashkv", "--cluster"],
    &["-w", "table", "member", "list"],
    &["defrag", "--cluster"],
];

/// `endpoint health`, whose lines come in the order the answers arrive and carry durations.
const HEALTH_SCRIPT: &[&[&str]] = &[
    &["endpoint", "health", "--cluster"],
    &["-w", "json", "endpoint", "health", "--cluster"],
    &["-w", "fields", "endpoint", "health", "--cluster"],
    &["-w", "table", "endpoint", "health", "--cluster"],
    &["endpoint", "health"],
];

/// How often a read-only step is run again when the two tools' outputs differ: right after a
/// bootstrap, a cluster still commits entries of its own (cluster version, member attributes), so
/// the raft indexes `endpoint status` shows may move between the two runs. A real difference
/// shows on every attempt.
const READ_ONLY_ATTEMPTS: usize = 3;

async fn compare_read_only(cluster: &Cluster) {
    let all: Vec<usize> = (0..cluster.len()).collect();
    cluster.wait_converged(&all).await.expect("members converge");
    let endpoints = cluster.endpoints();
    let mut mismatches = Vec::new();
    let scripts = [(CLUSTER_SCRIPT, mask_db_sizes as fn(View) -> View), (HEALTH_SCRIPT, unordered_timing)];
    for (script, normalize) in scripts {
        for args in script {
            let mut attempt = 1;
            loop {
                let want = normalize(view(&run(ETCDCTL, &endpoints, args, None)));
                let got = normalize(view(&run(kvctl(), &endpoints, args, None)));
                if want == got {
                    break;
                }
                if attempt == READ_ONLY_ATTEMPTS {
                    mismatches.push(format!("{args:?}\n  etcdctl: {want:?}\n  kvctl:   {got:?}"));
                    break;
                }
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
    assert!(mismatches.is_empty(), "kvctl differs from etcdctl:\n{}", mismatches.join("\n"));
}

/// A member's backend size changes while nothing is written (ours flushes sled in the
/// background), so the `endpoint status` sizes are masked in every format.
fn mask_db_sizes((stdout, stderr, code): View) -> View {
    let mut text = stdout;
    for field in ["\"dbSize\":", "\"dbSizeInUse\":", "\"DBSize\" : ", "\"DBSizeInUse\" : "] {
        text = mask_numbers(&text, field);
    }
    let lines: Vec<String> = text
        .split('\n')
        .map(|line| {
            let simple: Vec<&str> = line.split(", ").collect();
            let table: Vec<&str> = line.split('|').collect();
            if simple.len() == 10 {
                [&simple[..3], &["<size>"], &simple[4..]].concat().join(", ")
            } else if table.len() == 12 {
                squeeze(&[&table[..4], &[" <size> "], &table[5..]].concat().join("|"))
            } else {
                line.to_string()
            }
        })
        .collect();
    (lines.join("\n"), stderr, code)
}

/// Durations masked, then every line (and every item of a json list) sorted.
fn unordered_timing((stdout, stderr, code): View) -> View {
    let mut stdout: Vec<String> = stdout.lines().map(mask_durations).collect();
    if let [line] = stdout.as_mut_slice() {
        if let Some(items) = line.strip_prefix("[{").and_then(|l| l.strip_suffix("}]")) {
            let mut items: Vec<&str> = items.split("},{").collect();
            items.sort_unstable();
            *line = format!("[{{{}}}]", items.join("},{"));
        }
    }
    stdout.sort();
    let mut stderr: Vec<String> = stderr.iter().map(|line| mask_durations(line)).collect();
    stderr.sort();
    (stdout.join("\n"), stderr, code)
}

/// Every Go duration (`1.6ms`, `850µs`, `1.0004s`) as `<took>`; the runs of spaces and dashes that
/// pad table cells to their width squeezed to one.
fn mask_durations(text: &str) -> String {
    let mut out = String::new();
    for token in text.split_inclusive(['"', ' ', '|']) {
        let end = token.len() - token.chars().last().filter(|c| matches!(c, '"' | ' ' | '|')).map_or(0, char::len_utf8);
        let (word, tail) = token.split_at(end);
        let number = word.trim_end_matches(|c: char| c.is_alphabetic() || c == 'µ');
        let is_duration = !number.is_empty()
            && number.chars().all(|c| c.is_ascii_digit() || c == '.')
            && ["ns", "µs", "ms", "s"].contains(&&word[number.len()..]);
        out.push_str(if is_duration { "<took>" } else { word });
        out.push_str(tail);
    }
    squeeze(&out)
}

/// Runs of spaces and of dashes squeezed to one: table padding follows the widest cell.
fn squeeze(text: &str) -> String {
    let mut squeezed = String::with_capacity(text.len());
    for c in text.chars() {
        if !((c == ' ' || c == '-') && squeezed.ends_with(c)) {
            squeezed.push(c);
        }
    }
    squeezed
}

/// The members as the cluster lists them now.
async fn members(cluster: &Cluster) -> Vec<pb::Member> {
    let url = cluster.member(0).client_url();
    let mut client = pb::cluster_client::ClusterClient::connect(url).await.expect("connect for MemberList");
    client.member_list(pb::MemberListRequest { linearizable: false }).await.expect("MemberList").into_inner().members
}

/// The id of the member `added` (the view of the `member add` that should have added it).
async fn member_with_peer(cluster: &Cluster, peer: &str, added: &View) -> u64 {
    let found = members(cluster).await.into_iter().find(|m| m.peer_ur_ls.iter().any(|u| u == peer));
    found.unwrap_or_else(|| panic!("no member with peer URL {peer} after {added:?}")).id
}

/// Runs a membership change through `program`, again while etcd refuses it as `unhealthy cluster`
/// or, for a promotion, while the learner is not in sync yet.
async fn reconfig(program: &str, cluster: &Cluster, args: &[&str]) -> View {
    let deadline = Instant::now() + RECONFIG_TIMEOUT;
    loop {
        let out = view(&run(program, &cluster.endpoints(), args, None));
        let retry = matches!(error_line(&out), Some(UNHEALTHY) | Some(NOT_IN_SYNC));
        if !retry || Instant::now() >= deadline {
            return out;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What differs between the two tools' membership changes: the new members' ids (hex, padded
/// hex as `%16x` prints them, decimal) and peer URLs, which member answered, and the order
/// members are listed in (by id).
struct ChangeMask {
    ids: Vec<u64>,
    peers: Vec<String>,
}

impl ChangeMask {
    fn apply(&self, (stdout, stderr, code): &View) -> View {
        let text = |t: &str| sort_member_lists(&mask_numbers(&self.literal_masks(t), "\"member_id\":"));
        (text(stdout), stderr.iter().map(|l| text(l)).collect(), *code)
    }

    fn literal_masks(&self, text: &str) -> String {
        let mut out = text.to_string();
        for (i, id) in self.ids.iter().enumerate() {
            for literal in [format!("{id:16x}"), format!("{id:x}"), id.to_string()] {
                out = out.replace(&literal, &format!("<new{i}>"));
            }
        }
        for (i, peer) in self.peers.iter().enumerate() {
            out = out.replace(peer, &format!("<peer{i}>"));
        }
        out
    }
}

fn mask_numbers(text: &str, field: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(field) {
        out.push_str(&rest[..at + field.len()]);
        out.push('0');
        rest = rest[at + field.len()..].trim_start_matches(|c: char| c.is_ascii_digit());
    }
    out.push_str(rest);
    out
}

/// Sorts the entries of `ETCD_INITIAL_CLUSTER="a=u1,b=u2"` and the objects of a json
/// `"members":[…]` list (the last list in the line), whose order follows the member ids.
fn sort_member_lists(text: &str) -> String {
    let mut lines = Vec::new();
    for line in text.split('\n') {
        if let Some(value) = line.strip_prefix("ETCD_INITIAL_CLUSTER=\"").and_then(|v| v.strip_suffix('"')) {
            let mut entries: Vec<&str> = value.split(',').collect();
            entries.sort_unstable();
            lines.push(format!("ETCD_INITIAL_CLUSTER=\"{}\"", entries.join(",")));
        } else if let Some((head, list)) = line.rsplit_once("\"members\":[{") {
            let (items, tail) = list.rsplit_once("}]").unwrap_or((list, ""));
            let mut items: Vec<&str> = items.split("},{").collect();
            items.sort_unstable();
            lines.push(format!("{head}\"members\":[{{{}}}]{tail}", items.join("},{")));
        } else {
            lines.push(line.to_string());
        }
    }
    lines.join("\n")
}

/// One tool's membership changes with unstarted learners (etcd allows one learner at a time):
/// every output format of add, update and remove, and the errors after each. Returns the masked
/// views in order. Every add has a peer URL of its own: etcd 3.4 sometimes answers `member not
/// found` to an add that reuses the URL of a member removed a moment before.
async fn learner_changes(program: &str, cluster: &Cluster, tool: u8) -> Vec<View> {
    let peers: Vec<String> = (1..=5).map(|k| format!("http://10.255.{tool}.{k}:2380")).collect();
    let peer = |k: usize| format!("--peer-urls={}", peers[k]);
    let mut mask = ChangeMask { ids: Vec::new(), peers: peers.clone() };
    let mut views = Vec::new();

    views.push(reconfig(program, cluster, &["member", "add", "l1", &peer(0), "--learner"]).await);
    let id = format!("{:x}", member_with_peer(cluster, &peers[0], views.last().expect("the add")).await);
    mask.ids.push(u64::from_str_radix(&id, 16).expect("hex"));
    views.push(reconfig(program, cluster, &["member", "update", &id, &peer(1)]).await);
    views.push(reconfig(program, cluster, &["-w", "json", "member", "update", &id, &peer(2)]).await);
    views.push(reconfig(program, cluster, &["-w", "fields", "member", "update", &id, &peer(1)]).await);
    // Never started, so never in sync: refused at once, not retried.
    views.push(view(&run(program, &cluster.endpoints(), &["member", "promote", &id], None)));
    views.push(reconfig(program, cluster, &["-w", "json", "member", "remove", &id]).await);
    views.push(reconfig(program, cluster, &["member", "remove", &id]).await);

    views.push(reconfig(program, cluster, &["-w", "json", "member", "add", "l2", &peer(3), "--learner"]).await);
    let id = format!("{:x}", member_with_peer(cluster, &peers[3], views.last().expect("the add")).await);
    mask.ids.push(u64::from_str_radix(&id, 16).expect("hex"));
    views.push(reconfig(program, cluster, &["-w", "table", "member", "remove", &id]).await);

    views.push(reconfig(program, cluster, &["-w", "table", "member", "add", "l3", &peer(4), "--learner"]).await);
    let id = format!("{:x}", member_with_peer(cluster, &peers[4], views.last().expect("the add")).await);
    mask.ids.push(u64::from_str_radix(&id, 16).expect("hex"));
    views.push(reconfig(program, cluster, &["member", "remove", &id]).await);
    views.iter().map(|v| mask.apply(v)).collect()
}

/// One tool promotes a learner that really runs (started the way an operator does it).
async fn promote_running_learner(program: &str, cluster: &mut Cluster) -> View {
    let index = cluster.add_member(true).await.expect("learner starts");
    let id = cluster.member(index).status().await.expect("learner status").member_id;
    let out = reconfig(program, cluster, &["member", "promote", &format!("{id:x}")]).await;
    ChangeMask { ids: vec![id], peers: vec![cluster.member(index).peer_url()] }.apply(&out)
}

async fn compare_membership(cluster: &mut Cluster) {
    let want = learner_changes(ETCDCTL, cluster, 1).await;
    let got = learner_changes(kvctl(), cluster, 2).await;
    let mismatches: Vec<String> = want
        .iter()
        .zip(&got)
        .enumerate()
        .filter(|(_, (w, g))| w != g)
        .map(|(i, (w, g))| format!("learner step {i}\n  etcdctl: {w:?}\n  kvctl:   {g:?}"))
        .collect();
    assert!(mismatches.is_empty(), "kvctl differs from etcdctl:\n{}", mismatches.join("\n"));

    let want = promote_running_learner(ETCDCTL, cluster).await;
    let got = promote_running_learner(kvctl(), cluster).await;
    assert_eq!(got, want, "member promote");
    assert_eq!(want.2, Some(0), "promote failed: {want:?}");
}

/// The member id of the cluster member at `index`.
async fn id_of(cluster: &Cluster, index: usize) -> u64 {
    cluster.member(index).status().await.expect("status").member_id
}

/// Each tool moves the leadership to a follower; both must say so in etcdctl's words, and the
/// cluster must follow.
async fn compare_move_leader(cluster: &Cluster) {
    for program in [ETCDCTL, kvctl()] {
        let leader = cluster.leader().await.expect("leader");
        let follower = (0..cluster.len()).find(|&i| i != leader).expect("a follower");
        let (leader_id, target) = (id_of(cluster, leader).await, id_of(cluster, follower).await);
        let out = view(&run(program, &cluster.endpoints(), &["move-leader", &format!("{target:x}")], None));
        let want = format!("Leadership transferred from {leader_id:x} to {target:x}\n");
        assert_eq!(out, (want, vec![], Some(0)), "{program} move-leader");
        let deadline = Instant::now() + Duration::from_secs(15);
        while cluster.leader().await.ok() != Some(follower) {
            assert!(Instant::now() < deadline, "{program}: the leadership did not move");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let leader = cluster.leader().await.expect("leader");
    let leader_id = format!("{:x}", id_of(cluster, leader).await);
    let followers: Vec<String> =
        (0..cluster.len()).filter(|&i| i != leader).map(|i| cluster.member(i).endpoint()).collect();
    let steps: Vec<(String, Vec<&str>)> = vec![
        (cluster.endpoints(), vec!["move-leader", "1234"]),
        (followers.join(","), vec!["move-leader", &leader_id]),
        (cluster.endpoints(), vec!["-w", "fields", "move-leader", &leader_id]),
        (cluster.endpoints(), vec!["-w", "table", "move-leader", &leader_id]),
        (cluster.endpoints(), vec!["-w", "json", "move-leader", &leader_id]),
    ];
    for (endpoints, args) in steps {
        let want = view(&run(ETCDCTL, &endpoints, &args, None));
        let got = view(&run(kvctl(), &endpoints, &args, None));
        assert_eq!(got, want, "{args:?} on {endpoints}");
    }
}

async fn compare_cluster(kind: ServerKind) {
    let mut cluster = Cluster::start_with(ClusterConfig { kind, ..ClusterConfig::new(3) }).await.expect("cluster");
    compare_read_only(&cluster).await;
    compare_move_leader(&cluster).await;
    compare_membership(&mut cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kvctl_cluster_verbs_match_etcdctl_on_real_etcd() {
    if etcd_tools_present() {
        compare_cluster(ServerKind::Etcd).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kvctl_cluster_verbs_match_etcdctl_on_our_server() {
    if etcd_tools_present() {
        compare_cluster(ServerKind::Ours).await;
    }
}

#[test]
fn masks() {
    assert_eq!(
        mask_durations("| 127.0.0.1:2379 |   true | 1.565532ms |       |"),
        "| 127.0.0.1:2379 | true | <took> | |"
    );
    assert_eq!(mask_durations("\"took\":\"850µs\",\"x\":\"2s\""), "\"took\":\"<took>\",\"x\":\"<took>\"");
    assert_eq!(mask_durations("3.4.23, 20 kB, 127.0.0.1:2379 5s"), "3.4.23, 20 kB, 127.0.0.1:2379 <took>");
    assert_eq!(
        sort_member_lists("ETCD_INITIAL_CLUSTER=\"b=u2,a=u1\"\n{\"members\":[{\"ID\":2},{\"ID\":1}]}"),
        "ETCD_INITIAL_CLUSTER=\"a=u1,b=u2\"\n{\"members\":[{\"ID\":1},{\"ID\":2}]}"
    );
    let mask = ChangeMask { ids: vec![0x159cf49344e9e51], peers: vec!["http://p:1".into()] };
    let view = ("Member  159cf49344e9e51 added\n".to_string(), vec![], Some(0));
    assert_eq!(mask.apply(&view).0, "Member <new0> added\n");
}
