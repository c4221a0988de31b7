//! The MVCC store against a naive model that keeps the whole key space at every revision, driven by seeded
//! random operations: puts, deletes, txns (nested, with compares over ranges), compactions, commits, reopens
//! and snapshot installs, with random ranges read at random revisions after every step.
//!
//! On a mismatch the test panics with the seed and the step number; `MODEL_SEED=<n>` replays one seed.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;

use kv_api::revision::Revision;
use kv_api::validate::{self, Limits};
use kv_api::{Bucket, Command, CommandResponse, Error, MemBackend, MvccStore};
use proto::etcdserverpb as pb;
use proto::mvccpb::KeyValue;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const SEEDS: [u64; 6] = [1, 2, 3, 42, 1234, 98765];
const STEPS: usize = 2500;
/// Few, short keys, so that ranges overlap and keys collide often. At most 12, so that etcd's sort (an
/// insertion sort below 12 elements) is stable and ties come out in key order, as the store does.
const KEYS: [&str; 10] = ["a", "a/1", "a/2", "b", "b/1", "c", "c/1", "d", "e", "f"];
/// Never written, for ranges and compares that start or end between keys.
const GAPS: [&str; 4] = ["0", "a/", "b/0", "z"];
const VALUES: [&str; 4] = ["", "x", "y", "z"];

type State = BTreeMap<Vec<u8>, KeyValue>;

mod gen;
mod naive;

use gen::*;
use naive::*;

/// Where a run is, for failure messages.
struct Ctx {
    seed: u64,
    step: usize,
}

impl Ctx {
    fn check<T: PartialEq + Debug>(&self, what: &str, request: &dyn Debug, store: &T, model: &T) {
        if store == model {
            return;
        }
        let (s, m) = (format!("{store:#?}"), format!("{model:#?}"));
        let (s_lines, m_lines): (Vec<&str>, Vec<&str>) = (s.lines().collect(), m.lines().collect());
        let first = s_lines.iter().zip(&m_lines).position(|(a, b)| a != b).unwrap_or(s_lines.len().min(m_lines.len()));
        let context = m_lines[first.saturating_sub(6)..first.min(m_lines.len())].join("\n");
        panic!(
            "seed {} step {}: {what} differs (replay with MODEL_SEED={})\nrequest: {request:?}\n\
             first difference, after:\n{context}\n  store: {}\n  model: {}\n\nstore: {s}\nmodel: {m}",
            self.seed,
            self.step,
            self.seed,
            s_lines.get(first).unwrap_or(&"<end>"),
            m_lines.get(first).unwrap_or(&"<end>"),
        );
    }
}

fn stored_revisions(store: &MvccStore) -> Vec<i64> {
    // The compactor deletes freed revisions in the background; the model's are gone at once.
    store.wait_compacted();
    let mut revs: Vec<i64> = store
        .export()
        .expect("export")
        .into_iter()
        .filter(|(bucket, _, _)| *bucket == Bucket::Key)
        .map(|(_, key, _)| Revision::from_bytes(&key).expect("a revision key").main)
        .collect();
    revs.sort_unstable();
    revs
}

#[derive(Default, Debug)]
struct Tally {
    writes: usize,
    errors: usize,
    rejected_txns: usize,
    reads: usize,
    compactions: usize,
    reopens: usize,
}

