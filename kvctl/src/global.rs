//! etcdctl's global flags and dialing the cluster.

use std::time::Duration;

use clap::{Args, ValueEnum};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::{Channel, Endpoint};

use crate::error::{CliError, EXIT_BAD_CONNECTION};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WriteOut {
    Simple,
    Json,
    Fields,
    Table,
}

/// Flags every command accepts, before or after the verb (cobra's persistent flags).
#[derive(Debug, Clone, Args)]
pub struct GlobalFlags {
    /// gRPC endpoints
    #[arg(long, global = true, env = "ETCDCTL_ENDPOINTS", value_delimiter = ',', default_value = "127.0.0.1:2379")]
    pub endpoints: Vec<String>,

    /// dial timeout for client connections
    #[arg(long, global = true, default_value = "2s", value_parser = parse_duration)]
    pub dial_timeout: Duration,

    /// timeout for short running command (excluding dial timeout)
    #[arg(long, global = true, default_value = "5s", value_parser = parse_duration)]
    pub command_timeout: Duration,

    /// set the output format (fields, json, protobuf, simple, table)
    #[arg(short = 'w', long, global = true, value_enum, default_value = "simple")]
    pub write_out: WriteOut,

    /// print byte strings as hex encoded strings
    #[arg(long, global = true)]
    pub hex: bool,
}

/// A connection as every command uses it: the channel plus the auth token (when `--user` is given)
/// in each request's `token` metadata, as clientv3 sends it.
pub type Conn = InterceptedService<Channel, AuthToken>;

/// Adds the `token` metadata to every request once the client has authenticated.
#[derive(Debug, Clone, Default)]
pub struct AuthToken(Option<MetadataValue<Ascii>>);

impl Interceptor for AuthToken {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(token) = &self.0 {
            request.metadata_mut().insert("token", token.clone());
        }
        Ok(request)
    }
}

impl GlobalFlags {
    /// Connects to the cluster (the first endpoint that answers) as every command does.
    pub async fn connect(&self) -> Result<Conn, CliError> {
        Ok(InterceptedService::new(self.channel().await?, AuthToken::default()))
    }

    /// Connects to `endpoint` alone, for the commands that ask each endpoint in turn
    /// (`endpoint status`, `defrag`, …).
    pub async fn connect_to(&self, endpoint: &str) -> Result<Conn, CliError> {
        GlobalFlags { endpoints: vec![endpoint.to_string()], ..self.clone() }.connect().await
    }

    /// Connects to the first endpoint that answers within `--dial-timeout`.
    pub async fn channel(&self) -> Result<Channel, CliError> {
        let mut last_err = String::from("no endpoints given");
        for endpoint in &self.endpoints {
            let url = endpoint_url(endpoint);
            let endpoint = Endpoint::from_shared(url.clone())
                .map_err(|e| CliError::new(EXIT_BAD_CONNECTION, format!("invalid endpoint {url}: {e}")))?
                .connect_timeout(self.dial_timeout)
                .timeout(self.command_timeout);
            match tokio::time::timeout(self.dial_timeout, endpoint.connect()).await {
                Ok(Ok(channel)) => return Ok(channel),
                Ok(Err(e)) => last_err = e.to_string(),
                Err(_) => last_err = "context deadline exceeded".to_string(),
            }
        }
        Err(CliError::new(EXIT_BAD_CONNECTION, last_err))
    }
}

/// etcdctl accepts `host:port` as well as `http://host:port`.
pub fn endpoint_url(endpoint: &str) -> String {
    let endpoint = endpoint.trim();
    if endpoint.contains("://") {
        endpoint.to_string()
    } else {
        format!("http://{endpoint}")
    }
}

/// Parses the subset of Go's `time.ParseDuration` people use on the command line: a sequence of
/// decimal numbers with units `ns`, `us`, `ms`, `s`, `m`, `h` (`1m30s`, `500ms`, `2s`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("invalid duration {text:?}");
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let mut rest = text;
    let mut total = 0f64;
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let num_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(bad)?;
        let number: f64 = rest[..num_len].parse().map_err(|_| bad())?;
        rest = &rest[num_len..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
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
