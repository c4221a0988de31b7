//! etcd's failpoints that this member honours, set as etcd's failpoint builds take them: the
//! `GOFAIL_FAILPOINTS` variable, `name=term` pairs separated by `;`.
//!
//! Only `raftBeforeSave` is here: before a member makes its new log entries durable (etcd: before its
//! WAL save), the term `sleep(N)` waits N milliseconds, as a slow disk would, on the leader and on
//! followers alike. It lets tests and fault injection show what a slow disk does to a cluster. `off`
//! turns a failpoint off. Any other name or term refuses the member's start in one line: a failpoint
//! this member cannot honour must not look set.
//!
//! As with gofail, `GOFAIL_HTTP=host:port` serves the failpoints over HTTP while the member runs:
//! `PUT /raftBeforeSave` with the term as the body sets it, `DELETE /raftBeforeSave` turns it off,
//! `GET /raftBeforeSave` answers the term, `GET /` lists `name=term` lines. Port 0 takes a free port,
//! which the log names.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The variable etcd's failpoint builds read.
pub const VARIABLE: &str = "GOFAIL_FAILPOINTS";
/// The variable naming gofail's HTTP endpoint.
pub const HTTP_VARIABLE: &str = "GOFAIL_HTTP";
/// The one failpoint this member has.
const BEFORE_SAVE: &str = "raftBeforeSave";
/// [`BEFORE_SAVE_MS`] when the failpoint is off.
const OFF: u64 = u64::MAX;
/// How often a sleep under way looks whether the failpoint changed.
const RECHECK: Duration = Duration::from_millis(10);
/// The largest request the HTTP endpoint reads.
const MAX_REQUEST: usize = 4096;

/// What the failpoints say, once read.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Failpoints {
    /// `raftBeforeSave=sleep(N)`.
    pub before_save: Option<Duration>,
}

/// `raftBeforeSave`'s sleep in milliseconds, or [`OFF`]: one process, one set of failpoints.
static BEFORE_SAVE_MS: AtomicU64 = AtomicU64::new(OFF);

/// Reads [`VARIABLE`]; the one line naming what is wrong otherwise.
pub fn init_from_env() -> Result<(), String> {
    let failpoints = parse(&std::env::var(VARIABLE).unwrap_or_default())?;
    set_before_save(failpoints.before_save);
    Ok(())
}

fn set_before_save(pause: Option<Duration>) {
    let millis = pause.map_or(OFF, |p| u64::try_from(p.as_millis()).unwrap_or(OFF - 1).min(OFF - 1));
    BEFORE_SAVE_MS.store(millis, Ordering::Relaxed);
}

fn before_save_term() -> String {
    match BEFORE_SAVE_MS.load(Ordering::Relaxed) {
        OFF => "off".to_owned(),
        millis => format!("sleep({millis})"),
    }
}

/// `raftBeforeSave`: blocks the calling thread for the set time, if any. Called where a log append's
/// sync starts. Turning the failpoint off or changing it ends a sleep under way, as a disk that
/// recovers (gofail's sleep runs to its end).
pub fn before_save() {
    let millis = BEFORE_SAVE_MS.load(Ordering::Relaxed);
    if millis == OFF {
        return;
    }
    let until = std::time::Instant::now() + Duration::from_millis(millis);
    while BEFORE_SAVE_MS.load(Ordering::Relaxed) == millis {
        let left = until.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::sleep(left.min(RECHECK));
    }
}

/// Binds [`HTTP_VARIABLE`]'s address, if it is set, and serves the failpoints there until the process
/// ends.
pub async fn serve_http_from_env() -> anyhow::Result<()> {
    let Ok(address) = std::env::var(HTTP_VARIABLE) else { return Ok(()) };
    let listener = tokio::net::TcpListener::bind(address.as_str())
        .await
        .map_err(|e| anyhow::anyhow!("{HTTP_VARIABLE}: cannot listen on {address:?}: {e}"))?;
    tracing::warn!(address = %listener.local_addr()?, "serving failpoints over HTTP ({HTTP_VARIABLE})");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(answer_http(stream));
        }
    });
    Ok(())
}

/// Answers one HTTP/1.1 request and closes the connection.
async fn answer_http(mut stream: tokio::net::TcpStream) {
    let mut request = Vec::new();
    let mut buf = [0u8; 1024];
    let (head, body) = loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
        if let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&request[..end]).into_owned();
            let length = head
                .lines()
                .filter_map(|line| line.split_once(':'))
                .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))
                .and_then(|(_, value)| value.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if request.len() >= end + 4 + length || request.len() > MAX_REQUEST {
                let body = request.get(end + 4..end + 4 + length).unwrap_or_default();
                break (head, String::from_utf8_lossy(body).into_owned());
            }
        } else if request.len() > MAX_REQUEST {
            return;
        }
    };
    let mut words = head.split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let (status, text) = http_answer(method, path, body.trim());
    let reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    );
    let _ = stream.write_all(reply.as_bytes()).await;
}

