//! What a member process costs: its resident memory (`VmRSS` of `/proc/<pid>/status`) and the CPU
//! time it has used (`utime + stime` of `/proc/<pid>/stat`), and the size of its data dir. Also its
//! peak resident memory (`VmHWM`), which Linux lets the process's owner reset (see
//! [`reset_peak_rss`]) so that a peak can be measured over one operation rather than a lifetime.
//!
//! The harness runs in a PID namespace of its own (see [`crate::netns`]) but `/proc` is still the
//! host's, so the pid a member has in the namespace (what `Child::id` returns) is not its name in
//! `/proc`. [`host_pid`] finds the process whose innermost pid (the last `NSpid` entry) is the
//! member's and whose parent is this harness, as `/proc` names it (`/proc/self`).

use std::path::Path;

use serde::Serialize;

/// Clock ticks per second of the CPU times in `/proc/<pid>/stat` (`USER_HZ`, 100 on every Linux
/// architecture we run on; `getconf CLK_TCK` says the same).
const TICKS_PER_SEC: f64 = 100.0;

/// One process's memory and CPU use at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Usage {
    pub rss_bytes: u64,
    /// User plus system CPU seconds since the process started.
    pub cpu_secs: f64,
}

impl Usage {
    pub fn rss_mb(&self) -> f64 {
        self.rss_bytes as f64 / (1024.0 * 1024.0)
    }
}

/// The fields of `/proc/<pid>/status` we need.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Status {
    /// The pid in each namespace from `/proc`'s down to the process's own (`NSpid`).
    ns_pids: Vec<u32>,
    parent: u32,
    rss_bytes: u64,
    /// The highest `rss_bytes` since the process started or its peak was last reset.
    peak_rss_bytes: u64,
}

/// A process's resident memory now and at its peak.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Memory {
    pub rss_bytes: u64,
    /// `VmHWM`: the highest RSS since the process started or [`reset_peak_rss`].
    pub peak_rss_bytes: u64,
}

/// The name `/proc` gives the process that is `ns_pid` in this harness's PID namespace and a child
/// of this harness; `None` when it has exited.
pub fn host_pid(ns_pid: u32) -> Option<u32> {
    let me: u32 = std::fs::read_link("/proc/self").ok()?.to_str()?.parse().ok()?;
    let entries = std::fs::read_dir("/proc").ok()?;
    entries.filter_map(Result::ok).filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok()).find(|&pid| {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .map(|text| parse_status(&text))
            .is_some_and(|status| status.parent == me && status.ns_pids.last() == Some(&ns_pid))
    })
}

/// The memory and CPU use of the process `/proc` calls `pid`.
pub fn usage(pid: u32) -> std::io::Result<Usage> {
    let status = parse_status(&std::fs::read_to_string(format!("/proc/{pid}/status"))?);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let ticks = parse_cpu_ticks(&stat).ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, format!("unexpected /proc/{pid}/stat: {stat}"))
    })?;
    Ok(Usage { rss_bytes: status.rss_bytes, cpu_secs: ticks as f64 / TICKS_PER_SEC })
}

/// The resident memory of the process `/proc` calls `pid`, now and at its peak.
pub fn memory(pid: u32) -> std::io::Result<Memory> {
    let status = parse_status(&std::fs::read_to_string(format!("/proc/{pid}/status"))?);
    Ok(Memory { rss_bytes: status.rss_bytes, peak_rss_bytes: status.peak_rss_bytes })
}

/// Sets the peak RSS (`VmHWM`) of the process `/proc` calls `pid` to its RSS now: writing 5 to
/// `/proc/<pid>/clear_refs` (Linux 4.0 and later; only the process's owner or root may).
pub fn reset_peak_rss(pid: u32) -> std::io::Result<()> {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5")
}

/// The CPU seconds this harness (the benchmark's clients) has used so far.
pub fn own_cpu_secs() -> f64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| parse_cpu_ticks(&stat))
        .map_or(0.0, |ticks| ticks as f64 / TICKS_PER_SEC)
}

