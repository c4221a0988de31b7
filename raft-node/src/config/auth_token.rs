//! `--auth-token`: `simple`, or `jwt,pub-key=PATH,priv-key=PATH,sign-method=METHOD,ttl=DURATION` as etcd
//! reads it; the keys are read here, at start, so a bad file stops the member at once.

use std::path::PathBuf;

use kv_api::auth::jwt::{JwtTokens, DEFAULT_JWT_TTL};

use super::parse_duration;

/// The token kind a member issues and accepts.
#[derive(Debug)]
pub enum AuthToken {
    Simple,
    Jwt(JwtTokens),
}

/// Reads the flag's value.
pub fn parse(text: &str) -> Result<AuthToken, String> {
    let mut parts = text.split(',');
    match parts.next().unwrap_or_default() {
        "simple" => Ok(AuthToken::Simple),
        "jwt" => {
            let (mut public, mut private, mut method, mut ttl) = (None, None, None, DEFAULT_JWT_TTL);
            for option in parts.filter(|p| !p.is_empty()) {
                let (key, value) =
                    option.split_once('=').ok_or_else(|| format!("invalid --auth-token option {option:?}"))?;
                match key {
                    "pub-key" => public = Some(PathBuf::from(value)),
                    "priv-key" => private = Some(PathBuf::from(value)),
                    "sign-method" => method = Some(value.to_string()),
                    "ttl" => ttl = parse_duration(value).map_err(|e| format!("--auth-token ttl: {e}"))?,
                    other => return Err(format!("unknown --auth-token option {other:?}")),
                }
            }
            let method = method.ok_or("--auth-token jwt needs sign-method")?;
            let read = |path: &Option<PathBuf>| {
                path.as_ref()
                    .map(|path| std::fs::read(path).map_err(|e| format!("reading JWT key {}: {e}", path.display())))
                    .transpose()
            };
            let (public, private) = (read(&public)?, read(&private)?);
            JwtTokens::new(&method, public.as_deref(), private.as_deref(), ttl).map(AuthToken::Jwt)
        }
        other => Err(format!("unknown token type {other:?} (--auth-token takes simple or jwt,...)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_reads_as_etcd_reads_it() {
        assert!(matches!(parse("simple"), Ok(AuthToken::Simple)));
        let dir = tempfile::tempdir().expect("temp dir");
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "s3cret").expect("write");
        let jwt = format!("jwt,priv-key={},sign-method=HS256,ttl=10m", secret.display());
        assert!(matches!(parse(&jwt), Ok(AuthToken::Jwt(_))));
        assert!(parse("bearer").expect_err("unknown").contains("unknown token type"));
        assert!(parse("jwt,priv-key=/x").expect_err("no method").contains("sign-method"));
        assert!(parse("jwt,sign-method=RS256,pub-key=/nonexistent").expect_err("no file").contains("/nonexistent"));
        assert!(parse(&format!("{jwt},colour=red")).expect_err("option").contains("colour"));
    }
}
