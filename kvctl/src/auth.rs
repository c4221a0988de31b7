//! Logging in with `--user`: clientv3 calls `Auth.Authenticate` before anything else and sends the
//! token it gets in every request's `token` metadata.

use std::io::{BufRead, IsTerminal, Write};
use std::time::Duration;

use proto::etcdserverpb as pb;
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;

use crate::error::{CliError, EXIT_BAD_CONNECTION};
use crate::token::AuthToken;

/// etcd's answer when auth is off; clientv3 then goes on without a token.
const AUTH_NOT_ENABLED: &str = "etcdserver: authentication is not enabled";

/// Authenticates within `timeout`. A failure ends the command as a failed dial does in etcdctl
/// (`ExitBadConnection`), with the server's message (e.g. "etcdserver: authentication failed,
/// invalid user ID or password").
pub async fn authenticate(
    channel: Channel,
    name: String,
    password: String,
    timeout: Duration,
) -> Result<AuthToken, CliError> {
    let mut client = pb::auth_client::AuthClient::new(channel);
    let request = pb::AuthenticateRequest { name: name.into(), password: password.into() };
    let answer = tokio::time::timeout(timeout, client.authenticate(request)).await;
    match answer {
        Ok(Ok(resp)) => {
            let token = MetadataValue::try_from(resp.into_inner().token)
                .map_err(|e| CliError::new(EXIT_BAD_CONNECTION, format!("invalid auth token: {e}")))?;
            Ok(AuthToken(Some(token)))
        }
        Ok(Err(status)) if status.message() == AUTH_NOT_ENABLED => Ok(AuthToken(None)),
        Ok(Err(status)) => Err(CliError { code: EXIT_BAD_CONNECTION, ..CliError::from(status) }),
        Err(_) => Err(CliError::new(EXIT_BAD_CONNECTION, "context deadline exceeded")),
    }
}

/// A password prompt as etcdctl's (speakeasy) asks it: the prompt on stdout, one line read from
/// stdin (without echo when stdin is a terminal; scripts pipe it in), a newline after it, and
/// the answer without surrounding whitespace.
pub fn ask(prompt: &str) -> std::io::Result<String> {
    let mut stdout = std::io::stdout();
    stdout.write_all(prompt.as_bytes())?;
    stdout.flush()?;
    let answer = if std::io::stdin().is_terminal() {
        // rpassword would echo the Enter key itself; the newline below is the only one.
        let config = rpassword::ConfigBuilder::new().output_writer(std::io::sink()).build();
        rpassword::read_password_with_config(config)
    } else {
        read_line(&mut std::io::stdin().lock())
    };
    stdout.write_all(b"\n")?;
    stdout.flush()?;
    Ok(answer?.trim().to_string())
}

/// One line (an empty one at the end of the input), without its `\n` or `\r\n`.
fn read_line(input: &mut impl BufRead) -> std::io::Result<String> {
    let mut line = String::new();
    input.read_line(&mut line)?;
    Ok(line.trim_end_matches('\n').trim_end_matches('\r').to_string())
}

/// Go's `fmt.Scanf("%s", &word)`, as `--interactive=false` reads a password: the first word of
/// the first line; nothing when the line is empty (Scanf fails, the word stays empty).
pub fn scan_word(input: &mut impl BufRead) -> std::io::Result<String> {
    let line = read_line(input)?;
    let word = line.trim_start_matches([' ', '\t', '\r']).split([' ', '\t', '\r']).next().unwrap_or("");
    Ok(word.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scans_like_go() {
        let cases = [("pw\n", "pw"), ("  a b\n", "a"), ("\n", ""), ("", ""), ("x\r\n", "x"), ("\nlater\n", "")];
        for (input, want) in cases {
            assert_eq!(scan_word(&mut input.as_bytes()).expect("reads"), want, "{input:?}");
        }
    }
}
