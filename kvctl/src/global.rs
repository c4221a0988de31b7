//! etcdctl's global flags and dialing the cluster.

use std::time::Duration;

use clap::{ArgAction, Args, ValueEnum};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

use crate::auth;
use crate::error::{CliError, EXIT_BAD_CONNECTION};
use crate::token::AuthToken;
use crate::transport::{SecureConfig, TlsConnector};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WriteOut {
    Simple,
    Json,
    Fields,
    Table,
    /// The response's protobuf encoding; only the Auth verbs print it so far (the others answer
    /// "unsupported output format", as before the format existed here).
    Protobuf,
}

/// Flags every command accepts, before or after the verb (cobra's persistent flags). Each can
/// also come from `ETCDCTL_<FLAG>` in the environment, as etcdctl reads them.
#[derive(Debug, Clone, Args)]
pub struct GlobalFlags {
    /// gRPC endpoints
    #[arg(long, global = true, env = "ETCDCTL_ENDPOINTS", value_delimiter = ',', default_value = "127.0.0.1:2379")]
    pub endpoints: Vec<String>,

    /// enable client-side debug logging
    #[arg(long, global = true, env = "ETCDCTL_DEBUG")]
    pub debug: bool,

    /// set the output format (fields, json, protobuf, simple, table)
    #[arg(short = 'w', long, global = true, env = "ETCDCTL_WRITE_OUT", value_enum, default_value = "simple")]
    pub write_out: WriteOut,

    /// print byte strings as hex encoded strings
    #[arg(long, global = true, env = "ETCDCTL_HEX")]
    pub hex: bool,

    /// dial timeout for client connections
    #[arg(long, global = true, env = "ETCDCTL_DIAL_TIMEOUT", default_value = "2s", value_parser = parse_duration)]
    pub dial_timeout: Duration,

    /// keepalive time for client connections
    #[arg(long, global = true, env = "ETCDCTL_KEEPALIVE_TIME", default_value = "2s", value_parser = parse_duration)]
    pub keepalive_time: Duration,

    /// keepalive timeout for client connections
    #[arg(
        long,
        global = true,
        env = "ETCDCTL_KEEPALIVE_TIMEOUT",
        default_value = "6s",
        value_parser = parse_duration
    )]
    pub keepalive_timeout: Duration,

    /// timeout for short running command (excluding dial timeout)
    #[arg(long, global = true, env = "ETCDCTL_COMMAND_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub command_timeout: Duration,

    /// disable transport security for client connections
    #[arg(
        long,
        global = true,
        env = "ETCDCTL_INSECURE_TRANSPORT",
        num_args = 0..=1,
        require_equals = true,
        default_value = "true",
        default_missing_value = "true",
        value_parser = parse_go_bool,
        action = ArgAction::Set
    )]
    pub insecure_transport: bool,

    /// accept insecure SRV records describing cluster endpoints
    #[arg(
        long,
        global = true,
        env = "ETCDCTL_INSECURE_DISCOVERY",
        num_args = 0..=1,
        require_equals = true,
        default_value = "true",
        default_missing_value = "true",
        value_parser = parse_go_bool,
        action = ArgAction::Set
    )]
    pub insecure_discovery: bool,

    /// skip server certificate verification (CAUTION: this option should be enabled only for testing purposes)
    #[arg(long, global = true, env = "ETCDCTL_INSECURE_SKIP_TLS_VERIFY")]
    pub insecure_skip_tls_verify: bool,

    /// identify secure client using this TLS certificate file
    #[arg(long, global = true, env = "ETCDCTL_CERT")]
    pub cert: Option<String>,

    /// identify secure client using this TLS key file
    #[arg(long, global = true, env = "ETCDCTL_KEY")]
    pub key: Option<String>,

    /// verify certificates of TLS-enabled secure servers using this CA bundle
    #[arg(long, global = true, env = "ETCDCTL_CACERT")]
    pub cacert: Option<String>,

    /// username[:password] for authentication (prompt if password is not supplied)
    #[arg(long, global = true, env = "ETCDCTL_USER", default_value = "")]
    pub user: String,

    /// password for authentication (if this option is used, --user option shouldn't include password)
    #[arg(long, global = true, env = "ETCDCTL_PASSWORD", default_value = "")]
    pub password: String,

    /// domain name to query for SRV records describing cluster endpoints
    #[arg(short = 'd', long, global = true, env = "ETCDCTL_DISCOVERY_SRV", default_value = "")]
    pub discovery_srv: String,

    /// service name to query when using DNS discovery
    #[arg(long, global = true, env = "ETCDCTL_DISCOVERY_SRV_NAME", default_value = "")]
    pub discovery_srv_name: String,
}

