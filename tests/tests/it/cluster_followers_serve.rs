//! Followers serve clients: writes and linearizable reads through any member, with etcdctl and the
//! gRPC client; `endpoint status --cluster` and `member list` tables of a three-member cluster.

use tests::table::Table;
use tests::{Cluster, ClusterMember};

use crate::util::header;

/// Runs etcdctl against one member and returns its stdout, failing the test if it failed.
async fn ctl(member: &ClusterMember, args: &[&str]) -> String {
    let out = member.etcdctl(args).await.expect("run etcdctl");
    out.ok().unwrap_or_else(|err| panic!("etcdctl {args:?} at {}: {err:#}", member.name()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn followers_take_writes_and_serve_linearizable_reads() -> anyhow::Result<()> {
    let cluster = Cluster::start(3).await?;
    let leader = cluster.leader().await?;
    let followers: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    let (a, b) = (cluster.member(followers[0]), cluster.member(followers[1]));

    // A put through one follower is seen at once by a linearizable get through the other.
    for round in 0..5 {
        let (writer, reader) = if round % 2 == 0 { (a, b) } else { (b, a) };
        let value = format!("v{round}");
        assert_eq!(ctl(writer, &["put", "shared", &value]).await, "OK\n");
        assert_eq!(ctl(reader, &["get", "shared"]).await, format!("shared\n{value}\n"));
    }
    assert_eq!(ctl(a, &["del", "shared"]).await, "1\n");
    assert_eq!(ctl(b, &["get", "shared"]).await, "");

    // The same with the gRPC client: the read's revision covers the write.
    let (mut client_a, mut client_b) = (a.client().await?, b.client().await?);
    for i in 0..20 {
        let (writer, reader) = if i % 2 == 0 { (&mut client_a, &mut client_b) } else { (&mut client_b, &mut client_a) };
        let put = writer.put("counter", i.to_string(), None).await?;
        let revision = header(put.header()).revision();
        let got = reader.get("counter", None).await?;
        assert!(header(got.header()).revision() >= revision);
        let kv = got.kvs().first().expect("counter is set");
        assert_eq!((kv.value(), kv.mod_revision()), (i.to_string().as_bytes(), revision));
    }

    // Headers name the member that answered.
    for member in cluster.members() {
        let resp = member.client().await?.get("counter", None).await?;
        assert_eq!(header(resp.header()).member_id(), member.status().await?.member_id);
    }
    Ok(())
}

#[tokio::test]
async fn endpoint_status_and_member_list_tables() -> anyhow::Result<()> {
    let cluster = Cluster::start(3).await?;
    let leader = cluster.leader().await?;
    let follower = cluster.member((leader + 1) % 3);
    for i in 0..10 {
        ctl(follower, &["put", &format!("k{i}"), "v"]).await;
    }
    cluster.wait_converged(&[0, 1, 2]).await?;
    let statuses = cluster.statuses(&[0, 1, 2]).await?;
    // `(hex id, member)`, in etcd's order: member lists are sorted by ID.
    let mut by_id: Vec<(u64, &ClusterMember)> =
        statuses.iter().zip(cluster.members()).map(|(status, member)| (status.member_id, member)).collect();
    by_id.sort_by_key(|(id, _)| *id);
    let by_id: Vec<(String, &ClusterMember)> = by_id.into_iter().map(|(id, m)| (format!("{id:x}"), m)).collect();
    let leader_id = format!("{:x}", statuses[leader].member_id);

    // `endpoint status --cluster` asks one member for the member list, then each member's status.
    let table = Table::parse(&ctl(follower, &["endpoint", "status", "--cluster", "-w", "table"]).await)?;
    assert_eq!(
        table.header,
        [
            "ENDPOINT",
            "ID",
            "VERSION",
            "DB SIZE",
            "IS LEADER",
            "IS LEARNER",
            "RAFT TERM",
            "RAFT INDEX",
            "RAFT APPLIED INDEX",
            "ERRORS"
        ]
    );
    assert_eq!(table.rows.len(), 3, "{table:?}");
    let index = statuses[0].raft_applied_index.to_string();
    let term = statuses[leader].raft_term.to_string();
    for (row, (id, member)) in by_id.iter().enumerate() {
        let is_leader = if *id == leader_id { "true" } else { "false" };
        let client_url = member.client_url();
        let want = [client_url.as_str(), id, "<version>", "<db size>", is_leader, "false", &term, &index, &index, ""];
        let mut got: Vec<&str> = table.rows[row].iter().map(String::as_str).collect();
        // The version (etcd says 3.4.23, ours a 3.5 one) and the database size are the server's own.
        assert!(got[2].split('.').count() == 3, "version {:?}", got[2]);
        // etcdctl prints sizes in B, kB or MB (a fresh sled database may not have flushed its first segment
        // yet: a few hundred bytes).
        assert!([" B", " kB", " MB"].iter().any(|unit| got[3].ends_with(unit)), "db size {:?}", got[3]);
        (got[2], got[3]) = ("<version>", "<db size>");
        assert_eq!(got, want, "row {row} of {table:?}");
    }

    let table = Table::parse(&ctl(follower, &["member", "list", "-w", "table"]).await)?;
    assert_eq!(table.header, ["ID", "STATUS", "NAME", "PEER ADDRS", "CLIENT ADDRS", "IS LEARNER"]);
    let want: Vec<Vec<String>> = by_id
        .iter()
        .map(|(id, member)| {
            [id, "started", member.name(), &member.peer_url(), &member.client_url(), "false"]
                .map(str::to_owned)
                .to_vec()
        })
        .collect();
    assert_eq!(table.rows, want);
    Ok(())
}
