//! Helpers shared by the VM integration tests in `tests/`.
//!
//! The tests boot real QEMU microVMs from the kernel and initramfs that
//! `scripts/setup` builds; when those are missing a test fails with a
//! message naming that command, never skips.
//!
//! This file boots sandboxes ([`builder`], [`boot`]), runs guest commands
//! ([`sh`], [`run`], [`stdout_of`]), reads figures ([`status_kib`],
//! [`sha256_hex`]), finds host processes and binaries and waits for a
//! condition ([`wait_until`]). What every test crate shares comes from
//! `airlock-testkit`, re-exported here ([`testkit`]): the binaries built
//! beside the test ([`airlock_bin`], [`agent_bin`]), [`process_builder`],
//! which runs the agent as a host process instead of booting a VM, for
//! tests of the lifecycle, and the in-process server (`testkit::TestServer`).
//! [`shared_vm`] runs a file's checks as named tests on one booted VM.
//! [`DaemonHome`] gives a CLI test a private state directory, so a private
//! daemon, and runs `airlock` clients against it; [`TlsServer`] runs
//! `airlock serve` there with a TLS listener, for remote clients.
//! [`interrupt`] sends a CLI command Ctrl-C the way a terminal would.
//! [`owner`] runs a sandbox's owner in another process, to be killed
//! (tests of adoption). [`tls_index`] serves HTTPS on loopback under a
//! throwaway CA, with a small Python package index. [`images`] builds the
//! root images some tests need, once.

#![forbid(unsafe_code)]

pub mod daemon_home;
pub mod images;
pub mod interrupt;
pub mod owner;
pub mod shared_vm;
pub mod soak;
pub mod tls_index;
pub mod tls_server;

/// What every test crate shares (the binaries, the process backend, the
/// in-process server), here too so a VM test names one crate.
pub use airlock_testkit::{self as testkit, agent_bin, airlock_bin, process_builder};
pub use daemon_home::DaemonHome;
pub use tls_server::TlsServer;

use std::path::{Path, PathBuf};
use std::time::Duration;

use airlock::{Command, ExitStatus, Output, Sandbox, SandboxBuilder};

/// How long a test VM may take to boot: generous, since CI runs several
/// software-emulated guests on two cores at once.
pub const BOOT_TIMEOUT: Duration = Duration::from_secs(120);

/// With `RUST_LOG` set (for example `RUST_LOG=airlock=debug`), the
/// library's tracing goes to the test's captured output, which the harness
/// prints for a failed test; without it, nothing is installed.
pub fn log_if_asked() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("RUST_LOG").is_some() {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
                .with_test_writer()
                .try_init();
        }
    });
}

/// A builder for a small test sandbox, failing with the set-up command when
/// the guest artifacts are missing.
pub fn builder() -> SandboxBuilder {
    log_if_asked();
    for path in [
        airlock::artifacts::default_kernel(),
        airlock::artifacts::default_initramfs(),
    ] {
        assert!(
            path.is_file(),
            "{} is missing: run scripts/setup (or scripts/test) first",
            path.display()
        );
    }
    Sandbox::builder()
        .memory_mib(256)
        .boot_timeout(BOOT_TIMEOUT)
}

/// The default root image (`scripts/setup` builds it), failing with the
/// set-up command when it is missing.
pub fn default_image() -> PathBuf {
    let store = airlock::images::ImageStore::open_default();
    match store.resolve(airlock::images::DEFAULT_IMAGE) {
        Ok(image) => image.path,
        Err(error) => panic!("{error}: run scripts/setup (or scripts/test) first"),
    }
}

/// Boots a test sandbox.
pub async fn boot() -> Sandbox {
    match builder().start().await {
        Ok(sandbox) => sandbox,
        Err(error) => panic!("sandbox did not start: {error}"),
    }
}

/// Pids of live processes whose command line mentions `needle` (for
/// example a state directory), zombies excluded.
pub fn processes_mentioning(needle: &Path) -> Vec<u32> {
    let needle = needle.to_string_lossy().into_owned();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let proc_dir = PathBuf::from(format!("/proc/{pid}"));
            let cmdline = std::fs::read(proc_dir.join("cmdline")).unwrap_or_default();
            let stat = std::fs::read_to_string(proc_dir.join("stat")).unwrap_or_default();
            let zombie = stat
                .rsplit(')')
                .next()
                .is_some_and(|rest| rest.trim_start().starts_with('Z'));
            !zombie && String::from_utf8_lossy(&cmdline).contains(&needle)
        })
        .collect()
}

/// Polls `done` every 100 ms until it holds or `limit` has passed; whether
/// it held.
pub fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let began = std::time::Instant::now();
    while began.elapsed() < limit {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    done()
}

/// `sh -c script`: a guest command to adjust further (`.user`, `.tag`, ...).
pub fn sh(script: &str) -> Command {
    Command::new("sh").arg("-c").arg(script)
}

/// Runs `command` in `sandbox` to its end and collects its output, failing
/// the test if it cannot start or its stream breaks. The exit status is the
/// caller's to check.
pub async fn run(sandbox: &Sandbox, command: Command) -> Output {
    let execution = match sandbox.exec(command).await {
        Ok(execution) => execution,
        Err(error) => panic!("start: {error}"),
    };
    match execution.output().await {
        Ok(output) => output,
        Err(error) => panic!("output: {error}"),
    }
}

/// The standard output of `sh -c script`, which must exit 0 and print
/// UTF-8.
pub async fn stdout_of(sandbox: &Sandbox, script: &str) -> String {
    let out = run(sandbox, sh(script)).await;
    assert_eq!(out.status, ExitStatus::Code(0), "{script}: {out:?}");
    match String::from_utf8(out.stdout) {
        Ok(text) => text,
        Err(error) => panic!("{script}: output is not UTF-8: {error}"),
    }
}

/// A field of a `/proc/<pid>/status` text in KiB, such as `VmRSS` (the
/// name without its colon).
pub fn status_kib(status: &str, field: &str) -> u64 {
    let prefix = format!("{field}:");
    status
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in {status}"))
}

/// The SHA-256 of `data` in lowercase hex, as `sha256sum` prints it.
pub fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(data)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// Relays Unix-socket connections from `front` to `back` until `cut`
/// changes; then closes every connection it carries (and keeps accepting
/// new ones). The reconnect tests put it in front of an agent's socket to
/// break the host's connection at a moment they choose.
pub fn relay(front: PathBuf, back: PathBuf, cut: tokio::sync::watch::Receiver<u32>) {
    let listener = match tokio::net::UnixListener::bind(&front) {
        Ok(listener) => listener,
        Err(error) => panic!("cannot listen on {}: {error}", front.display()),
    };
    tokio::spawn(async move {
        loop {
            let Ok((mut client, _)) = listener.accept().await else {
                return;
            };
            let back = back.clone();
            let mut cut = cut.clone();
            let generation = *cut.borrow_and_update();
            tokio::spawn(async move {
                let Ok(mut agent) = tokio::net::UnixStream::connect(&back).await else {
                    return;
                };
                tokio::select! {
                    _ = tokio::io::copy_bidirectional(&mut client, &mut agent) => {}
                    _ = cut.wait_for(|g| *g != generation) => {}
                }
            });
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_kib_reads_a_field_with_or_without_padding() {
        let status = "Name:\tinit\nVmHWM:\t    2048 kB\nVmRSS:\t1024 kB\n";
        assert_eq!(status_kib(status, "VmRSS"), 1024);
        assert_eq!(status_kib(status, "VmHWM"), 2048);
    }

    #[test]
    fn sha256_hex_matches_sha256sum() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
