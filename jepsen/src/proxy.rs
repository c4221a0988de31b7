//! A TCP proxy for one directed peer link, which can hold bytes back to add latency.
//!
//! The kernel of the test machines has no `netem`, so link delay is made in user space: every
//! connection member A opens to member B's peer port is redirected (by [`crate::net`]'s NAT rule)
//! to the proxy of link A→B, which opens the onward connection to B and relays bytes both ways.
//! Normally a chunk is written on as soon as it is read. While a [`Delay`] is set, each chunk read
//! is written `base ± jitter` later, but never before the chunk read ahead of it, as on a real
//! link where TCP keeps the byte order.
//!
//! The onward connection leaves from A's own address (the proxy runs as root, which may bind any
//! loopback address), so B sees the same source as without the proxy, and the partition rules,
//! which match member addresses, act on the proxied path unchanged: no cut has to be mirrored
//! here. A closed side is half-closed on the other side after the bytes still queued; a reset or
//! failed side resets the other (`SO_LINGER` 0), so that A sees a failure like the one B gave.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::error::{Error, Result};

/// The most bytes one read takes, and so the most one queued chunk holds.
const CHUNK: usize = 16 * 1024;
/// Chunks one direction of one connection may hold back (at most `QUEUE * CHUNK` bytes); when it is
/// full the proxy stops reading, and TCP's flow control slows the sender down.
const QUEUE: usize = 64;
/// How long the onward connection may take. A member that is down refuses at once; a cut link
/// drops the SYN, and the member that dialled has given up on its side long before this.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The pause after a failed `accept` (e.g. out of file descriptors) before the next one.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Latency added to every chunk: `base` plus a uniform draw from `-jitter..=jitter` (never below 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Delay {
    pub base: Duration,
    pub jitter: Duration,
}

impl Delay {
    /// No added latency.
    pub const NONE: Delay = Delay { base: Duration::ZERO, jitter: Duration::ZERO };

    pub fn is_none(self) -> bool {
        self.base.is_zero() && self.jitter.is_zero()
    }

    /// One draw of the latency.
    fn sample(self, rng: &mut impl Rng) -> Duration {
        if self.jitter.is_zero() {
            return self.base;
        }
        let jitter = self.jitter.as_micros() as i64;
        let micros = self.base.as_micros() as i64 + rng.gen_range(-jitter..=jitter);
        Duration::from_micros(micros.max(0) as u64)
    }
}

impl std::fmt::Display for Delay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ms ± {} ms", self.base.as_millis(), self.jitter.as_millis())
    }
}

/// The proxy's settings, shared by its connections (read on every chunk, so a change applies to
/// established connections too).
#[derive(Debug, Default)]
struct Control {
    delay: Mutex<Delay>,
}

impl Control {
    fn delay(&self) -> Delay {
        *self.delay.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A running proxy; it stops (and drops every connection it relays) when dropped.
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    control: Arc<Control>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free port of 127.0.0.1 and relays every connection to `upstream`, opening the
    /// onward connection from `source` (any port) when given.
    pub async fn start(upstream: SocketAddr, source: Option<IpAddr>) -> Result<Proxy> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .map_err(Error::system(format!("listen for the proxy to {upstream}")))?;
        let addr = listener.local_addr().map_err(Error::system("read the proxy's address"))?;
        let control = Arc::new(Control::default());
        let accept = tokio::spawn(accept_loop(listener, upstream, source, Arc::clone(&control)));
        Ok(Proxy { addr, control, accept })
    }

    /// Where members' connections must be sent.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sets the latency of chunks read from now on ([`Delay::NONE`] to forward at once again).
    pub fn set_delay(&self, delay: Delay) {
        *self.control.delay.lock().unwrap_or_else(PoisonError::into_inner) = delay;
    }

    pub fn delay(&self) -> Delay {
        self.control.delay()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // The accept task owns the connections' tasks: aborting it drops them all.
        self.accept.abort();
    }
}

