//! `snapshot status <file>`: checks a saved snapshot and prints its hash, revision, key count and
//! size, in etcdctl's four formats.
//!
//! etcdctl 3.4 opens the file as a bbolt database and never checks its digest. Ours checks the
//! digest and the structure (see `raft_node::storage::snapshot_file`) and reports a damaged file with
//! bbolt's texts for the same cases: `invalid database` (truncated, or not a snapshot), `checksum
//! error` (the digest differs), `version mismatch`.

use std::path::Path;

use raft_node::storage::snapshot_file::{self, FileError, Summary};

use crate::error::{CliError, EXIT_ERROR};
use crate::global::WriteOut;
use crate::printer::simple::humanize_bytes;
use crate::printer::table;

pub async fn run(args: &[String], format: WriteOut) -> Result<String, CliError> {
    let [path] = args else {
        return Err(CliError::bad_args("snapshot status requires exactly one argument"));
    };
    let path = path.clone();
    let summary = tokio::task::spawn_blocking(move || status(Path::new(&path)))
        .await
        .map_err(|e| CliError::new(EXIT_ERROR, e.to_string()))??;
    Ok(print(&summary, format))
}

fn status(path: &Path) -> Result<Summary, CliError> {
    // etcd stats the file before it opens it.
    std::fs::metadata(path).map_err(|source| {
        CliError::new(EXIT_ERROR, FileError::Io { op: "stat", path: path.display().to_string(), source }.to_string())
    })?;
    snapshot_file::read(path, true, &mut |_, _, _| Ok(())).map_err(|err| {
        let text = match err {
            FileError::Io { op: "seek", .. } | FileError::MissingDigest | FileError::Invalid(_) => {
                "invalid database".to_string()
            }
            FileError::DigestMismatch { .. } => "checksum error".to_string(),
            other => other.to_string(),
        };
        CliError::new(EXIT_ERROR, text)
    })
}

fn print(summary: &Summary, format: WriteOut) -> String {
    let hash = summary.hash;
    let (revision, keys, size) = (summary.header.revision, summary.records, summary.size);
    match format {
        WriteOut::Json => {
            format!("{{\"hash\":{hash},\"revision\":{revision},\"totalKey\":{keys},\"totalSize\":{size}}}\n")
        }
        WriteOut::Fields => {
            format!("\"Hash\" : {hash}\n\"Revision\" : {revision}\n\"Keys\" : {keys}\n\"Size\" : {size}\n")
        }
        // Protobuf never gets here: `Cli::run` refuses it for this verb.
        WriteOut::Simple | WriteOut::Table | WriteOut::Protobuf => {
            let row = vec![format!("{hash:x}"), revision.to_string(), keys.to_string(), humanize_bytes(size)];
            let rows = (vec!["hash", "revision", "total keys", "total size"], vec![row]);
            if format == WriteOut::Table {
                table::render(&rows)
            } else {
                table::simple(&rows)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use raft_node::storage::snapshot_file::Header;

    use super::*;

    #[test]
    fn prints_like_etcdctl() {
        // etcdctl 3.4's output for a snapshot of real etcd with these values.
        let summary = Summary {
            header: Header { revision: 5, ..Header::default() },
            records: 11,
            hash: 0x25dc_8c0f,
            size: 20480,
        };
        let cases = [
            (WriteOut::Simple, "25dc8c0f, 5, 11, 20 kB\n"),
            (WriteOut::Json, "{\"hash\":635210767,\"revision\":5,\"totalKey\":11,\"totalSize\":20480}\n"),
            (WriteOut::Fields, "\"Hash\" : 635210767\n\"Revision\" : 5\n\"Keys\" : 11\n\"Size\" : 20480\n"),
            (
                WriteOut::Table,
                "+----------+----------+------------+------------+\n\
                 |   HASH   | REVISION | TOTAL KEYS | TOTAL SIZE |\n\
                 +----------+----------+------------+------------+\n\
                 | 25dc8c0f |        5 |         11 |      20 kB |\n\
                 +----------+----------+------------+------------+\n",
            ),
        ];
        for (format, want) in cases {
            assert_eq!(print(&summary, format), want, "{format:?}");
        }
    }

    #[tokio::test]
    async fn damaged_files_get_bbolts_texts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("missing.db");
        let err = run(&[missing.display().to_string()], WriteOut::Simple).await.expect_err("missing");
        assert_eq!((err.code, err.message), (1, format!("stat {}: no such file or directory", missing.display())));
        for (bytes, want) in [(vec![0; 10], "invalid database"), (vec![7; 544], "checksum error")] {
            let path = dir.path().join("bad.db");
            std::fs::write(&path, bytes).expect("write");
            let err = run(&[path.display().to_string()], WriteOut::Simple).await.expect_err(want);
            assert_eq!((err.code, err.message.as_str()), (1, want));
        }
        let err = run(&[], WriteOut::Simple).await.expect_err("no file");
        assert_eq!((err.code, err.message.as_str()), (128, "snapshot status requires exactly one argument"));
    }
}
