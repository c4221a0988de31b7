//! One comparison line of a txn (`mod("k") > "3"`), parsed as etcdctl 3.4's `parseCompare` does,
//! including its error texts and its crashes.

use proto::etcdserverpb as pb;

use super::go_syntax::Scanner;
use super::Abort;
use crate::error::{CliError, EXIT_INVALID_INPUT};
use crate::printer::fields::go_quote;

use pb::compare::{CompareResult, CompareTarget, TargetUnion};

/// What `fmt.Sscanf(rest, "%q) %s %q", &key, &op, &val)` filled in before it stopped.
#[derive(Debug, Default)]
struct Scanned {
    key: Vec<u8>,
    op: String,
    val: Vec<u8>,
    count: usize,
}

impl Scanned {
    /// Scans as far as the input allows; like Sscanf, later items keep their zero value.
    fn scan(rest: &str) -> Scanned {
        let mut scanned = Scanned::default();
        let mut s = Scanner::new(rest);
        let _ = (|| {
            scanned.key = s.quoted()?;
            scanned.count = 1;
            s.literal(')')?;
            s.format_space()?;
            scanned.op = s.word()?;
            scanned.count = 2;
            s.format_space()?;
            scanned.val = s.quoted()?;
            scanned.count = 3;
            Some(())
        })();
        scanned
    }
}

/// Parses one comparison; `line` is already trimmed.
pub fn parse(line: &str) -> Result<pb::Compare, Abort> {
    let malformed = |detail: String| Abort::Exit(CliError::new(EXIT_INVALID_INPUT, detail));
    let Some((target, rest)) = line.split_once('(') else {
        return Err(malformed(format!("malformed comparison: {line}")));
    };
    let Scanned { key, op, val, count } = Scanned::scan(rest);
    if count != 3 {
        return Err(malformed(format!(
            "malformed comparison: {line}; got {target}({}) {op} {}",
            go_quote(&key),
            go_quote(&val)
        )));
    }
    let invalid = || Abort::Exit(CliError::new(EXIT_INVALID_INPUT, format!("invalid txn compare request: {line}")));
    // `strconv.ParseInt(val, 10, 64)`; the operator is only looked at once the number parsed.
    let number = || std::str::from_utf8(&val).ok().and_then(|v| v.parse::<i64>().ok()).ok_or_else(invalid);
    let (target, union) = match target {
        "ver" | "version" => (CompareTarget::Version, TargetUnion::Version(number()?)),
        "c" | "create" => (CompareTarget::Create, TargetUnion::CreateRevision(number()?)),
        "m" | "mod" => (CompareTarget::Mod, TargetUnion::ModRevision(number()?)),
        "val" | "value" => (CompareTarget::Value, TargetUnion::Value(val.clone())),
        "lease" => {
            // etcdctl 3.4 hands clientv3.Compare the value as a string, which it rejects with a
            // panic ("bad value") once the operator passed; no lease comparison ever succeeds.
            result(&op)?;
            return Err(Abort::Panic("bad value".to_string()));
        }
        _ => return Err(malformed(format!("malformed comparison: {line} (unknown target {target})"))),
    };
    Ok(pb::Compare {
        result: result(&op)? as i32,
        target: target as i32,
        key,
        range_end: Vec::new(),
        target_union: Some(union),
    })
}

/// clientv3.Compare's operators; any other panics.
fn result(op: &str) -> Result<CompareResult, Abort> {
    match op {
        "=" => Ok(CompareResult::Equal),
        "!=" => Ok(CompareResult::NotEqual),
        ">" => Ok(CompareResult::Greater),
        "<" => Ok(CompareResult::Less),
        _ => Err(Abort::Panic("Unknown result op".to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmp(target: CompareTarget, result: CompareResult, key: &str, union: TargetUnion) -> pb::Compare {
        pb::Compare {
            result: result as i32,
            target: target as i32,
            key: key.into(),
            range_end: vec![],
            target_union: Some(union),
        }
    }

    #[test]
    fn parses_every_target() {
        use CompareResult::*;
        use CompareTarget::*;
        let cases = [
            (r#"value("k1") = "v1""#, cmp(Value, Equal, "k1", TargetUnion::Value(b"v1".to_vec()))),
            (r#"val(`k 1`) != `v"1` extra"#, cmp(Value, NotEqual, "k 1", TargetUnion::Value(b"v\"1".to_vec()))),
            (r#"ver("k") > "0""#, cmp(Version, Greater, "k", TargetUnion::Version(0))),
            (r#"version("k")   <   "-2""#, cmp(Version, Less, "k", TargetUnion::Version(-2))),
            (r#"c("k") = "5""#, cmp(Create, Equal, "k", TargetUnion::CreateRevision(5))),
            (r#"create("\x41") = "+5""#, cmp(Create, Equal, "A", TargetUnion::CreateRevision(5))),
            (r#"m("k") != "7""#, cmp(Mod, NotEqual, "k", TargetUnion::ModRevision(7))),
        ];
        for (line, want) in cases {
            assert_eq!(parse(line), Ok(want), "{line}");
        }
    }

    #[test]
    fn errors_like_etcdctl() {
        let exit = |msg: &str| Err(Abort::Exit(CliError::new(EXIT_INVALID_INPUT, msg)));
        let cases = [
            (r#"value "k1" = "v1""#, exit(r#"malformed comparison: value "k1" = "v1""#)),
            (r#"value("k1")="v1""#, exit(r#"malformed comparison: value("k1")="v1"; got value("k1")  """#)),
            (r#"value("k1") ="#, exit(r#"malformed comparison: value("k1") =; got value("k1") = """#)),
            (r#"value(k1) = "v1""#, exit(r#"malformed comparison: value(k1) = "v1"; got value("")  """#)),
            (r#"val("k1) = "v""#, exit(r#"malformed comparison: val("k1) = "v"; got val("k1) = ")  """#)),
            (r#"foo("k1") = "v1""#, exit(r#"malformed comparison: foo("k1") = "v1" (unknown target foo)"#)),
            (r#"ver("k1") = "x""#, exit(r#"invalid txn compare request: ver("k1") = "x""#)),
            (r#"ver("k1") == "x""#, exit(r#"invalid txn compare request: ver("k1") == "x""#)),
            (r#"ver("k1") == "1""#, Err(Abort::Panic("Unknown result op".into()))),
            (r#"value("k1") == "v""#, Err(Abort::Panic("Unknown result op".into()))),
            (r#"lease("k1") = "0""#, Err(Abort::Panic("bad value".into()))),
            (r#"lease("k1") == "0""#, Err(Abort::Panic("Unknown result op".into()))),
        ];
        for (line, want) in cases {
            assert_eq!(parse(line), want, "{line}");
        }
    }
}
