//! Seeded random writers and several watch streams; afterwards every watcher's events are checked
//! against the history rebuilt from what the writers did (itself checked against reads at every
//! revision): the same events in the same order, no gap, no duplicate, `prev_kv` right, every revision
//! in one response, and progress notifications never behind an event already received.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use anyhow::Context;
use etcd_client::{
    Client, Compare, CompareOp, DeleteOptions, GetOptions, Txn, TxnOp, TxnOpResponse, WatchFilterType, WatchOptions,
    WatchResponse, WatchStream,
};
use tests::Member;
use tokio::sync::watch;

use crate::watch_util::describe_event;

const KEYS: usize = 8;
const WRITERS: usize = 3;
const OPS_PER_WRITER: usize = 80;

/// splitmix64: a small deterministic generator (the tests crate has no `rand`).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn key(i: usize) -> String {
    format!("r/k{i}")
}

/// One change a request made, in the order it made them.
#[derive(Clone, Debug)]
enum Change {
    Put(String, String),
    Delete(String),
    DeleteRange(String, String),
}

/// A write that took a revision.
#[derive(Clone, Debug)]
struct Write {
    revision: i64,
    changes: Vec<Change>,
}

async fn writer(mut client: Client, seed: u64, id: usize) -> anyhow::Result<Vec<Write>> {
    let mut rng = Rng(seed ^ (id as u64 + 1).wrapping_mul(0x1234_5678_9abc_def1));
    let mut writes = Vec::new();
    for i in 0..OPS_PER_WRITER {
        let value = format!("w{id}-{i}");
        let roll = rng.below(100);
        let write = if roll < 45 {
            let k = key(rng.below(KEYS));
            let resp = client.put(k.as_str(), value.as_str(), None).await?;
            Some((resp.header().context("header")?.revision(), vec![Change::Put(k, value)]))
        } else if roll < 60 {
            let k = key(rng.below(KEYS));
            let resp = client.delete(k.as_str(), None).await?;
            (resp.deleted() > 0).then(|| (resp.header().map_or(0, |h| h.revision()), vec![Change::Delete(k)]))
        } else if roll < 65 {
            let (a, b) = (rng.below(KEYS), rng.below(KEYS));
            let (from, to) = (key(a.min(b)), key(a.max(b) + 1));
            let resp = client.delete(from.as_str(), Some(DeleteOptions::new().with_range(to.as_str()))).await?;
            (resp.deleted() > 0)
                .then(|| (resp.header().map_or(0, |h| h.revision()), vec![Change::DeleteRange(from, to)]))
        } else {
            // A txn over distinct keys; the compare picks the branch.
            let mut picks: Vec<usize> = (0..KEYS).collect();
            let mut branch = |rng: &mut Rng, tag: &str| {
                let n = 1 + rng.below(3);
                (0..n)
                    .map(|j| {
                        let k = key(picks.swap_remove(rng.below(picks.len())));
                        if rng.below(4) == 0 {
                            Change::Delete(k)
                        } else {
                            Change::Put(k, format!("{value}{tag}{j}"))
                        }
                    })
                    .collect::<Vec<_>>()
            };
            let success = branch(&mut rng, "s");
            let failure = branch(&mut rng, "f");
            let op = |c: &Change| match c {
                Change::Put(k, v) => TxnOp::put(k.as_str(), v.as_str(), None),
                Change::Delete(k) => TxnOp::delete(k.as_str(), None),
                Change::DeleteRange(..) => unreachable!("txns delete single keys"),
            };
            let txn = Txn::new()
                .when([Compare::version(key(rng.below(KEYS)), CompareOp::Greater, 0)])
                .and_then(success.iter().map(op).collect::<Vec<_>>())
                .or_else(failure.iter().map(op).collect::<Vec<_>>());
            let resp = client.txn(txn).await?;
            let changes = if resp.succeeded() { success } else { failure };
            let changed = resp.op_responses().iter().any(|r| match r {
                TxnOpResponse::Put(_) => true,
                TxnOpResponse::Delete(d) => d.deleted() > 0,
                _ => false,
            });
            changed.then(|| (resp.header().map_or(0, |h| h.revision()), changes))
        };
        if let Some((revision, changes)) = write {
            writes.push(Write { revision, changes });
        }
    }
    Ok(writes)
}

/// A key's value in the model.
#[derive(Clone, Debug, PartialEq)]
struct ModelKv {
    value: String,
    create: i64,
    modified: i64,
    version: i64,
}

fn describe_model(key: &str, kv: &ModelKv) -> String {
    format!("{key}={}@{}/c{}/v{}", kv.value, kv.modified, kv.create, kv.version)
}

/// One expected event.
#[derive(Clone, Debug)]
struct Expected {
    revision: i64,
    key: String,
    put: bool,
    /// As `describe_event` prints it, without and with `prev_kv`.
    plain: String,
    with_prev: String,
}

