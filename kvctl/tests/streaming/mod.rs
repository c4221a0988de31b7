//! Running a streaming command (`watch`, `lock`, `elect`, `make-mirror`) as a child process for
//! the comparison tests: its output is collected as it comes, the test waits (with a bound) for
//! what it expects, then signals or kills it. The child is killed when dropped.

#![allow(dead_code)] // each test file uses its own part

use std::io::{Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long any expected output may take to show up.
pub const DEADLINE: Duration = Duration::from_secs(20);

pub struct Streaming {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Arc<Mutex<Vec<u8>>>,
    stderr: Arc<Mutex<Vec<u8>>>,
}

/// How a streaming command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    pub stdout: String,
    pub stderr: String,
    /// `None` when a signal ended it.
    pub code: Option<i32>,
}

impl Streaming {
    /// Starts `program --endpoints=<endpoint> <args>` with `env` added and stdin piped. kvctl speaks
    /// etcdctl 3.4 here, as in `common::run`: the reference is Debian's etcdctl 3.4.23.
    pub fn spawn(program: &str, endpoint: &str, args: &[&str], env: &[(&str, &str)]) -> Streaming {
        let mut child = Command::new(program)
            .env("ETCDCTL_API", "3")
            .env("KVCTL_ETCDCTL_VERSION", "3.4")
            .env_remove("ETCDCTL_ENDPOINTS")
            .envs(env.iter().copied())
            .arg(format!("--endpoints={endpoint}"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn streaming client");
        let stdout = collect(child.stdout.take().expect("stdout pipe"));
        let stderr = collect(child.stderr.take().expect("stderr pipe"));
        let stdin = child.stdin.take();
        let name = format!("{} {}", program.rsplit('/').next().unwrap_or(program), args.join(" "));
        Streaming { name, child, stdin, stdout, stderr }
    }

    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.stdout.lock().expect("stdout lock")).into_owned()
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().expect("stderr lock")).into_owned()
    }

    /// Waits until `done(stdout)` holds; fails the test with the output so far after [`DEADLINE`].
    pub fn wait_for(&self, what: &str, done: impl Fn(&str) -> bool) {
        self.wait_for_within(DEADLINE, what, done);
    }

    /// [`Streaming::wait_for`] with another bound, for output that comes on a timer.
    pub fn wait_for_within(&self, deadline: Duration, what: &str, done: impl Fn(&str) -> bool) {
        let start = Instant::now();
        while !done(&self.stdout()) {
            assert!(
                start.elapsed() < deadline,
                "{}: no {what} after {deadline:?}\nstdout: {:?}\nstderr: {:?}",
                self.name,
                self.stdout(),
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until stdout has not changed for a moment (a response printed in several writes
    /// is complete).
    pub fn settle(&self) {
        let mut last = self.stdout();
        loop {
            std::thread::sleep(Duration::from_millis(300));
            let now = self.stdout();
            if now == last {
                return;
            }
            last = now;
        }
    }

    pub fn write_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin still open");
        stdin.write_all(format!("{line}\n").as_bytes()).expect("write stdin");
        stdin.flush().expect("flush stdin");
    }

    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Sends `signal` (`INT`, `TERM`, `KILL`) with `kill -s`; the workspace forbids the `unsafe`
    /// that `libc::kill` needs.
    pub fn signal(&self, signal: &str) {
        let status =
            Command::new("kill").args(["-s", signal, &self.child.id().to_string()]).status().expect("run kill");
        assert!(status.success(), "kill -s {signal} {}", self.name);
    }

    /// Whether the process has exited.
    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Waits for the process to end by itself (bounded by [`DEADLINE`]) and collects its output.
    pub fn finish(mut self) -> Finished {
        let start = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                break status;
            }
            assert!(start.elapsed() < DEADLINE, "{} did not exit\nstdout: {:?}", self.name, self.stdout());
            std::thread::sleep(Duration::from_millis(20));
        };
        // The reader threads may still hold the last bytes.
        std::thread::sleep(Duration::from_millis(100));
        Finished { stdout: self.stdout(), stderr: self.stderr(), code: status.code() }
    }

    /// Kills the process and returns what it printed.
    pub fn kill(self) -> Finished {
        self.signal("KILL");
        self.finish()
    }
}

impl Drop for Streaming {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Copies a pipe into a shared buffer on its own thread.
fn collect(mut pipe: impl Read + Send + 'static) -> Arc<Mutex<Vec<u8>>> {
    let buffer = Arc::new(Mutex::new(Vec::new()));
    let sink = buffer.clone();
    std::thread::spawn(move || {
        let mut chunk = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut chunk) {
            if n == 0 {
                break;
            }
            sink.lock().expect("buffer lock").extend_from_slice(&chunk[..n]);
        }
    });
    buffer
}

/// The `Error:` lines and the other lines a command wrote to stderr that etcdctl also writes
/// (clientv3's timestamped retry logs left out).
pub fn stderr_lines(stderr: &str) -> Vec<String> {
    stderr.lines().filter(|l| !l.starts_with('{') && !l.contains(" | ")).map(str::to_string).collect()
}