async fn accept_loop(listener: TcpListener, upstream: SocketAddr, source: Option<IpAddr>, control: Arc<Control>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((inbound, from)) => {
                    debug!(%from, %upstream, "proxy: new connection");
                    connections.spawn(serve(inbound, upstream, source, Arc::clone(&control)));
                }
                Err(err) => {
                    warn!(%upstream, "proxy: accept failed: {err}");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            },
            // Reap finished connections so that the set does not grow for the whole run.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// One proxied connection: connect onward, then relay until both sides are done.
async fn serve(mut inbound: TcpStream, upstream: SocketAddr, source: Option<IpAddr>, control: Arc<Control>) {
    let mut onward = match connect(upstream, source).await {
        Ok(onward) => onward,
        Err(err) => {
            debug!(%upstream, "proxy: onward connection failed: {err}");
            // The closest a proxy gets to passing on "connection refused".
            reset(&inbound);
            return;
        }
    };
    let _ = inbound.set_nodelay(true);
    let _ = onward.set_nodelay(true);
    let (inbound_read, inbound_write) = inbound.split();
    let (onward_read, onward_write) = onward.split();
    let relayed =
        tokio::try_join!(pump(inbound_read, onward_write, &control), pump(onward_read, inbound_write, &control));
    if let Err(err) = relayed {
        debug!(%upstream, "proxy: connection ended: {err}");
        reset(&inbound);
        reset(&onward);
    }
}

async fn connect(upstream: SocketAddr, source: Option<IpAddr>) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    if let Some(ip) = source {
        socket.bind(SocketAddr::new(ip, 0))?;
    }
    match tokio::time::timeout(CONNECT_TIMEOUT, socket.connect(upstream)).await {
        Ok(connected) => connected,
        Err(_) => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out")),
    }
}

/// Makes the coming close send a RST instead of a FIN.
fn reset(stream: &TcpStream) {
    #[allow(deprecated)] // `set_linger` is deprecated only because a lingering close can block; 0 does not.
    let _ = stream.set_linger(Some(Duration::ZERO));
}

/// Relays one direction: a reader queues each chunk with the instant it is due, a writer writes
/// it then (or right after the chunk before it, if that one was due later). End of input becomes a half-close after the queued bytes; an error ends both.
async fn pump(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    control: &Control,
) -> std::io::Result<()> {
    let (queue, mut due_chunks) = mpsc::channel::<(Instant, Vec<u8>)>(QUEUE);
    let read = async move {
        let mut rng = StdRng::from_entropy();
        let mut buf = vec![0u8; CHUNK];
        loop {
            let n = from.read(&mut buf).await?;
            if n == 0 {
                // Dropping the queue tells the writer that the input ended.
                return Ok(());
            }
            let due = Instant::now() + control.delay().sample(&mut rng);
            if queue.send((due, buf[..n].to_vec())).await.is_err() {
                // The writer is gone, and its error is what try_join reports.
                return Ok(());
            }
        }
    };
    let write = async move {
        // One writer in queue order: a chunk that drew a shorter delay than the one before it
        // waits for it, so bytes never overtake each other.
        while let Some((due, chunk)) = due_chunks.recv().await {
            if due > Instant::now() {
                tokio::time::sleep_until(due).await;
            }
            to.write_all(&chunk).await?;
        }
        to.shutdown().await
    };
    tokio::try_join!(read, write).map(|_| ())
}

#[cfg(test)]
mod tests {
    use std::time::Instant as StdInstant;

    use super::*;

    /// An echo server on a free port of `ip`; it answers every connection with the peer address it
    /// saw, then echoes.
    async fn echo_server(ip: Ipv4Addr) -> SocketAddr {
        let listener = TcpListener::bind((ip, 0)).await.expect("bind the echo server");
        let addr = listener.local_addr().expect("echo address");
        tokio::spawn(async move {
            while let Ok((mut stream, from)) = listener.accept().await {
                tokio::spawn(async move {
                    let greeting = format!("{}\n", from.ip());
                    stream.write_all(greeting.as_bytes()).await.expect("greet");
                    let (mut read, mut write) = stream.split();
                    let _ = tokio::io::copy(&mut read, &mut write).await;
                });
            }
        });
        addr
    }

    /// Reads until `want` bytes have come.
    async fn read_exactly(stream: &mut TcpStream, want: usize) -> Vec<u8> {
        let mut got = vec![0u8; want];
        stream.read_exact(&mut got).await.expect("read from the proxy");
        got
    }

    /// Sends one line through the proxy and returns the echo and the round-trip time.
    async fn round_trip(stream: &mut TcpStream, line: &[u8]) -> (Vec<u8>, Duration) {
        let start = StdInstant::now();
        stream.write_all(line).await.expect("write to the proxy");
        let echo = read_exactly(stream, line.len()).await;
        (echo, start.elapsed())
    }

    async fn connect_through(proxy: &Proxy, upstream_ip: Ipv4Addr) -> TcpStream {
        let mut stream = TcpStream::connect(proxy.addr()).await.expect("connect to the proxy");
        let greeting = format!("{upstream_ip}\n");
        let got = read_exactly(&mut stream, greeting.len()).await;
        assert_eq!(String::from_utf8_lossy(&got), greeting, "the upstream saw the wrong source address");
        stream
    }