/// Replays the writes in revision order; checks the model against a read at every revision.
async fn history(client: &mut Client, mut writes: Vec<Write>) -> anyhow::Result<Vec<Expected>> {
    writes.sort_by_key(|w| w.revision);
    let mut model: BTreeMap<String, ModelKv> = BTreeMap::new();
    let mut events = Vec::new();
    for (expected_rev, write) in (2..).zip(writes) {
        let r = write.revision;
        assert_eq!(r, expected_rev, "every revision comes from exactly one recorded write");
        let delete = |model: &mut BTreeMap<String, ModelKv>, k: &str, events: &mut Vec<Expected>| {
            if let Some(prev) = model.remove(k) {
                let plain = format!("DELETE {k}@{r}");
                events.push(Expected {
                    revision: r,
                    key: k.to_owned(),
                    put: false,
                    with_prev: format!("{plain} prev={}", describe_model(k, &prev)),
                    plain,
                });
            }
        };
        for change in &write.changes {
            match change {
                Change::Put(k, v) => {
                    let prev = model.get(k).cloned();
                    let kv = ModelKv {
                        value: v.clone(),
                        create: prev.as_ref().map_or(r, |p| p.create),
                        modified: r,
                        version: prev.as_ref().map_or(1, |p| p.version + 1),
                    };
                    let plain = format!("PUT {}", describe_model(k, &kv));
                    let with_prev = match &prev {
                        Some(p) => format!("{plain} prev={}", describe_model(k, p)),
                        None => plain.clone(),
                    };
                    events.push(Expected { revision: r, key: k.clone(), put: true, plain, with_prev });
                    model.insert(k.clone(), kv);
                }
                Change::Delete(k) => delete(&mut model, k, &mut events),
                Change::DeleteRange(from, to) => {
                    let doomed: Vec<String> = model.range(from.clone()..to.clone()).map(|(k, _)| k.clone()).collect();
                    for k in doomed {
                        delete(&mut model, &k, &mut events);
                    }
                }
            }
        }
        let read = client.get("r/", Some(GetOptions::new().with_prefix().with_revision(r))).await?;
        let stored: Vec<String> = read.kvs().iter().map(crate::watch_util::describe_kv).collect();
        let modelled: Vec<String> = model.iter().map(|(k, kv)| describe_model(k, kv)).collect();
        assert_eq!(stored, modelled, "the store at revision {r} disagrees with the writes");
    }
    Ok(events)
}

/// What a logical watcher watches.
#[derive(Clone, Debug)]
struct Spec {
    name: &'static str,
    key: String,
    range_end: Option<String>,
    prefix: bool,
    prev_kv: bool,
    no_delete: bool,
    /// 0: from the revision after its creation.
    start: i64,
    /// Cancelled after this many events, then resumed from the last revision + 1 (repeatedly).
    resume_every: Option<usize>,
}

impl Spec {
    fn options(&self, start: i64) -> WatchOptions {
        let mut options = WatchOptions::new().with_start_revision(start);
        if self.prefix {
            options = options.with_prefix();
        }
        if let Some(end) = &self.range_end {
            options = options.with_range(end.as_str());
        }
        if self.prev_kv {
            options = options.with_prev_key();
        }
        if self.no_delete {
            options = options.with_filters([WatchFilterType::NoDelete]);
        }
        options
    }

    fn contains(&self, key: &str) -> bool {
        if self.prefix {
            key.starts_with(&self.key)
        } else if let Some(end) = &self.range_end {
            key >= self.key.as_str() && key < end.as_str()
        } else {
            key == self.key
        }
    }
}

/// What a logical watcher received: (response number, event) in order, and where it started.
#[derive(Debug, Default)]
struct Received {
    first_start: i64,
    events: Vec<(usize, String, i64)>,
}

