//! `put [options] <key> <value>` (or the value from stdin)

use std::io::Read;

use clap::Args;
use proto::etcdserverpb as pb;

use super::kv_client;
use crate::error::CliError;
use crate::global::GlobalFlags;
use crate::printer::Printer;

#[derive(Debug, Clone, Args)]
pub struct PutCommand {
    /// lease ID (in hexadecimal) to attach to the key
    #[arg(long, default_value = "0")]
    pub lease: String,
    /// return the previous key-value pair before modification
    #[arg(long)]
    pub prev_kv: bool,
    /// updates the key using its current value
    #[arg(long)]
    pub ignore_value: bool,
    /// updates the key using its current lease
    #[arg(long)]
    pub ignore_lease: bool,

    pub args: Vec<String>,
}

const NEEDS_ARGS: &str = "put command needs 1 argument and input from stdin or 2 arguments";

impl PutCommand {
    /// etcdctl's `getPutOp`; `stdin` is read only when the value is not an argument.
    pub fn request(&self, stdin: impl FnOnce() -> std::io::Result<String>) -> Result<pb::PutRequest, CliError> {
        let Some(key) = self.args.first() else { return Err(CliError::bad_args(NEEDS_ARGS)) };
        if self.ignore_value && self.args.len() > 1 {
            return Err(CliError::bad_args("put command needs only 1 argument when 'ignore-value' is set"));
        }
        let value = if self.ignore_value {
            String::new()
        } else if let Some(value) = self.args.get(1) {
            value.clone()
        } else {
            match stdin() {
                Ok(text) if !text.is_empty() => text,
                _ => return Err(CliError::bad_args(NEEDS_ARGS)),
            }
        };
        let lease = i64::from_str_radix(&self.lease, 16).map_err(|e| {
            CliError::bad_args(format!(
                "bad lease ID (strconv.ParseInt: parsing {:?}: {}), expecting ID in Hex",
                self.lease,
                go_parse_int_reason(&e)
            ))
        })?;
        Ok(pb::PutRequest {
            key: key.as_bytes().to_vec(),
            value: value.into_bytes(),
            lease,
            prev_kv: self.prev_kv,
            ignore_value: self.ignore_value,
            ignore_lease: self.ignore_lease,
        })
    }

    pub async fn run(&self, global: &GlobalFlags) -> Result<String, CliError> {
        let request = self.request(|| {
            let mut text = String::new();
            std::io::stdin().read_to_string(&mut text).map(|_| text)
        })?;
        let mut client = kv_client(global).await?;
        let resp = client.put(request).await?.into_inner();
        Printer { format: global.write_out, hex: global.hex, value_only: false }.put(&resp)
    }
}

/// The tail of Go's `strconv.NumError` text.
fn go_parse_int_reason(err: &std::num::ParseIntError) -> &'static str {
    use std::num::IntErrorKind;
    match err.kind() {
        IntErrorKind::PosOverflow | IntErrorKind::NegOverflow => "value out of range",
        _ => "invalid syntax",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(args: &[&str], lease: &str) -> PutCommand {
        PutCommand {
            lease: lease.into(),
            prev_kv: false,
            ignore_value: false,
            ignore_lease: false,
            args: args.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn requests() {
        let req = cmd(&["k", "v"], "694d77aa9e38260f").request(|| unreachable!()).expect("valid");
        assert_eq!((req.key.as_slice(), req.value.as_slice(), req.lease), (&b"k"[..], &b"v"[..], 0x694d77aa9e38260f));
        let req = cmd(&["k"], "0").request(|| Ok("from stdin".into())).expect("valid");
        assert_eq!(req.value, b"from stdin");
        assert_eq!(cmd(&["k"], "0").request(|| Ok(String::new())).map_err(|e| e.message), Err(NEEDS_ARGS.into()));
        assert_eq!(
            cmd(&["k", "v"], "xyz").request(|| unreachable!()).map_err(|e| e.message),
            Err("bad lease ID (strconv.ParseInt: parsing \"xyz\": invalid syntax), expecting ID in Hex".into())
        );
    }
}
