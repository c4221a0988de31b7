//! Booleans as etcd reads them.

/// A boolean as Go's `strconv.ParseBool` reads it (etcd's boolean flags and variables).
pub fn parse_bool(text: &str) -> Result<bool, String> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!("parse error: invalid boolean {text:?}")),
    }
}
