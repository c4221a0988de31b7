//! `etcdctl watch` (which runs until killed) against real etcd and against the server under test: the
//! same script of puts, deletes and txns, the same watchers, the same output line for line (JSON output
//! with member ids and terms masked).
//!
//! Each test runs its session on a fresh etcd and a fresh member of `KV_TEST_SERVER` and compares;
//! without an installed etcd it is skipped. Writes wait for the watchers to print what the previous
//! write produced, so that how responses are batched never depends on timing.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tests::diff::line_diff;
use tests::etcdctl::etcdctl_bin;
use tests::normalize::Masks;
use tests::server::etcd_available;
use tests::{Member, MemberConfig, ServerKind};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, Command};

/// How long a watcher may take to print what a write produced.
const OUTPUT_TIMEOUT: Duration = Duration::from_secs(10);
/// Warm-up puts: each a new key with this prefix, watched by the live watchers, removed from outputs.
const READY_PREFIX: &str = "/registry/pods-ready/";

/// A running `etcdctl watch`, its stdout collected as it comes; killed on drop.
struct CtlWatch {
    child: Child,
    stdin: Option<ChildStdin>,
    out: Arc<Mutex<String>>,
}

impl CtlWatch {
    async fn start(endpoint: &str, args: &[&str]) -> anyhow::Result<CtlWatch> {
        let mut child = Command::new(etcdctl_bin())
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={endpoint}"))
            .arg("watch")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("spawn etcdctl watch")?;
        let mut stdout = child.stdout.take().context("etcdctl stdout")?;
        let out = Arc::new(Mutex::new(String::new()));
        let sink = out.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 8192];
            while let Ok(n) = stdout.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                let text = String::from_utf8_lossy(&buf[..n]);
                sink.lock().unwrap_or_else(|e| e.into_inner()).push_str(&text);
            }
        });
        let stdin = child.stdin.take();
        Ok(CtlWatch { child, stdin, out })
    }

    /// Types a line into `etcdctl watch -i`.
    async fn line(&mut self, line: &str) -> anyhow::Result<()> {
        let stdin = self.stdin.as_mut().context("stdin")?;
        stdin.write_all(format!("{line}\n").as_bytes()).await?;
        stdin.flush().await?;
        Ok(())
    }

    fn output(&self) -> String {
        self.out.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Waits until the output has at least `lines` complete lines.
    async fn wait_lines(&self, lines: usize) -> anyhow::Result<()> {
        self.wait(|out| out.matches('\n').count() >= lines, &format!("{lines} lines")).await
    }

    /// Waits until the output contains `needle`.
    async fn wait_for(&self, needle: &str) -> anyhow::Result<()> {
        self.wait(|out| out.contains(needle), needle).await
    }

    async fn wait(&self, done: impl Fn(&str) -> bool, what: &str) -> anyhow::Result<()> {
        let deadline = Instant::now() + OUTPUT_TIMEOUT;
        while Instant::now() < deadline {
            if done(&self.output()) {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        bail!("etcdctl watch did not print {what:?} in {OUTPUT_TIMEOUT:?}; it printed:\n{}", self.output())
    }
}

impl Drop for CtlWatch {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

async fn ctl(member: &Member, args: &[&str]) -> anyhow::Result<()> {
    member.etcdctl(args).await?.ok()?;
    Ok(())
}

async fn txn(member: &Member, stdin: &str) -> anyhow::Result<()> {
    member.etcdctl_stdin(&["txn"], stdin).await?.ok()?;
    Ok(())
}

/// Drops the warm-up events (`PUT`, key, value) from a simple-format output.
fn without_warm_up(output: &str) -> String {
    let lines: Vec<&str> = output.lines().collect();
    let mut kept = String::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i] == "PUT" && lines.get(i + 1).is_some_and(|l| l.starts_with(READY_PREFIX)) {
            i += 3;
            continue;
        }
        kept.push_str(lines[i]);
        kept.push('\n');
        i += 1;
    }
    kept
}

/// Runs `session` on a fresh etcd and a fresh member of `KV_TEST_SERVER`; their transcripts must match.
async fn compare<F, Fut>(session: F) -> anyhow::Result<()>
where
    F: Fn(Member) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<String>>,
{
    if !etcd_available() {
        return Ok(());
    }
    let start = |kind| Member::start_with(MemberConfig { kind, ..MemberConfig::default() });
    let (etcd, tested) = tokio::try_join!(start(ServerKind::Etcd), start(ServerKind::from_env()))?;
    let (etcd, tested) = tokio::try_join!(session(etcd), session(tested))?;
    if let Some(diff) = line_diff(&etcd, &tested) {
        panic!("etcdctl watch transcripts differ (-etcd +tested):\n{diff}");
    }
    Ok(())
}

/// The acceptance case: `etcdctl watch --prefix /registry --prev-kv` and a watcher of a sub-prefix,
/// both started without `--rev`, while puts, deletes and txns happen.
async fn live_session(member: Member) -> anyhow::Result<String> {
    let endpoint = member.endpoint();
    let all = CtlWatch::start(&endpoint, &["--prefix", "/registry", "--prev-kv"]).await?;
    let pods = CtlWatch::start(&endpoint, &["--prefix", "/registry/pods"]).await?;
    // The watches exist once they print a put made after they started.
    for n in 0.. {
        let key = format!("{READY_PREFIX}{n}");
        ctl(&member, &["put", &key, "ready"]).await?;
        let deadline = Instant::now() + Duration::from_millis(500);
        while Instant::now() < deadline
            && !(all.output().contains(READY_PREFIX) && pods.output().contains(READY_PREFIX))
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if all.output().contains(READY_PREFIX) && pods.output().contains(READY_PREFIX) {
            break;
        }
        if n == 20 {
            bail!("etcdctl watch never started");
        }
    }

    ctl(&member, &["put", "/registry/pods/a", "v1"]).await?;
    ctl(&member, &["put", "/registry/pods/b", "v1"]).await?;
    ctl(&member, &["put", "/registry/pods/a", "v2"]).await?;
    ctl(&member, &["put", "other", "x"]).await?;
    txn(&member, "\nput /registry/pods/c v1\nput /registry/svc/s v1\ndel /registry/pods/b\n\n\n").await?;
    txn(
        &member,
        "value(\"/registry/pods/a\") = \"v2\"\n\nput /registry/pods/a v3\nput /registry/pods/a v4\n\nput x y\n\n",
    )
    .await
    .ok(); // etcd refuses two puts of one key in a branch; the outputs must agree either way
    ctl(&member, &["del", "/registry/pods/", "--prefix"]).await?;
    ctl(&member, &["del", "/registry/missing"]).await?;
    ctl(&member, &["put", "/registry/svc/s", "v2"]).await?;
    ctl(&member, &["del", "/registry/svc/s"]).await?;
    ctl(&member, &["put", "/registry/pods/zz-end", "end"]).await?;
    all.wait_for("/registry/pods/zz-end\nend\n").await?;
    pods.wait_for("/registry/pods/zz-end\nend\n").await?;
    Ok(format!(
        "--- watch --prefix /registry --prev-kv\n{}--- watch --prefix /registry/pods\n{}",
        without_warm_up(&all.output()),
        without_warm_up(&pods.output())
    ))
}

#[tokio::test]
async fn live_watch_output_matches_etcd() -> anyhow::Result<()> {
    compare(live_session).await
}

/// Watchers started at past revisions (`--rev`), in the simple and JSON formats, with a key range.
async fn history_session(member: Member) -> anyhow::Result<String> {
    let mut client = member.client().await?;
    let header = client.get("foo", None).await?.header().cloned().context("header")?;
    let peer = member.peer_url().trim_start_matches("http://").to_owned();
    let masks = Masks::new(header.cluster_id(), header.member_id(), &member.endpoint(), &peer);

    ctl(&member, &["put", "foo", "1"]).await?; // 2
    ctl(&member, &["put", "/registry/a", "1"]).await?; // 3
    ctl(&member, &["put", "/registry/b", "1"]).await?; // 4
    ctl(&member, &["put", "foo", "2"]).await?; // 5
    ctl(&member, &["del", "/registry/a"]).await?; // 6
    txn(&member, "\nput /registry/c 1\nput foo 3\ndel /registry/b\n\n\n").await?; // 7

    let endpoint = member.endpoint();
    let json = CtlWatch::start(&endpoint, &["--prefix", "/registry", "--rev", "1", "-w", "json"]).await?;
    let single = CtlWatch::start(&endpoint, &["foo", "--rev", "3", "--prev-kv"]).await?;
    let range = CtlWatch::start(&endpoint, &["/registry/a", "/registry/c", "--rev", "2"]).await?;
    // Catch-up: one JSON line; foo@5 and foo@7 with prev_kv; a and b put then deleted.
    json.wait_lines(1).await?;
    single.wait_lines(10).await?;
    range.wait_lines(12).await?;

    ctl(&member, &["put", "/registry/b", "2"]).await?; // 8
    json.wait_lines(2).await?;
    range.wait_lines(15).await?;
    txn(&member, "\nput foo 4\nput /registry/a 5\ndel /registry/c\n\n\n").await?; // 9
    json.wait_lines(3).await?;
    single.wait_lines(15).await?;
    range.wait_lines(18).await?;
    ctl(&member, &["compaction", "9"]).await?;
    ctl(&member, &["del", "foo"]).await?; // 10
    json.wait_lines(3).await?;
    single.wait_lines(20).await?;

    // A watcher from a compacted revision.
    let compacted = tokio::time::timeout(OUTPUT_TIMEOUT, member.etcdctl(&["watch", "foo", "--rev", "5"]))
        .await
        .context("etcdctl watch of a compacted revision did not exit")??;
    Ok(format!(
        "--- watch --prefix /registry --rev 1 -w json\n{}--- watch foo --rev 3 --prev-kv\n{}\
         --- watch /registry/a /registry/c --rev 2\n{}--- watch foo --rev 5 (compacted)\n{}stderr: {}\nexit: {:?}\n",
        masks.apply(&json.output()),
        single.output(),
        range.output(),
        compacted.stdout,
        compacted.stderr.lines().filter(|l| !l.starts_with('{')).collect::<Vec<_>>().join("\n"),
        compacted.code,
    ))
}

#[tokio::test]
async fn history_watch_output_matches_etcd() -> anyhow::Result<()> {
    compare(history_session).await
}

/// `etcdctl watch -i`: watches typed on stdin, and `progress`.
async fn interactive_session(member: Member) -> anyhow::Result<String> {
    ctl(&member, &["put", "/registry/a", "1"]).await?; // 2
    ctl(&member, &["put", "/registry/b", "1"]).await?; // 3
    ctl(&member, &["put", "other", "1"]).await?; // 4

    let mut session = CtlWatch::start(&member.endpoint(), &["-i"]).await?;
    session.line("watch --prefix /registry --rev 1").await?;
    session.wait_lines(6).await?;
    session.line("progress").await?;
    session.wait_lines(7).await?;
    session.line("watch other --prev-kv").await?;
    // Progress follows the new watch's creation: the watch exists once it printed.
    session.line("progress").await?;
    session.wait_lines(9).await?;

    ctl(&member, &["put", "other", "2"]).await?; // 5
    session.wait_lines(14).await?;
    ctl(&member, &["put", "/registry/c", "1"]).await?; // 6
    session.wait_lines(17).await?;
    ctl(&member, &["del", "/registry/a"]).await?; // 7
    session.wait_lines(20).await?;
    session.line("progress").await?;
    session.wait_lines(22).await?;
    Ok(session.output())
}

#[tokio::test]
async fn interactive_watch_output_matches_etcd() -> anyhow::Result<()> {
    compare(interactive_session).await
}
