//! The vsock device survives a host that connects before the guest is up.
//!
//! vhost-device-vsock 0.3.0 as published ends its only vring worker when a
//! host connection arrives while the guest's driver has mapped memory but
//! not yet readied its queues; from then on it never answers again.
//! `scripts/setup` builds it with `scripts/patches/`, which fixes that. The
//! library no longer dials before the agent announces itself, so this test
//! drives the device directly: it boots VMs with the device that
//! `scripts/setup` installed and knocks on the agent's port every few
//! milliseconds from the moment QEMU starts, as an eager host would. Every
//! VM must answer once its agent serves. (The published build failed about
//! one boot in nine this way on a 2-core TCG host.)

// A test panics with its reason; that is what expect is for here.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use airlock_proto::DEFAULT_AGENT_PORT as AGENT_PORT;

/// VMs booted in all, and at once.
const BOOTS: usize = 16;
const AT_ONCE: usize = 2;
/// How long a knocked-on VM may take to answer: boots are slower than
/// usual while the host knocks.
const ANSWER_WITHIN: Duration = Duration::from_secs(60);
/// Pause between knocks.
const KNOCK_EVERY: Duration = Duration::from_millis(5);

/// `tsc_early_khz=` as the library passes it under TCG: without it a
/// loaded host can leave the guest calibrating its clock for many seconds.
fn tsc_khz() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    cpuinfo
        .lines()
        .find(|line| line.starts_with("cpu MHz"))
        .and_then(|line| line.split(':').nth(1)?.trim().parse::<f64>().ok())
        .map(|mhz| format!(" tsc_early_khz={}", (mhz * 1000.0).round() as u64))
        .unwrap_or_default()
}

/// The device `scripts/setup` installed, found as the library finds it.
fn device_program() -> PathBuf {
    if let Some(explicit) = std::env::var_os("AIRLOCK_VHOST_DEVICE_VSOCK") {
        return PathBuf::from(explicit);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/local/bin")])
        .chain(std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo/bin")))
        .map(|dir| dir.join("vhost-device-vsock"))
        .find(|candidate| candidate.is_file())
        .expect("vhost-device-vsock is missing: run scripts/setup (or scripts/test) first")
}

/// The names of a process's threads.
fn thread_names(pid: u32) -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .map(|name| name.trim_end().to_owned())
        .collect()
}

/// Kills and reaps the process when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// One knock: true when the guest port answered `OK`.
fn knock(uds: &Path) -> bool {
    let Ok(mut stream) = UnixStream::connect(uds) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let connect = format!("CONNECT {AGENT_PORT}\n");
    if stream.write_all(connect.as_bytes()).is_err() {
        return false;
    }
    let mut answer = [0u8; 3];
    stream.read_exact(&mut answer).is_ok() && &answer == b"OK "
}

/// Boots one VM and knocks until it answers; returns what went wrong.
fn boot_and_knock(n: usize) -> Result<Duration, String> {
    let dir = tempfile::tempdir().expect("tempdir");
    let vhost_user = dir.path().join("vhu.sock");
    let uds = dir.path().join("vsock.sock");
    let device_log = dir.path().join("device.log");
    let console = dir.path().join("console.log");
    let device = Killed(
        Command::new(device_program())
            .arg("--vm")
            .arg(format!(
                "guest-cid=3,socket={},uds-path={}",
                vhost_user.display(),
                uds.display()
            ))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&device_log).expect("log"))
            .spawn()
            .expect("start vhost-device-vsock"),
    );
    wait_for(&vhost_user);
    let kernel = airlock::artifacts::default_kernel();
    let initramfs = airlock::artifacts::default_initramfs();
    assert!(
        kernel.is_file() && initramfs.is_file(),
        "the guest kernel or initramfs is missing: run scripts/setup (or scripts/test) first"
    );
    let qemu = Killed(
        Command::new("qemu-system-x86_64")
            .args(["-M", "microvm,accel=tcg,memory-backend=mem", "-cpu", "max"])
            .args(["-m", "256M", "-object"])
            .arg("memory-backend-memfd,id=mem,size=256M,share=on")
            .arg("-kernel")
            .arg(&kernel)
            .arg("-initrd")
            .arg(&initramfs)
            .arg("-append")
            .arg(format!(
                "console=ttyS0 quiet panic=-1 reboot=t airlock.port={AGENT_PORT}{}",
                tsc_khz()
            ))
            .arg("-chardev")
            .arg(format!("socket,id=c0,path={}", vhost_user.display()))
            .args(["-device", "vhost-user-vsock-device,chardev=c0"])
            .args(["-nodefaults", "-no-reboot", "-display", "none", "-serial"])
            .arg(format!("file:{}", console.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start qemu-system-x86_64"),
    );
    let began = Instant::now();
    while began.elapsed() < ANSWER_WITHIN {
        if knock(&uds) {
            return Ok(began.elapsed());
        }
        std::thread::sleep(KNOCK_EVERY);
    }
    let console = std::fs::read_to_string(&console).unwrap_or_default();
    let log = std::fs::read_to_string(&device_log).unwrap_or_default();
    let worker = thread_names(device.0.id()).contains(&"vring_worker".to_owned());
    drop(qemu);
    drop(device);
    Err(format!(
        "boot {n}: no answer within {ANSWER_WITHIN:?}; agent serving: {}; \
         device's vring worker thread alive: {worker}; device log tail: {:?}",
        console.contains("serving listen="),
        log.lines().rev().take(3).collect::<Vec<_>>(),
    ))
}

#[test]
fn an_eager_host_does_not_wedge_the_vsock_device() {
    let mut failures = Vec::new();
    let mut answered = Vec::new();
    for round in 0..BOOTS / AT_ONCE {
        let handles: Vec<_> = (0..AT_ONCE)
            .map(|i| std::thread::spawn(move || boot_and_knock(round * AT_ONCE + i)))
            .collect();
        for handle in handles {
            match handle.join().expect("boot thread") {
                Ok(time) => answered.push(time),
                Err(error) => failures.push(error),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {BOOTS} knocked-on VMs never answered:\n{}",
        failures.len(),
        failures.join("\n")
    );
    answered.sort();
    eprintln!(
        "{BOOTS} knocked-on boots answered; median {:.2?}, slowest {:.2?}",
        answered[answered.len() / 2],
        answered[answered.len() - 1]
    );
}