/// Drives one stream: creates its watchers, cancels and resumes, requests progress now and then, and
/// checks progress notifications as they come. Ends once told the final revision and caught up.
async fn drive(
    mut stream: WatchStream,
    specs: Vec<Spec>,
    mut finish: watch::Receiver<i64>,
    check_progress: bool,
) -> anyhow::Result<Vec<Received>> {
    let mut received: Vec<Received> = specs.iter().map(|_| Received::default()).collect();
    let mut by_id: BTreeMap<i64, usize> = BTreeMap::new();
    let mut pending: VecDeque<usize> = VecDeque::new();
    let mut since_resume: Vec<usize> = vec![0; specs.len()];
    let mut last_rev: Vec<i64> = vec![0; specs.len()];
    let mut max_event_rev = 0;
    let mut max_progress = 0;
    let mut responses = 0usize;
    let mut final_rev: Option<i64> = None;
    // The initial create was sent with the stream; the others follow.
    pending.push_back(0);
    for (i, spec) in specs.iter().enumerate().skip(1) {
        stream.watch(spec.key.as_str(), Some(spec.options(spec.start))).await?;
        pending.push_back(i);
    }
    let mut done_at: Option<tokio::time::Instant> = None;
    loop {
        let timeout = match done_at {
            Some(at) => at.saturating_duration_since(tokio::time::Instant::now()),
            None => Duration::from_secs(30),
        };
        let resp: WatchResponse = tokio::select! {
            changed = finish.changed(), if final_rev.is_none() => {
                changed?;
                final_rev = Some(*finish.borrow());
                stream.request_progress().await?;
                continue;
            }
            msg = tokio::time::timeout(timeout, stream.message()) => match msg {
                Ok(msg) => msg?.context("the watch stream ended")?,
                Err(_) if done_at.is_some() => break,
                Err(_) => anyhow::bail!("no watch response in 30 s"),
            },
        };
        responses += 1;
        if done_at.is_some() {
            // Wait for quiet: whatever is still under way (a resumed watcher catching up) arrives first.
            done_at = Some(tokio::time::Instant::now() + Duration::from_millis(500));
        }
        let id = resp.watch_id();
        if resp.created() {
            let logical = pending.pop_front().context("a created response nobody asked for")?;
            assert!(!resp.canceled(), "{}: create refused: {}", specs[logical].name, resp.cancel_reason());
            let header_rev = resp.header().context("header")?.revision();
            if received[logical].first_start == 0 {
                received[logical].first_start =
                    if specs[logical].start == 0 { header_rev + 1 } else { specs[logical].start };
            }
            received[logical].events.push((responses, "CREATED".to_owned(), 0));
            by_id.insert(id, logical);
            continue;
        }
        if resp.canceled() {
            assert_eq!(resp.compact_revision(), 0, "nothing is compacted");
            let logical = by_id.remove(&id).context("cancel of an unknown watcher")?;
            // Resume right after the last event received.
            let spec = &specs[logical];
            stream.watch(spec.key.as_str(), Some(spec.options(last_rev[logical] + 1))).await?;
            pending.push_back(logical);
            continue;
        }
        let header_rev = resp.header().context("header")?.revision();
        if resp.events().is_empty() {
            // A progress notification: never behind what came before, never going back.
            assert_eq!(id, -1, "only requested progress notifications are expected");
            if check_progress {
                assert!(header_rev >= max_event_rev, "progress {header_rev} precedes an event at {max_event_rev}");
                assert!(header_rev >= max_progress, "progress went back from {max_progress} to {header_rev}");
                max_progress = header_rev;
                // Every watcher of the stream has everything up to it (checked at the end).
                for (logical, r) in received.iter_mut().enumerate() {
                    if by_id.values().any(|l| *l == logical) {
                        r.events.push((responses, format!("PROGRESS {header_rev}"), header_rev));
                    }
                }
            }
            if final_rev.is_some_and(|f| header_rev >= f) && done_at.is_none() {
                done_at = Some(tokio::time::Instant::now() + Duration::from_millis(500));
            }
            continue;
        }
        let logical = *by_id.get(&id).context("events for an unknown watcher")?;
        for event in resp.events() {
            let rev = event.kv().map_or(0, |kv| kv.mod_revision());
            max_event_rev = max_event_rev.max(rev);
            last_rev[logical] = rev;
            received[logical].events.push((responses, describe_event(event), rev));
            since_resume[logical] += 1;
        }
        if let Some(every) = specs[logical].resume_every {
            if since_resume[logical] >= every {
                since_resume[logical] = 0;
                stream.cancel(id).await?;
            }
        }
        if responses.is_multiple_of(17) {
            stream.request_progress().await?;
        }
    }
    Ok(received)
}

/// `lenient_prev_kv`: accept an event without the `prev_kv` it should carry. etcd 3.4 registers a watcher
/// before it records that the watcher wants `prev_kv`, so the first events of a watcher created while
/// writes go on may lack it.
fn check(spec: &Spec, received: &Received, history: &[Expected], lenient_prev_kv: bool) {
    let want: Vec<&Expected> = history
        .iter()
        .filter(|e| e.revision >= received.first_start && spec.contains(&e.key) && (e.put || !spec.no_delete))
        .collect();
    let got: Vec<&(usize, String, i64)> =
        received.events.iter().filter(|(_, e, _)| !e.starts_with("PROGRESS") && e != "CREATED").collect();
    let want_text: Vec<&str> =
        want.iter().map(|e| if spec.prev_kv { e.with_prev.as_str() } else { e.plain.as_str() }).collect();
    let got_text: Vec<&str> = got
        .iter()
        .enumerate()
        .map(|(i, (_, e, _))| match want.get(i) {
            Some(w) if lenient_prev_kv && e == &w.plain => want_text[i],
            _ => e.as_str(),
        })
        .collect();
    if let Some(diff) = tests::diff::line_diff(&want_text.join("\n"), &got_text.join("\n")) {
        panic!("{}: events differ from the history (-expected +received):\n{diff}", spec.name);
    }
    // A revision never spans two responses.
    for pair in got.windows(2) {
        if pair[0].2 == pair[1].2 {
            assert_eq!(pair[0].0, pair[1].0, "{}: revision {} split across responses", spec.name, pair[0].2);
        }
    }
    // After a progress notification at N, no event at or below N arrives for this watcher.
    let mut progress = 0;
    for (_, text, rev) in &received.events {
        if text.starts_with("PROGRESS") {
            progress = progress.max(*rev);
        } else if text == "CREATED" {
            // A resumed watcher starts again after its last event, which may precede a progress revision.
            progress = 0;
        } else {
            assert!(*rev > progress, "{}: event at {rev} after progress {progress}", spec.name);
        }
    }
}

