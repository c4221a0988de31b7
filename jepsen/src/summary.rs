//! What a run found, as `summary.json` holds it: the verdict, the op counts, the checkers' results, the
//! faults injected. The report and its HTML pages both render it.

use serde::Serialize;

use crate::checker::{CheckResult, Validity};
use crate::history::{Op, OpType};
use crate::nemesis::NemesisEvent;
use crate::options::TestOptions;

/// How many ops ended which way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct OpCounts {
    pub invoked: usize,
    pub ok: usize,
    pub fail: usize,
    pub info: usize,
}

impl OpCounts {
    pub fn of<P>(ops: &[Op<P>]) -> OpCounts {
        let mut counts = OpCounts::default();
        for op in ops {
            match op.kind {
                OpType::Invoke => counts.invoked += 1,
                OpType::Ok => counts.ok += 1,
                OpType::Fail => counts.fail += 1,
                OpType::Info => counts.info += 1,
            }
        }
        counts
    }
}

/// Everything `summary.json` holds.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub run: String,
    pub valid: Validity,
    pub options: TestOptions,
    pub ops: OpCounts,
    pub results: Vec<CheckResult>,
    /// What a reader must know to judge the verdict (checks that were skipped and why).
    pub notes: Vec<String>,
    pub faults: Vec<NemesisEvent>,
    pub duration_secs: f64,
}