/// A connection as every command uses it: the channel plus the auth token (when `--user` is given)
/// in each request's `token` metadata, as clientv3 sends it.
pub type Conn = InterceptedService<Channel, AuthToken>;

impl GlobalFlags {
    /// Connects to the cluster (the first endpoint that answers) as every command does, and
    /// authenticates first when `--user` is given.
    pub async fn connect(&self) -> Result<Conn, CliError> {
        let channel = self.channel().await?;
        let token = match self.credentials()? {
            // clientv3 logs in only with both a name and a password (a `--no-password` user
            // cannot log in with one: etcd then sees no user at all).
            Some((user, password)) if !user.is_empty() && !password.is_empty() => {
                auth::authenticate(channel.clone(), user, password, self.dial_timeout).await?
            }
            _ => AuthToken::default(),
        };
        Ok(InterceptedService::new(channel, token))
    }

    /// `--user`/`--password` as etcdctl reads them: `user:password`, or the password from
    /// `--password`, or asked for on the terminal. `None` without `--user`.
    fn credentials(&self) -> Result<Option<(String, String)>, CliError> {
        if self.user.is_empty() {
            return Ok(None);
        }
        if !self.password.is_empty() {
            return Ok(Some((self.user.clone(), self.password.clone())));
        }
        match self.user.split_once(':') {
            Some((user, password)) => Ok(Some((user.to_string(), password.to_string()))),
            None => {
                let password =
                    auth::ask("Password: ").map_err(|e| CliError::new(crate::error::EXIT_ERROR, e.to_string()))?;
                Ok(Some((self.user.clone(), password)))
            }
        }
    }

    fn secure_config(&self) -> SecureConfig {
        SecureConfig {
            cacert: self.cacert.clone(),
            cert: self.cert.clone(),
            key: self.key.clone(),
            insecure_transport: self.insecure_transport,
            insecure_skip_verify: self.insecure_skip_tls_verify,
        }
    }

    /// Checks what etcdctl checks before it dials: empty TLS file names.
    pub fn validate(&self) -> Result<(), CliError> {
        for (flag, value) in [("cert", &self.cert), ("key", &self.key), ("cacert", &self.cacert)] {
            if value.as_deref() == Some("") {
                return Err(CliError::bad_args(format!("empty string is passed to --{flag} option")));
            }
        }
        Ok(())
    }

    /// Connects to `endpoint` alone, for the commands that ask each endpoint in turn
    /// (`endpoint status`, `defrag`, …).
    pub async fn connect_to(&self, endpoint: &str) -> Result<Conn, CliError> {
        GlobalFlags { endpoints: vec![endpoint.to_string()], ..self.clone() }.connect().await
    }