/// gofail's answers: the status line's code and reason, and the body.
fn http_answer(method: &str, path: &str, body: &str) -> (&'static str, String) {
    let name = path.trim_start_matches('/');
    match (method, name) {
        ("GET", "") => ("200 OK", format!("{BEFORE_SAVE}={}\n", before_save_term())),
        (_, name) if name != BEFORE_SAVE => ("404 Not Found", format!("failpoint {name:?} is not supported here\n")),
        ("GET", _) => ("200 OK", before_save_term()),
        ("DELETE", _) => {
            set_before_save(None);
            ("204 No Content", String::new())
        }
        ("PUT", _) => match parse(&format!("{BEFORE_SAVE}={body}")) {
            Ok(failpoints) => {
                set_before_save(failpoints.before_save);
                ("204 No Content", String::new())
            }
            Err(err) => ("400 Bad Request", format!("{err}\n")),
        },
        _ => ("405 Method Not Allowed", String::new()),
    }
}

/// Parses `name=term;name=term`.
pub fn parse(value: &str) -> Result<Failpoints, String> {
    let mut failpoints = Failpoints::default();
    for pair in value.split(';').map(str::trim).filter(|pair| !pair.is_empty()) {
        let Some((name, term)) = pair.split_once('=') else {
            return Err(format!("{VARIABLE}: {pair:?} is not name=term"));
        };
        let name = name.trim();
        if name != BEFORE_SAVE {
            return Err(format!("{VARIABLE}: failpoint {name:?} is not supported here ({BEFORE_SAVE})"));
        }
        failpoints.before_save = match term.trim() {
            "off" => None,
            term => Some(sleep_term(term).ok_or_else(|| {
                format!(
                    "{VARIABLE}: failpoint {name:?}: term {term:?} is not supported here (sleep(milliseconds) or off)"
                )
            })?),
        };
    }
    Ok(failpoints)
}

/// `sleep(N)`: N milliseconds, as gofail reads an integer argument.
fn sleep_term(term: &str) -> Option<Duration> {
    let millis = term.strip_prefix("sleep(")?.strip_suffix(')')?.trim().parse().ok()?;
    Some(Duration::from_millis(millis))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_sleep_and_off_and_names_what_it_cannot_honour() {
        assert_eq!(parse("").unwrap(), Failpoints::default());
        assert_eq!(parse("raftBeforeSave=sleep(700)").unwrap().before_save, Some(Duration::from_millis(700)));
        assert_eq!(parse("raftBeforeSave=sleep(5); raftBeforeSave=off").unwrap().before_save, None);
        let err = parse("raftAfterSave=sleep(5)").unwrap_err();
        assert!(err.contains("\"raftAfterSave\" is not supported"), "{err}");
        let err = parse("raftBeforeSave=panic").unwrap_err();
        assert!(err.contains("term \"panic\""), "{err}");
        assert!(parse("raftBeforeSave=sleep(1s)").is_err());
        assert!(parse("raftBeforeSave").is_err());
    }

    #[test]
    fn the_http_endpoint_sets_reads_and_clears_the_failpoint() {
        assert_eq!(http_answer("PUT", "/raftBeforeSave", "sleep(25)").0, "204 No Content");
        assert_eq!(http_answer("GET", "/raftBeforeSave", ""), ("200 OK", "sleep(25)".to_owned()));
        assert_eq!(http_answer("GET", "/", ""), ("200 OK", "raftBeforeSave=sleep(25)\n".to_owned()));
        let started = std::time::Instant::now();
        before_save();
        assert!(started.elapsed() >= Duration::from_millis(25));
        assert_eq!(http_answer("PUT", "/raftBeforeSave", "panic").0, "400 Bad Request");
        assert_eq!(http_answer("GET", "/raftBeforeSave", "").1, "sleep(25)", "a bad term changes nothing");
        assert_eq!(http_answer("PUT", "/raftAfterSave", "sleep(1)").0, "404 Not Found");
        assert_eq!(http_answer("DELETE", "/raftBeforeSave", "").0, "204 No Content");
        assert_eq!(http_answer("GET", "/raftBeforeSave", "").1, "off");
        // A hang ends when the failpoint is turned off.
        http_answer("PUT", "/raftBeforeSave", "sleep(600000)");
        let hung = std::thread::spawn(before_save);
        std::thread::sleep(Duration::from_millis(50));
        assert!(!hung.is_finished());
        http_answer("DELETE", "/raftBeforeSave", "");
        let started = std::time::Instant::now();
        hung.join().unwrap();
        assert!(started.elapsed() < Duration::from_secs(5));
        let started = std::time::Instant::now();
        before_save();
        assert!(started.elapsed() < Duration::from_millis(25));
    }
}
