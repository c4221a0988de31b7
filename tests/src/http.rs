//! A plain HTTP/1.1 client for a member's client port (as `curl` uses it), and a parser of the
//! Prometheus text exposition its `/metrics` answers with.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use anyhow::{bail, Context};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long one request may take (a `/health` without quorum takes etcd's one-second read timeout).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// One HTTP answer.
#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    /// Header names in lower case, in the order received.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// `GET path` on a member's client URL (`http://host:port`).
pub async fn get(client_url: &str, path: &str) -> anyhow::Result<HttpResponse> {
    request(client_url, "GET", path, None).await
}

/// `method path` with an optional JSON body, on a new connection that the request closes.
pub async fn request(client_url: &str, method: &str, path: &str, body: Option<&str>) -> anyhow::Result<HttpResponse> {
    request_with(client_url, method, path, body, &[]).await
}

/// [`request`] with extra headers (`Authorization: <token>` for the gateway with auth enabled).
pub async fn request_with(
    client_url: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
    extra_headers: &[(&str, &str)],
) -> anyhow::Result<HttpResponse> {
    let authority = client_url.strip_prefix("http://").unwrap_or(client_url).trim_end_matches('/');
    let exchange = async {
        let mut stream =
            tokio::net::TcpStream::connect(authority).await.with_context(|| format!("dialing {authority}"))?;
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n");
        for (name, value) in extra_headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        if let Some(body) = body {
            head.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n", body.len()));
        }
        head.push_str("\r\n");
        head.push_str(body.unwrap_or(""));
        stream.write_all(head.as_bytes()).await?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await?;
        parse_response(&raw)
    };
    tokio::time::timeout(REQUEST_TIMEOUT, exchange).await.with_context(|| format!("{method} {path} timed out"))?
}

fn parse_response(raw: &[u8]) -> anyhow::Result<HttpResponse> {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").context("no end of headers")?;
    let head = std::str::from_utf8(&raw[..split]).context("headers are not UTF-8")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().context("no status line")?;
    let status = status_line.split(' ').nth(1).context("no status code")?.parse()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers.iter().any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    if chunked {
        body = dechunk(&body)?;
    }
    Ok(HttpResponse { status, headers, body: String::from_utf8(body).context("body is not UTF-8")? })
}

/// A request whose answer streams (the gateway's `/v3/watch`, ...): its status, then its body line by line
/// as it arrives.
pub struct HttpStream {
    stream: tokio::net::TcpStream,
    /// What arrived after the headers, still chunk-encoded.
    raw: Vec<u8>,
    pub status: u16,
    lines_read: usize,
}

impl HttpStream {
    /// Sends `POST path` with `body` and reads the answer's headers.
    pub async fn open(client_url: &str, path: &str, body: &str) -> anyhow::Result<HttpStream> {
        let authority = client_url.strip_prefix("http://").unwrap_or(client_url).trim_end_matches('/');
        let mut stream = tokio::net::TcpStream::connect(authority).await?;
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(head.as_bytes()).await?;
        let mut raw = Vec::new();
        let split = loop {
            if let Some(at) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                break at;
            }
            let mut buf = [0u8; 4096];
            let n = tokio::time::timeout(REQUEST_TIMEOUT, stream.read(&mut buf)).await.context("no answer")??;
            anyhow::ensure!(n > 0, "the connection closed before the headers");
            raw.extend_from_slice(&buf[..n]);
        };
        let head = std::str::from_utf8(&raw[..split])?;
        let status = head.split(' ').nth(1).context("no status code")?.parse()?;
        let raw = raw[split + 4..].to_vec();
        Ok(HttpStream { stream, raw, status, lines_read: 0 })
    }

    /// The next line of the (chunked) body, waiting up to `wait` for it.
    pub async fn next_line(&mut self, wait: Duration) -> anyhow::Result<String> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let body = dechunk_complete(&self.raw);
            // Every piece but the last ends with a line end.
            let pieces: Vec<&[u8]> = body.split(|b| *b == b'\n').collect();
            if pieces.len() - 1 > self.lines_read {
                let line = pieces[self.lines_read].to_vec();
                self.lines_read += 1;
                return Ok(String::from_utf8(line)?);
            }
            let mut buf = [0u8; 4096];
            let n =
                tokio::time::timeout_at(deadline, self.stream.read(&mut buf)).await.context("no line in time")??;
            anyhow::ensure!(n > 0, "the stream ended");
            self.raw.extend_from_slice(&buf[..n]);
        }
    }
}

