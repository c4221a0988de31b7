//! HTTP on a member's client port through Debian's `curl`, as the etcd docs use it, and a parser of the
//! Prometheus text exposition its `/metrics` answers with.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use anyhow::Context;
use tokio::io::AsyncBufReadExt;

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

/// `method path` with an optional JSON body.
pub async fn request(client_url: &str, method: &str, path: &str, body: Option<&str>) -> anyhow::Result<HttpResponse> {
    request_with(client_url, method, path, body, &[]).await
}

/// The arguments of a `curl` call as the etcd docs write them: `-X METHOD`, the JSON body with `-d`, and
/// extra headers; `-i` prints the status line and headers before the body.
fn curl_args(client_url: &str, method: &str, path: &str, body: Option<&str>, headers: &[(&str, &str)]) -> Vec<String> {
    let mut args: Vec<String> = ["-sS", "-i", "-X", method].iter().map(|a| a.to_string()).collect();
    if let Some(body) = body {
        // No `Expect: 100-continue` round for larger bodies, and the gateway's content type.
        args.extend(["-H", "Expect:", "-H", "Content-Type: application/json", "--data-binary", body].map(String::from));
    }
    for (name, value) in headers {
        args.extend(["-H".to_string(), format!("{name}: {value}")]);
    }
    args.push(format!("{}{path}", client_url.trim_end_matches('/')));
    args
}

/// [`request`] with extra headers (`Authorization: <token>` for the gateway with auth enabled), made
/// with Debian's `curl`.
pub async fn request_with(
    client_url: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
    extra_headers: &[(&str, &str)],
) -> anyhow::Result<HttpResponse> {
    let mut args = curl_args(client_url, method, path, body, extra_headers);
    args.splice(0..0, ["--max-time".to_string(), REQUEST_TIMEOUT.as_secs().to_string()]);
    let out = tokio::process::Command::new("curl").args(&args).output().await.context("running curl")?;
    anyhow::ensure!(out.status.success(), "curl {args:?}: {:?} {}", out.status, String::from_utf8_lossy(&out.stderr));
    parse_response(&out.stdout)
}

/// curl's `-i` output: status line and headers, a blank line, the body (curl has undone any chunking),
/// then any trailers the headers announced (etcd's gateway sends `Grpc-Trailer-Content-Type` after an
/// error), which are taken off the body and listed with the headers.
fn parse_response(raw: &[u8]) -> anyhow::Result<HttpResponse> {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").context("no end of headers")?;
    let head = std::str::from_utf8(&raw[..split]).context("headers are not UTF-8")?;
    let (status, mut headers) = parse_head(head)?;
    let mut body = String::from_utf8(raw[split + 4..].to_vec()).context("body is not UTF-8")?;
    let announced: Vec<String> = headers
        .iter()
        .filter(|(name, _)| name == "trailer")
        .flat_map(|(_, names)| names.split(',').map(|n| n.trim().to_ascii_lowercase()).collect::<Vec<_>>())
        .collect();
    for name in announced {
        if let Some(at) = body.to_ascii_lowercase().rfind(&format!("{name}:")) {
            let trailer = body.split_off(at);
            headers.extend(header_lines(trailer.lines()));
        }
    }
    Ok(HttpResponse { status, headers, body })
}

fn parse_head(head: &str) -> anyhow::Result<(u16, Vec<(String, String)>)> {
    let mut lines = head.lines();
    let status_line = lines.next().context("no status line")?;
    let status = status_line.split(' ').nth(1).context("no status code")?.parse()?;
    Ok((status, header_lines(lines)))
}

/// `Name: value` lines, names in lower case.
fn header_lines<'a>(lines: impl Iterator<Item = &'a str>) -> Vec<(String, String)> {
    lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect()
}

/// A request whose answer streams (the gateway's `/v3/watch`, ...), made with `curl -N`: its status,
/// then its body line by line as it arrives. Dropping it stops curl.
pub struct HttpStream {
    _curl: tokio::process::Child,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    pub status: u16,
}

impl HttpStream {
    /// `curl -N -X POST -d <body> <url><path>`, waiting for the answer's headers.
    pub async fn open(client_url: &str, path: &str, body: &str) -> anyhow::Result<HttpStream> {
        let mut args = curl_args(client_url, "POST", path, Some(body), &[]);
        args.insert(0, "-N".to_string());
        let mut curl = tokio::process::Command::new("curl")
            .args(&args)
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("starting curl")?;
        let stdout = curl.stdout.take().context("curl's stdout")?;
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let mut head = String::new();
        loop {
            let line = tokio::time::timeout(REQUEST_TIMEOUT, lines.next_line()).await.context("no answer")??;
            let line = line.context("curl ended before the headers")?;
            if line.trim_end().is_empty() {
                break;
            }
            head.push_str(&line);
            head.push('\n');
        }
        let (status, _) = parse_head(&head)?;
        Ok(HttpStream { _curl: curl, lines, status })
    }

    /// The next line of the body, waiting up to `wait` for it.
    pub async fn next_line(&mut self, wait: Duration) -> anyhow::Result<String> {
        let line = tokio::time::timeout(wait, self.lines.next_line()).await.context("no line in time")??;
        line.context("the stream ended")
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
    fn announced_trailers_come_off_the_body() {
        let raw = b"HTTP/1.1 400 Bad Request\r\nTrailer: Grpc-Trailer-Content-Type\r\n\r\n{\"code\":3}\
                    Grpc-Trailer-Content-Type: application/grpc\r\n\r\n";
        let response = parse_response(raw).expect("parses");
        assert_eq!((response.status, response.body.as_str()), (400, "{\"code\":3}"));
        assert_eq!(response.header("grpc-trailer-content-type"), Some("application/grpc"));
        let plain = parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").expect("parses");
        assert_eq!((plain.status, plain.body.as_str()), (200, "ok"));
    }
}
