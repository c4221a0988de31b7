//! `--config-file`: etcd's YAML configuration file. Its keys are the flag names (`name`, `data-dir`,
//! `listen-client-urls`, ...), with the TLS settings of each side under `client-transport-security` and
//! `peer-transport-security`, as etcd writes them. The file is turned into the equivalent flags, so every
//! value is checked exactly as on the command line; as in etcd, the other flags and the `ETCD_*`
//! variables are then ignored.

use std::path::Path;

use serde_yaml::Value;

/// A configuration file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("cannot read the config file {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("the config file {path} is not valid YAML: {source}")]
    Yaml { path: String, source: serde_yaml::Error },
    #[error("the config file {path} is not a mapping of etcd's configuration keys")]
    NotAMapping { path: String },
    #[error("the config file {path} has a bad value for {key:?}: {reason}")]
    BadValue { path: String, key: String, reason: String },
}

/// The flags a configuration file stands for (`--name=n1`, ...), and the keys it has that name no flag
/// (etcd ignores those; the caller logs them).
pub fn flags_of(path: &Path) -> Result<(Vec<String>, Vec<String>), FileError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| FileError::Read { path: shown.clone(), source })?;
    let yaml: Value = serde_yaml::from_str(&text).map_err(|source| FileError::Yaml { path: shown.clone(), source })?;
    let mapping = match yaml {
        Value::Mapping(mapping) => mapping,
        // An empty file is an empty configuration.
        Value::Null => return Ok((Vec::new(), Vec::new())),
        _ => return Err(FileError::NotAMapping { path: shown }),
    };
    let known = super::flag_names();
    let mut flags = Vec::new();
    let mut unknown = Vec::new();
    for (key, value) in mapping {
        let key = scalar(&key).unwrap_or_default();
        let side = match key.as_str() {
            "client-transport-security" => Some(Side::Client),
            "peer-transport-security" => Some(Side::Peer),
            _ => None,
        };
        let entries = match (side, value) {
            (Some(side), Value::Mapping(security)) => {
                security.into_iter().map(|(k, v)| (side.flag(&scalar(&k).unwrap_or_default()), v)).collect::<Vec<_>>()
            }
            (Some(_), Value::Null) => Vec::new(),
            (Some(_), _) => {
                let reason = "want a mapping of cert-file, key-file, ...".to_string();
                return Err(FileError::BadValue { path: shown, key, reason });
            }
            (None, value) => vec![(key, value)],
        };
        for (flag, value) in entries {
            if !known.contains(&flag) {
                unknown.push(flag);
                continue;
            }
            let text = match &value {
                // etcd's zero value: the flag keeps its default.
                Value::Null => continue,
                Value::Sequence(items) => {
                    let items: Option<Vec<String>> = items.iter().map(scalar).collect();
                    items.map(|items| items.join(","))
                }
                other => scalar(other),
            };
            let Some(text) = text else {
                return Err(FileError::BadValue { path: shown, key: flag, reason: "want a value or a list".into() });
            };
            flags.push(format!("--{flag}={text}"));
        }
    }
    Ok((flags, unknown))
}

#[derive(Clone, Copy)]
enum Side {
    Client,
    Peer,
}

impl Side {
    /// The flag a key of `client-transport-security` or `peer-transport-security` stands for.
    fn flag(self, key: &str) -> String {
        match (self, key) {
            (Side::Client, "allowed-hostname") => "client-cert-allowed-hostname".into(),
            (Side::Client, "crl-file") => "client-crl-file".into(),
            (Side::Client, key) => key.into(),
            (Side::Peer, "allowed-cn") => "peer-cert-allowed-cn".into(),
            (Side::Peer, "allowed-hostname") => "peer-cert-allowed-hostname".into(),
            (Side::Peer, "skip-client-san-verification") => "experimental-peer-skip-client-san-verification".into(),
            (Side::Peer, "client-cert-auth") => "peer-client-cert-auth".into(),
            (Side::Peer, key) => format!("peer-{key}"),
        }
    }
}

fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Bool(flag) => Some(flag.to_string()),
        Value::Number(number) => Some(number.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(yaml: &str) -> (Vec<String>, Vec<String>) {
        let file = tempfile::NamedTempFile::new().expect("temp file");
        std::fs::write(file.path(), yaml).expect("write");
        flags_of(file.path()).expect("valid file")
    }

    #[test]
    fn keys_become_flags_and_security_blocks_their_sides_flags() {
        let (flags, unknown) = flags(
            "name: m1\nsnapshot-count: 10000\nlisten-client-urls: http://127.0.0.1:2379\nlog-outputs: [stderr]\n\
             strict-reconfig-check: false\nwal-dir:\nno-such-key: 1\n\
             client-transport-security:\n  cert-file: /c.crt\n  client-cert-auth: true\n  allowed-hostname: h\n\
             peer-transport-security:\n  cert-file: /p.crt\n  trusted-ca-file: /ca.crt\n  allowed-cn: etcd\n",
        );
        assert_eq!(
            flags,
            [
                "--name=m1",
                "--snapshot-count=10000",
                "--listen-client-urls=http://127.0.0.1:2379",
                "--log-outputs=stderr",
                "--strict-reconfig-check=false",
                "--cert-file=/c.crt",
                "--client-cert-auth=true",
                "--client-cert-allowed-hostname=h",
                "--peer-cert-file=/p.crt",
                "--peer-trusted-ca-file=/ca.crt",
                "--peer-cert-allowed-cn=etcd",
            ]
        );
        assert_eq!(unknown, ["no-such-key"]);
    }

    #[test]
    fn bad_files_are_named_with_the_problem() {
        let file = tempfile::NamedTempFile::new().expect("temp file");
        std::fs::write(file.path(), "name: [a, {b: c}]\n").expect("write");
        let err = flags_of(file.path()).expect_err("refused").to_string();
        assert!(err.contains("bad value for \"name\""), "{err}");
        std::fs::write(file.path(), "- a\n- b\n").expect("write");
        assert!(matches!(flags_of(file.path()), Err(FileError::NotAMapping { .. })));
        std::fs::write(file.path(), "name: [unclosed\n").expect("write");
        assert!(matches!(flags_of(file.path()), Err(FileError::Yaml { .. })));
        assert!(matches!(flags_of(Path::new("/nonexistent/etcd.yaml")), Err(FileError::Read { .. })));
    }
}