async fn run(seed: u64) -> anyhow::Result<()> {
    let member = Member::start().await?;
    // etcd 3.4.23 answers a progress request at once, ahead of events still on their way to a watcher
    // that is catching up (etcd#15220, fixed in 3.4.31 and 3.5.13, the versions kube-apiserver needs for
    // progress requests): the progress checks hold only for a server with the fix.
    let check_progress = member.kind() == tests::ServerKind::Ours;
    // etcd 3.4.23 also may send a new watcher's first events without the prev_kv it asked for.
    let lenient_prev_kv = member.kind() == tests::ServerKind::Etcd;
    let spec = |name, key: &str| Spec {
        name,
        key: key.to_owned(),
        range_end: None,
        prefix: false,
        prev_kv: false,
        no_delete: false,
        start: 0,
        resume_every: None,
    };
    let streams: Vec<Vec<Spec>> = vec![
        vec![
            Spec { prefix: true, prev_kv: true, start: 1, ..spec("all from 1 with prev_kv", "r/") },
            Spec { prev_kv: true, ..spec("k3 live with prev_kv", "r/k3") },
        ],
        vec![
            Spec { range_end: Some(key(5)), no_delete: true, ..spec("k2..k5 puts only", "r/k2") },
            Spec { prefix: true, resume_every: Some(23), start: 1, ..spec("all, cancelled and resumed", "r/") },
        ],
        vec![
            Spec { prefix: true, prev_kv: true, resume_every: Some(7), ..spec("all live, resumed, prev_kv", "r/") },
            Spec { start: 3, resume_every: Some(2), ..spec("k0 from 3, resumed", "r/k0") },
        ],
    ];
    let (finish_tx, finish_rx) = watch::channel(0i64);
    let mut drivers = Vec::new();
    for specs in streams.clone() {
        let first = &specs[0];
        let client = member.client().await?;
        let stream = client.watch_client().watch(first.key.as_str(), Some(first.options(first.start))).await?;
        drivers.push(tokio::spawn(drive(stream, specs, finish_rx.clone(), check_progress)));
    }
    let writers: Vec<_> = (0..WRITERS)
        .map(|id| {
            let endpoint = member.endpoint();
            tokio::spawn(async move {
                let client = Client::connect([endpoint], None).await?;
                writer(client, seed, id).await
            })
        })
        .collect();
    // A late watcher from a past revision joins once the writers are under way.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let late_specs = vec![Spec { prefix: true, prev_kv: true, start: 2, ..spec("late from 2", "r/") }];
    let late_stream = member.client().await?.watch_client().watch("r/", Some(late_specs[0].options(2))).await?;
    let late = tokio::spawn(drive(late_stream, late_specs.clone(), finish_rx.clone(), check_progress));
    let mut writes = Vec::new();
    for w in writers {
        writes.extend(w.await??);
    }
    let mut client = member.client().await?;
    let final_rev = crate::util::current_revision(&mut client).await?;
    finish_tx.send(final_rev)?;
    let history = history(&mut client, writes).await?;
    assert_eq!(history.last().map(|e| e.revision), Some(final_rev));

    for (specs, driver) in streams.iter().zip(drivers) {
        let received = driver.await??;
        for (spec, got) in specs.iter().zip(&received) {
            check(spec, got, &history, lenient_prev_kv);
        }
    }
    let received = late.await??;
    check(&late_specs[0], &received[0], &history, lenient_prev_kv);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn random_writes_reach_every_watcher_exactly() -> anyhow::Result<()> {
    let seeds: Vec<u64> = match std::env::var("WATCH_SEED") {
        Ok(seed) => vec![seed.parse()?],
        Err(_) => vec![1, 2],
    };
    for seed in seeds {
        run(seed).await.with_context(|| format!("seed {seed} (rerun with WATCH_SEED={seed})"))?;
    }
    Ok(())
}