fn run(seed: u64) -> Tally {
    let mut gen = Gen { rng: StdRng::seed_from_u64(seed) };
    let mut backend = Arc::new(MemBackend::default());
    let mut store = MvccStore::open(backend.clone()).expect("open");
    // The leases the generated puts use (granting takes no revision, so the model need not know).
    for id in [1, 2] {
        store.apply(&Command::LeaseGrant(pb::LeaseGrantRequest { ttl: 60, id })).expect("grant a lease");
    }
    let mut model = Model::new();
    let mut tally = Tally::default();
    let limits = Limits::default();
    for step in 0..STEPS {
        let ctx = Ctx { seed, step };
        let (compacted, current) = (model.compacted, model.current());
        let cmd = match gen.rng.gen_range(0..100) {
            0..=34 => Command::Put(gen.put()),
            35..=49 => Command::DeleteRange(gen.delete()),
            50..=94 => Command::Txn(gen.txn(compacted, current, 0)),
            _ => Command::Compact(pb::CompactionRequest {
                revision: gen.rng.gen_range((compacted - 1).max(1)..=current + 1),
                physical: gen.rng.gen_bool(0.5),
            }),
        };
        // What the server checks before proposing; a refused request never reaches the store.
        let valid = match &cmd {
            Command::Put(req) => validate::check_put(req),
            Command::DeleteRange(req) => validate::check_delete(req),
            Command::Txn(req) => validate::check_txn(req, &limits),
            Command::Compact(_)
            | Command::LeaseGrant(_)
            | Command::LeaseRevoke(_)
            | Command::Alarm(_)
            | Command::Downgrade(_)
            | Command::Auth(_)
            | Command::AsUser(..) => Ok(()),
        };
        match valid {
            Ok(()) => {}
            Err(Error::DuplicateKey) => {
                tally.rejected_txns += 1;
                continue;
            }
            Err(err) => panic!("seed {seed} step {step}: generated an invalid request ({err}): {cmd:?}"),
        }

        let want = model.apply(&cmd);
        let got = match &cmd {
            // A read-only txn is served without consensus; both ways must answer the same.
            Command::Txn(req) if kv_api::command::is_read_only(req) && gen.rng.gen_bool(0.5) => {
                store.txn_read_only(req).map(CommandResponse::Txn)
            }
            cmd => store.apply(cmd),
        };
        ctx.check("response", &cmd, &got, &want);
        tally.writes += 1;
        tally.errors += usize::from(want.is_err());
        tally.compactions += usize::from(matches!((&cmd, &want), (Command::Compact(_), Ok(_))));
        ctx.check("current revision", &cmd, &store.current_revision(), &model.current());
        ctx.check("compacted revision", &cmd, &store.compacted_revision(), &model.compacted);
        let live = model.state(model.current()).len() as i64;
        ctx.check("live keys", &cmd, &store.live_keys(), &live);

        if gen.rng.gen_bool(0.3) {
            store.commit().expect("commit");
            ctx.check("stored revisions", &"commit", &stored_revisions(&store), &model.stored_revisions());
            match gen.rng.gen_range(0..100) {
                0..=1 => {
                    store = MvccStore::open(backend.clone()).expect("reopen");
                    tally.reopens += 1;
                }
                2 => {
                    // A snapshot installed on another member.
                    let entries = store.export().expect("export");
                    backend = Arc::new(MemBackend::default());
                    store = MvccStore::open(backend.clone()).expect("open");
                    store.install(entries).expect("install");
                    tally.reopens += 1;
                }
                _ => {}
            }
            ctx.check("current revision after reopen", &"reopen", &store.current_revision(), &model.current());
            ctx.check("compacted revision after reopen", &"reopen", &store.compacted_revision(), &model.compacted);
            let live = model.state(model.current()).len() as i64;
            ctx.check("live keys after reopen", &"reopen", &store.live_keys(), &live);
        }

        for _ in 0..2 {
            let req = gen.range(model.compacted, model.current());
            ctx.check("range", &req, &store.range(&req), &model.range(&req));
            tally.reads += 1;
        }
    }
    tally
}

#[test]
fn store_matches_the_model() {
    let seeds: Vec<u64> = match std::env::var("MODEL_SEED") {
        Ok(seed) => vec![seed.parse().expect("MODEL_SEED is a number")],
        Err(_) => SEEDS.to_vec(),
    };
    for seed in seeds {
        let tally = run(seed);
        eprintln!("seed {seed}: {tally:?}");
        // The generator must exercise what it is meant to.
        assert!(tally.writes > STEPS / 2, "seed {seed}: {tally:?}");
        assert!(tally.errors > 10, "seed {seed}: {tally:?}");
        assert!(tally.compactions > 10, "seed {seed}: {tally:?}");
        assert!(tally.reopens > 3, "seed {seed}: {tally:?}");
    }
}