/// The chunks of a chunked body that arrived whole.
fn dechunk_complete(mut raw: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    while let Some(end) = raw.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&raw[..end]).ok().and_then(|s| usize::from_str_radix(s.trim(), 16).ok());
        match size {
            Some(size) if size > 0 && raw.len() >= end + 2 + size + 2 => {
                body.extend_from_slice(&raw[end + 2..end + 2 + size]);
                raw = &raw[end + 2 + size + 2..];
            }
            _ => break,
        }
    }
    body
}

fn dechunk(mut raw: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let end = raw.windows(2).position(|w| w == b"\r\n").context("chunk size without its line end")?;
        let size = std::str::from_utf8(&raw[..end])?.split(';').next().unwrap_or("");
        let size = usize::from_str_radix(size.trim(), 16).with_context(|| format!("chunk size {size:?}"))?;
        raw = &raw[end + 2..];
        if size == 0 {
            return Ok(body);
        }
        if raw.len() < size + 2 {
            bail!("a chunk shorter than announced");
        }
        body.extend_from_slice(&raw[..size]);
        raw = &raw[size + 2..];
    }
}

/// A parsed `/metrics` answer.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Each family's `# TYPE`.
    pub types: HashMap<String, String>,
    /// Each family's `# HELP`.
    pub help: HashMap<String, String>,
    /// Every sample: name, labels, value.
    pub samples: Vec<(String, BTreeMap<String, String>, f64)>,
}

impl Metrics {
    /// Parses the text format (0.0.4); fails on a line that is not a comment or a well-formed sample.
    pub fn parse(text: &str) -> anyhow::Result<Metrics> {
        let mut metrics = Metrics::default();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').with_context(|| format!("bad TYPE line {line:?}"))?;
                metrics.types.insert(name.to_string(), kind.to_string());
            } else if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, help) = rest.split_once(' ').with_context(|| format!("bad HELP line {line:?}"))?;
                metrics.help.insert(name.to_string(), help.to_string());
            } else if !line.starts_with('#') {
                metrics.samples.push(parse_sample(line).with_context(|| format!("bad sample line {line:?}"))?);
            }
        }
        Ok(metrics)
    }

    /// The value of the sample `name` whose labels include `labels`; 0 if there is none.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.find(name, labels).unwrap_or(0.0)
    }

    /// The value of the sample `name` whose labels include `labels`, if there is one.
    pub fn find(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.samples
            .iter()
            .find(|(n, l, _)| n == name && labels.iter().all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v)))
            .map(|(_, _, v)| *v)
    }

    /// The samples named `name`.
    pub fn series(&self, name: &str) -> Vec<&BTreeMap<String, String>> {
        self.samples.iter().filter(|(n, _, _)| n == name).map(|(_, l, _)| l).collect()
    }
}

fn parse_sample(line: &str) -> anyhow::Result<(String, BTreeMap<String, String>, f64)> {
    let mut labels = BTreeMap::new();
    let (name, rest) = match line.find('{') {
        Some(open) => {
            let close = line.rfind('}').context("unclosed labels")?;
            for pair in split_labels(&line[open + 1..close]) {
                let (key, value) = pair.split_once('=').context("label without '='")?;
                let value = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')).context("unquoted label")?;
                labels.insert(key.to_string(), value.replace("\\\"", "\"").replace("\\n", "\n").replace("\\\\", "\\"));
            }
            (&line[..open], &line[close + 1..])
        }
        None => line.split_once(' ').context("no value")?,
    };
    let value = rest.split_whitespace().next().context("no value")?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().with_context(|| format!("value {v:?}"))?,
    };
    Ok((name.to_string(), labels, value))
}

/// Splits `a="x",b="y,z"` at the commas outside quotes.
fn split_labels(text: &str) -> Vec<&str> {
    let (mut parts, mut start, mut quoted, mut escaped) = (Vec::new(), 0, false, false);
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => quoted = !quoted,
            ',' if !quoted => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < text.len() {
        parts.push(&text[start..]);
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_with_and_without_labels_parse() {
        let text = "# HELP a_total The a.\n# TYPE a_total counter\na_total 3\n\
                    b_bucket{To=\"x,y\",le=\"+Inf\"} 2\nc 2.147483648e+09\n";
        let metrics = Metrics::parse(text).expect("parses");
        assert_eq!(metrics.types["a_total"], "counter");
        assert_eq!(metrics.help["a_total"], "The a.");
        assert_eq!(metrics.value("a_total", &[]), 3.0);
        assert_eq!(metrics.value("b_bucket", &[("To", "x,y"), ("le", "+Inf")]), 2.0);
        assert_eq!(metrics.value("c", &[]), 2_147_483_648.0);
    }

    #[test]
    fn chunked_bodies_are_joined() {
        let raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        let response = parse_response(raw).expect("parses");
        assert_eq!((response.status, response.body.as_str()), (200, "abcde"));
    }
}