    /// Connects to the first endpoint that answers. Like clientv3's non-blocking dial, an
    /// unreachable cluster is not an error of its own: the endpoints are tried again until the
    /// command's deadline (`--command-timeout`) passes, which ends in etcdctl's
    /// "context deadline exceeded" (exit 1).
    pub async fn channel(&self) -> Result<Channel, CliError> {
        let secure = self.secure_config();
        let mut endpoints = Vec::with_capacity(self.endpoints.len());
        for endpoint in &self.endpoints {
            let tls = secure.client_config(endpoint.trim())?;
            // tonic sees plain `http://`; TLS, when wanted, is done by our connector.
            let url = plain_url(endpoint);
            let endpoint = Endpoint::from_shared(url.clone())
                .map_err(|e| CliError::new(EXIT_BAD_CONNECTION, format!("invalid endpoint {url}: {e}")))?
                .connect_timeout(self.dial_timeout)
                .timeout(self.command_timeout)
                .tcp_nodelay(true)
                // grpc-go raises a client keepalive time below 10 s to 10 s; clientv3 pings
                // only while streams are open.
                .http2_keep_alive_interval(self.keepalive_time.max(MIN_KEEPALIVE_TIME))
                .keep_alive_timeout(self.keepalive_timeout)
                .keep_alive_while_idle(false);
            endpoints.push((endpoint, tls));
        }
        let deadline = tokio::time::Instant::now() + self.command_timeout;
        let attempts = async {
            loop {
                for (endpoint, tls) in &endpoints {
                    let connected = match tls {
                        Some(config) => endpoint.connect_with_connector(TlsConnector { config: config.clone() }).await,
                        None => endpoint.connect().await,
                    };
                    if let Ok(channel) = connected {
                        return channel;
                    }
                }
                tokio::time::sleep(RECONNECT_PAUSE).await;
            }
        };
        tokio::time::timeout_at(deadline, attempts)
            .await
            .map_err(|_| CliError::new(crate::error::EXIT_ERROR, "context deadline exceeded"))
    }
}

/// The pause between two rounds of connection attempts to an unreachable cluster.
const RECONNECT_PAUSE: Duration = Duration::from_millis(200);

/// grpc-go's lower bound on the client keepalive time.
const MIN_KEEPALIVE_TIME: Duration = Duration::from_secs(10);

/// etcdctl accepts `host:port` as well as `http://host:port`.
pub fn endpoint_url(endpoint: &str) -> String {
    let endpoint = endpoint.trim();
    if endpoint.contains("://") {
        endpoint.to_string()
    } else {
        format!("http://{endpoint}")
    }
}

/// The endpoint as tonic dials it: always `http://host:port` (TLS is below tonic).
fn plain_url(endpoint: &str) -> String {
    let endpoint = endpoint.trim();
    let rest = endpoint.split_once("://").map_or(endpoint, |(_, rest)| rest);
    format!("http://{rest}")
}

/// Go's `strconv.ParseBool`, with pflag's error text.
pub fn parse_go_bool(text: &str) -> Result<bool, String> {
    match text {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(format!("strconv.ParseBool: parsing {text:?}: invalid syntax")),
    }
}

/// Parses the subset of Go's `time.ParseDuration` people use on the command line: a sequence of
/// decimal numbers with units `ns`, `us`, `ms`, `s`, `m`, `h` (`1m30s`, `500ms`, `2s`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let invalid = || format!("time: invalid duration {text:?}");
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let mut rest = text;
    let mut total = 0f64;
    if rest.is_empty() {
        return Err(invalid());
    }
    while !rest.is_empty() {
        let num_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let number: f64 = rest[..num_len].parse().map_err(|_| invalid())?;
        rest = &rest[num_len..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => return Err(format!("time: missing unit in duration {text:?}")),
            unit => return Err(format!("time: unknown unit {unit:?} in duration {text:?}")),
        };
        total += number * scale;
        rest = &rest[unit_len..];
    }
    Ok(Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        let cases = [
            ("2s", Some(Duration::from_secs(2))),
            ("500ms", Some(Duration::from_millis(500))),
            ("1m30s", Some(Duration::from_secs(90))),
            ("0", Some(Duration::ZERO)),
            ("", None),
            ("5", None),
            ("3x", None),
        ];
        for (text, want) in cases {
            assert_eq!(parse_duration(text).ok(), want, "{text}");
        }
    }

    #[test]
    fn endpoint_urls() {
        assert_eq!(endpoint_url("127.0.0.1:2379"), "http://127.0.0.1:2379");
        assert_eq!(endpoint_url("http://127.0.0.1:2379"), "http://127.0.0.1:2379");
        assert_eq!(endpoint_url("https://a:1"), "https://a:1");
    }
}
