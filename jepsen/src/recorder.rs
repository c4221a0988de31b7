//! Recording a history as it happens: one clock for the whole run, fresh process ids, and every op
//! appended to `history.jsonl` at once, so that a harness crash still leaves a readable prefix.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::history::{self, Op};

/// The run's monotonic clock; `time_ns` of every op and nemesis event counts from its start.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: Instant,
}

impl Clock {
    pub fn start() -> Clock {
        Clock { start: Instant::now() }
    }

    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    pub fn now_ns(&self) -> u64 {
        u64::try_from(self.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// The history of one run, shared by every worker.
pub struct Recorder<P> {
    clock: Clock,
    next_process: AtomicU64,
    inner: Mutex<Inner<P>>,
}

struct Inner<P> {
    file: BufWriter<File>,
    ops: Vec<Op<P>>,
    /// The first write error; reported by [`Recorder::finish`], which keeps a broken disk from
    /// stopping the workers mid-op.
    error: Option<Error>,
}

impl<P: Serialize> Recorder<P> {
    pub fn create(path: &Path, clock: Clock) -> Result<Recorder<P>> {
        let file = File::create(path).map_err(Error::system(format!("create {}", path.display())))?;
        Ok(Recorder {
            clock,
            next_process: AtomicU64::new(0),
            inner: Mutex::new(Inner { file: BufWriter::new(file), ops: Vec::new(), error: None }),
        })
    }

    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// A process id never used before in this run.
    pub fn fresh_process(&self) -> u64 {
        self.next_process.fetch_add(1, Ordering::Relaxed)
    }

    /// Appends the op `make` builds from the current time. Time is read under the lock, so the file
    /// is in time order and a completion always follows its invocation.
    pub fn record(&self, make: impl FnOnce(u64) -> Op<P>) {
        let mut inner = self.lock();
        let op = make(self.clock.now_ns());
        let written = history::write_record(&mut inner.file, &op)
            .and_then(|()| inner.file.flush().map_err(Error::system("write history.jsonl")));
        if let Err(err) = written {
            inner.error.get_or_insert(err);
        }
        inner.ops.push(op);
    }

    /// Every op recorded, in order; fails when some could not be written to the file.
    pub fn finish(&self) -> Result<Vec<Op<P>>> {
        let mut inner = self.lock();
        if let Some(err) = inner.error.take() {
            return Err(err);
        }
        Ok(std::mem::take(&mut inner.ops))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<P>> {
        // A panicking worker cannot leave `Inner` half-updated in a way that matters here.
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::register::RegisterOp;
    use crate::history::{read_jsonl, OpType};

    #[test]
    fn writes_what_it_keeps_in_time_order() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("history.jsonl");
        let recorder: Recorder<RegisterOp> = Recorder::create(&path, Clock::start()).expect("create");
        let (p0, p1) = (recorder.fresh_process(), recorder.fresh_process());
        assert_ne!(p0, p1);
        recorder.record(|t| Op::invoke(p0, RegisterOp::Read(None), t).with_key("k"));
        recorder.record(|t| Op::new(p0, OpType::Ok, RegisterOp::Read(None), t).with_key("k"));
        let ops = recorder.finish().expect("finish");
        assert_eq!(ops.len(), 2);
        assert!(ops[0].time_ns <= ops[1].time_ns);
        let text = std::fs::read(&path).expect("read");
        let back: Vec<Op<RegisterOp>> = read_jsonl(&text[..]).expect("jsonl");
        assert_eq!(back, ops);
    }
}
