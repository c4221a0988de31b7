//! The `raft-node` server binary: etcd's flags in, a member running until SIGINT/SIGTERM (see
//! [`raft_node::cli`]).

/// jemalloc rather than the system's allocator: glibc's kept what a member freed (measured with
/// `jepsen bench --scale`: 321 MB resident right after a 400k-put load holding ~110 MB live, 442 MB
/// after a compaction and defrag; jemalloc 252 and 236 MB), and its background thread gives freed pages
/// back to the system within seconds.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    // Without it freed pages go back only when a thread allocates again.
    let _ = tikv_jemalloc_ctl::background_thread::write(true);
    // One thread on small machines, workers on big ones (see `raft_node::runtime`).
    match raft_node::runtime::build() {
        Ok(runtime) => runtime.block_on(raft_node::cli::main()),
        Err(err) => {
            eprintln!("raft-node: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}
