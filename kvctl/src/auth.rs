//! Logging in with `--user`: clientv3 calls `Auth.Authenticate` before anything else and sends the
//! token it gets in every request's `token` metadata.

use std::io::{BufRead, Write};
use std::time::Duration;

use proto::etcdserverpb as pb;
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;

use crate::error::{CliError, EXIT_BAD_CONNECTION};
use crate::global::AuthToken;

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
    let request = pb::AuthenticateRequest { name, password };
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

/// etcdctl's "Password: " prompt for `--user name` without a password. The answer is read from
/// the terminal without echo when there is one, else from stdin (scripts pipe it in).
pub fn ask_password() -> std::io::Result<String> {
    match rpassword::prompt_password("Password: ") {
        Ok(password) => Ok(password),
        Err(_) => {
            print!("Password: ");
            std::io::stdout().flush()?;
            let mut line = String::new();
            std::io::stdin().lock().read_line(&mut line)?;
            Ok(line.trim_end_matches(['\r', '\n']).to_string())
        }
    }
}
