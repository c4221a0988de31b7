//! The private network namespace every run lives in.
//!
//! The harness re-executes itself under `unshare --net` before its runtime starts. Inside, only a
//! loopback device exists (brought up here); members listen on 127.0.0.11, .12, .13 and the
//! firewall rules ([`crate::net`]) apply to this namespace alone. When the harness and its members
//! exit, the namespace, its addresses and its rules disappear with them: nothing on the host changes.

use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, ExitStatus};

use crate::error::{Error, Result};

/// This process's network namespace, as a link like `net:[4026531840]`.
const SELF_NS: &str = "/proc/self/ns/net";

/// Set in the environment of the re-executed harness to the network namespace it was started from.
pub const INSIDE_ENV: &str = "JEPSEN_NETNS";

/// Whether this process was started by [`reexec`].
pub fn is_inside() -> bool {
    std::env::var_os(INSIDE_ENV).is_some()
}

/// Runs this same executable with the same arguments under `unshare --net` and waits for it.
///
/// The child also gets a PID namespace of its own (`--pid --fork`), in which the harness is PID 1:
/// when it dies for any reason, even SIGKILL, the kernel kills every member it started, and
/// `--kill-child` ends the harness when `unshare` itself is killed. No member outlives its run.
pub fn reexec() -> Result<ExitStatus> {
    let exe = std::env::current_exe().map_err(Error::system("locate the jepsen executable"))?;
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let outer = namespace_of(Path::new(SELF_NS))?;
    Command::new("unshare")
        .args(["--net", "--pid", "--fork", "--kill-child"])
        .arg("--")
        .arg(exe)
        .args(args)
        .env(INSIDE_ENV, outer)
        .status()
        .map_err(Error::system("run `unshare --net` (is util-linux installed?)"))
}

/// Checks that this process is no longer in the network namespace it was started from (so that
/// firewall rules cannot touch the host) and brings the loopback device up.
pub fn prepare() -> Result<()> {
    let ours = namespace_of(Path::new(SELF_NS))?;
    let outer = std::env::var(INSIDE_ENV).unwrap_or_default();
    if outer.is_empty() || ours == outer {
        return Err(Error::Setup(format!(
            "refusing to run in the host's network namespace ({ours}); start through `jepsen test`, which \
             re-executes itself under `unshare --net`"
        )));
    }
    let status = Command::new("ip")
        .args(["link", "set", "lo", "up"])
        .status()
        .map_err(Error::system("run `ip link set lo up`"))?;
    if !status.success() {
        return Err(Error::Setup(format!("`ip link set lo up` failed: {status}")));
    }
    Ok(())
}

/// [`prepare`] for a run in private namespaces; for one on the host's network (`jepsen bench
/// --host-network`, which never touches the firewall), [`check_host_ports`] instead.
pub fn prepare_for(host_network: bool) -> Result<()> {
    if host_network {
        check_host_ports(&crate::cluster::hosts(), &[crate::net::CLIENT_PORT, crate::net::PEER_PORT])
    } else {
        prepare()
    }
}

/// Checks that every member's address and port can be listened on here: a run on the host's
/// network shares its ports with whatever else runs there (an etcd on `0.0.0.0:2379`, say).
pub fn check_host_ports(hosts: &[crate::net::Host], ports: &[u16]) -> Result<()> {
    for host in hosts {
        for &port in ports {
            if let Err(err) = std::net::TcpListener::bind((host.ip, port)) {
                return Err(Error::Setup(format!(
                    "cannot listen on {}:{port} on the host's network ({err}); stop what uses it, or run without                      --host-network",
                    host.ip
                )));
            }
        }
    }
    Ok(())
}

fn namespace_of(link: &Path) -> Result<String> {
    let target = std::fs::read_link(link).map_err(Error::system(format!("read {}", link.display())))?;
    Ok(target.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, TcpListener};

    use super::*;
    use crate::net::Host;

    #[test]
    fn a_port_in_use_on_the_host_stops_a_host_network_run_naming_it() {
        let taken = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = taken.local_addr().unwrap().port();
        let host = Host { ip: Ipv4Addr::LOCALHOST, uid: 0 };
        let err = check_host_ports(&[host], &[port]).unwrap_err().to_string();
        assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
        drop(taken);
        check_host_ports(&[host], &[port]).unwrap();
    }
}