    #[tokio::test]
    async fn relays_at_once_from_the_given_source_address() {
        let echo = echo_server(Ipv4Addr::LOCALHOST).await;
        let source = Ipv4Addr::new(127, 0, 0, 21);
        let proxy = Proxy::start(echo, Some(IpAddr::V4(source))).await.expect("start the proxy");
        let mut stream = connect_through(&proxy, source).await;
        let (echo, elapsed) = round_trip(&mut stream, b"hello\n").await;
        assert_eq!(echo, b"hello\n");
        assert!(elapsed < Duration::from_millis(100), "no delay set, yet the round trip took {elapsed:?}");
        // A big transfer crosses many chunks and comes back whole and in order.
        let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let (echo, _) = round_trip(&mut stream, &big).await;
        assert!(echo == big, "the echo of 200 kB differs");
    }

    #[tokio::test]
    async fn a_delay_holds_bytes_back_both_ways_and_clears() {
        let echo = echo_server(Ipv4Addr::LOCALHOST).await;
        let proxy = Proxy::start(echo, None).await.expect("start the proxy");
        let mut stream = connect_through(&proxy, Ipv4Addr::LOCALHOST).await;
        let delay = Delay { base: Duration::from_millis(80), jitter: Duration::from_millis(10) };
        proxy.set_delay(delay);
        assert_eq!(proxy.delay(), delay);
        for _ in 0..3 {
            let (echo, elapsed) = round_trip(&mut stream, b"ping\n").await;
            assert_eq!(echo, b"ping\n");
            // Once each way, each at least base - jitter.
            assert!(elapsed >= Duration::from_millis(140), "a delayed round trip took only {elapsed:?}");
        }
        proxy.set_delay(Delay::NONE);
        let (echo, elapsed) = round_trip(&mut stream, b"pong\n").await;
        assert_eq!(echo, b"pong\n");
        assert!(elapsed < Duration::from_millis(100), "the delay was cleared, yet the round trip took {elapsed:?}");
    }

    #[tokio::test]
    async fn delayed_chunks_keep_their_order_under_jitter() {
        let echo = echo_server(Ipv4Addr::LOCALHOST).await;
        let proxy = Proxy::start(echo, None).await.expect("start the proxy");
        let mut stream = connect_through(&proxy, Ipv4Addr::LOCALHOST).await;
        // Jitter as large as the base: later chunks often draw shorter delays than earlier ones.
        proxy.set_delay(Delay { base: Duration::from_millis(20), jitter: Duration::from_millis(20) });
        let mut sent = Vec::new();
        for i in 0..50u32 {
            let line = format!("{i}\n");
            stream.write_all(line.as_bytes()).await.expect("write");
            sent.extend_from_slice(line.as_bytes());
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let got = read_exactly(&mut stream, sent.len()).await;
        assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(&sent));
    }

    #[tokio::test]
    async fn a_close_on_either_side_reaches_the_other() {
        let echo = echo_server(Ipv4Addr::LOCALHOST).await;
        let proxy = Proxy::start(echo, None).await.expect("start the proxy");
        let mut stream = connect_through(&proxy, Ipv4Addr::LOCALHOST).await;
        stream.shutdown().await.expect("half-close");
        // The echo server sees end of input, ends its copy and closes: we read end of file.
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest)).await;
        assert!(matches!(read, Ok(Ok(0))), "expected end of file, got {read:?}");
    }

    #[tokio::test]
    async fn an_upstream_that_refuses_resets_the_client() {
        // A port that was free a moment ago: nothing listens there now.
        let closed = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.expect("bind").local_addr().expect("addr");
        let proxy = Proxy::start(closed, None).await.expect("start the proxy");
        let mut stream = TcpStream::connect(proxy.addr()).await.expect("the proxy itself accepts");
        let mut buf = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await;
        match read {
            Ok(Err(err)) => assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset),
            other => panic!("expected a reset, got {other:?}"),
        }
    }

    #[test]
    fn a_delay_sample_stays_within_its_bounds() {
        let mut rng = StdRng::seed_from_u64(7);
        let delay = Delay { base: Duration::from_millis(50), jitter: Duration::from_millis(10) };
        let samples: Vec<Duration> = (0..1000).map(|_| delay.sample(&mut rng)).collect();
        assert!(samples.iter().all(|d| (Duration::from_millis(40)..=Duration::from_millis(60)).contains(d)));
        assert!(
            samples.iter().any(|d| *d < Duration::from_millis(45))
                && samples.iter().any(|d| *d > Duration::from_millis(55))
        );
        // Jitter larger than the base never yields a negative latency.
        let wide = Delay { base: Duration::from_millis(5), jitter: Duration::from_millis(20) };
        assert!((0..1000).all(|_| wide.sample(&mut rng) <= Duration::from_millis(25)));
        assert_eq!(Delay::NONE.sample(&mut rng), Duration::ZERO);
        assert_eq!(delay.to_string(), "50 ms ± 10 ms");
    }
}
