//! etcdutl's output formats for `snapshot status` and `hashkv` (etcdutl 3.6's `printer_*.go`).

use kv_api::hash::KvHash;
use kv_api::snapshot::Contents;
use kvctl::error::{CliError, EXIT_BAD_FEATURE};
use kvctl::printer::simple::humanize_bytes;
use kvctl::printer::table;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Simple,
    Fields,
    Json,
    Table,
}

impl Format {
    /// `-w`'s value; protobuf and anything else are refused as etcdutl refuses them.
    pub fn parse(name: &str) -> Result<Self, CliError> {
        match name {
            "simple" => Ok(Format::Simple),
            "fields" => Ok(Format::Fields),
            "json" => Ok(Format::Json),
            "table" => Ok(Format::Table),
            "protobuf" => Err(CliError::new(EXIT_BAD_FEATURE, "protobuf not supported as output format")),
            _ => Err(CliError::new(EXIT_BAD_FEATURE, "unsupported output format")),
        }
    }

    /// etcdutl 3.6's status: total keys counts the keys alive at the last revision.
    pub fn status(self, status: &Contents) -> Result<String, CliError> {
        let Contents { hash, revision, live_keys, size, .. } = status;
        let version = &status.storage_version;
        Ok(match self {
            Format::Json => format!(
                "{{\"hash\":{hash},\"revision\":{revision},\"totalKey\":{live_keys},\"totalSize\":{size},\"version\":{}}}\n",
                serde_json::Value::from(version.as_str())
            ),
            Format::Fields => format!(
                "\"Hash\" : {hash}\n\"Revision\" : {revision}\n\"Keys\" : {live_keys}\n\"Size\" : {size}\n\"Version\" : {version}\n"
            ),
            Format::Simple | Format::Table => {
                let row = vec![
                    format!("{hash:x}"),
                    revision.to_string(),
                    live_keys.to_string(),
                    humanize_bytes(*size),
                    version.clone(),
                ];
                self.rows((vec!["hash", "revision", "total keys", "total size", "version"], vec![row]))
            }
        })
    }

    pub fn hash_kv(self, hash: &KvHash) -> Result<String, CliError> {
        let KvHash { hash, hash_revision, compact_revision, .. } = hash;
        Ok(match self {
            Format::Json => {
                format!("{{\"hash\":{hash},\"hashRevision\":{hash_revision},\"compactRevision\":{compact_revision}}}\n")
            }
            Format::Fields => format!(
                "\"Hash\" : {hash}\n\"Hash revision\" : {hash_revision}\n\"Compact revision\" : {compact_revision}\n"
            ),
            Format::Simple | Format::Table => {
                let row = vec![hash.to_string(), hash_revision.to_string(), compact_revision.to_string()];
                self.rows((vec!["hash", "hash revision", "compact revision"], vec![row]))
            }
        })
    }

    fn rows(self, rows: table::Table) -> String {
        if self == Format::Table {
            table::render(&rows)
        } else {
            table::simple(&rows)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_prints_as_etcdutl_36() {
        let status = Contents {
            hash: 0x080f_f59a,
            revision: 8,
            live_keys: 4,
            entries: 18,
            size: 73728,
            storage_version: "3.6.0".into(),
            ..Contents::default()
        };
        let cases = [
            (Format::Simple, "80ff59a, 8, 4, 74 kB, 3.6.0\n"),
            (
                Format::Json,
                "{\"hash\":135263642,\"revision\":8,\"totalKey\":4,\"totalSize\":73728,\"version\":\"3.6.0\"}\n",
            ),
            (
                Format::Fields,
                "\"Hash\" : 135263642\n\"Revision\" : 8\n\"Keys\" : 4\n\"Size\" : 73728\n\"Version\" : 3.6.0\n",
            ),
            (
                Format::Table,
                "+---------+----------+------------+------------+---------+\n\
                 |  HASH   | REVISION | TOTAL KEYS | TOTAL SIZE | VERSION |\n\
                 +---------+----------+------------+------------+---------+\n\
                 | 80ff59a |        8 |          4 |      74 kB |   3.6.0 |\n\
                 +---------+----------+------------+------------+---------+\n",
            ),
        ];
        for (format, want) in cases {
            assert_eq!(format.status(&status).expect("prints"), want, "{format:?}");
        }
    }

    #[test]
    fn hashkv_prints_as_etcdutl() {
        let hash = KvHash { hash: 42, current_revision: 12, compact_revision: 3, hash_revision: 9 };
        assert_eq!(Format::Simple.hash_kv(&hash).expect("prints"), "42, 9, 3\n");
        assert_eq!(
            Format::Json.hash_kv(&hash).expect("prints"),
            "{\"hash\":42,\"hashRevision\":9,\"compactRevision\":3}\n"
        );
        assert_eq!(
            Format::Fields.hash_kv(&hash).expect("prints"),
            "\"Hash\" : 42\n\"Hash revision\" : 9\n\"Compact revision\" : 3\n"
        );
    }
}