/// The bytes of every file under `dir` (0 when it does not exist).
pub fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|entry| match entry.metadata() {
            Ok(meta) if meta.is_dir() => dir_bytes(&entry.path()),
            Ok(meta) => meta.len(),
            Err(_) => 0,
        })
        .sum()
}

fn parse_status(text: &str) -> Status {
    let mut status = Status::default();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else { continue };
        let value = value.trim();
        match key {
            "NSpid" => status.ns_pids = value.split_whitespace().filter_map(|p| p.parse().ok()).collect(),
            "PPid" => status.parent = value.parse().unwrap_or(0),
            "VmRSS" => status.rss_bytes = kib_field(value),
            "VmHWM" => status.peak_rss_bytes = kib_field(value),
            _ => {}
        }
    }
    status
}

/// The bytes of a size field of `/proc/<pid>/status` (`"  123456 kB"`); 0 when unreadable.
fn kib_field(value: &str) -> u64 {
    let kib: u64 = value.split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or(0);
    kib * 1024
}

/// `utime + stime` (fields 14 and 15) of a `/proc/<pid>/stat` line. The command name (field 2) is in
/// parentheses and may itself hold spaces and parentheses, so fields are counted after the last `)`.
fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    // `rest` starts at field 3 (the state), so utime (14) and stime (15) are its 12th and 13th.
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_gives_namespace_pids_parent_rss_and_its_peak() {
        let text = "Name:\traft-node\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\nPid:\t4242\nPPid:\t4200\n\
                    NSpid:\t4242\t7\nVmPeak:\t  999 kB\nVmHWM:\t   81920 kB\nVmRSS:\t   51200 kB\nThreads:\t5\n";
        let status = parse_status(text);
        let expected =
            Status { ns_pids: vec![4242, 7], parent: 4200, rss_bytes: 51200 * 1024, peak_rss_bytes: 81920 * 1024 };
        assert_eq!(status, expected);
        assert_eq!(parse_status("VmHWM:\tlots kB\n").peak_rss_bytes, 0, "unreadable is 0");
        assert_eq!(parse_status("Name:\tkthreadd\n"), Status::default());
    }

    #[test]
    fn cpu_ticks_are_counted_after_the_command_name() {
        let plain = "4242 (etcd) S 4200 4242 4200 0 -1 4194560 500 0 0 0 150 25 0 0 20 0 12 0 100 0 0";
        assert_eq!(parse_cpu_ticks(plain), Some(175));
        let tricky = "4242 (a) b (c) S 4200 4242 4200 0 -1 4194560 500 0 0 0 7 3 0 0 20 0 12 0 100 0 0";
        assert_eq!(parse_cpu_ticks(tricky), Some(10));
        assert_eq!(parse_cpu_ticks("4242 (cut short) S 1 2"), None);
    }

    #[test]
    fn a_child_is_found_and_measured() {
        // The test runs in the host's PID namespace, where a child's namespace pid is its /proc pid.
        let mut child = std::process::Command::new("sleep").arg("10").spawn().expect("spawn sleep");
        let found = host_pid(child.id());
        let usage = found.map(usage);
        let memory = found.map(memory);
        let peak_reset = found.map(reset_peak_rss);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(found, Some(child.id()));
        assert!(usage.expect("found").expect("usage").rss_bytes > 0);
        let memory = memory.expect("found").expect("memory");
        assert!(memory.peak_rss_bytes >= memory.rss_bytes && memory.rss_bytes > 0, "{memory:?}");
        peak_reset.expect("found").expect("the owner may reset a child's peak RSS");
        assert_eq!(host_pid(u32::MAX), None, "no such process");
        assert!(own_cpu_secs() >= 0.0);
    }

    #[test]
    fn dir_bytes_sums_nested_files() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("a"), [0u8; 10]).expect("write a");
        std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
        std::fs::write(dir.path().join("sub/b"), [0u8; 32]).expect("write b");
        assert_eq!(dir_bytes(dir.path()), 42);
        assert_eq!(dir_bytes(&dir.path().join("missing")), 0);
    }
}
