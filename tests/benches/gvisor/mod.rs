//! gVisor as a peer: `runsc run` (Debian's `runsc`, the ptrace platform, no
//! network, a writable root kept in memory with `--overlay`) of a program
//! in an OCI bundle whose root filesystem is the default image's, unpacked
//! from its ext4 file with e2fsprogs' `debugfs -R "rdump / DIR"` (no mount,
//! no loop device) into `target/bench-gvisor/<image id>/rootfs`, once.
//!
//! A run is timed from the spawn of `runsc run` to the first byte of its
//! stdout, and to its exit: a container created, started and its program
//! run, as a sandbox is created and its first program run.
//! Where the host refuses gVisor's cgroups (a host with hybrid cgroups,
//! say), runs fall back to `--ignore-cgroups`, and the table says so.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::AsyncReadExt;

/// A peer ready to run: `runsc`, its state directory and the bundles.
pub struct Gvisor {
    runsc: PathBuf,
    /// runsc's `--root`: its state, removed with the peer.
    state: tempfile::TempDir,
    rootfs: PathBuf,
    flags: Vec<&'static str>,
    /// `runsc --version`'s first line.
    pub version: String,
    /// Why cgroups are ignored, if they are.
    pub cgroups_note: Option<String>,
    runs: u64,
}

/// One `runsc run`.
pub struct Run {
    /// From the spawn to the first byte of stdout.
    pub first_output: Duration,
    /// From the spawn to the exit.
    pub exited: Duration,
}

impl Gvisor {
    /// Finds `runsc`, unpacks `image` (once) and checks that a container
    /// runs; the error says exactly what failed.
    pub async fn prepare(image: &Path, target_dir: &Path) -> Result<Gvisor, String> {
        let runsc = find_in_path("runsc").ok_or_else(|| {
            "runsc is not installed: scripts/bench installs Debian's runsc (apt-get install runsc)"
                .to_owned()
        })?;
        let version = output_of(&runsc, &["--version"])?
            .lines()
            .next()
            .unwrap_or_default()
            .to_owned();
        let rootfs = unpack(image, target_dir)?;
        let state = tempfile::tempdir().map_err(|e| format!("runsc's state directory: {e}"))?;
        let mut peer = Gvisor {
            runsc,
            state,
            rootfs,
            flags: vec!["--platform=ptrace", "--network=none", "--overlay"],
            version,
            cgroups_note: None,
            runs: 0,
        };
        if let Err(error) = peer.run(&["echo", "hi"], "hi\n").await {
            peer.flags.push("--ignore-cgroups");
            peer.run(&["echo", "hi"], "hi\n")
                .await
                .map_err(|again| format!("{again} (and with cgroups: {error})"))?;
            peer.cgroups_note = Some(format!("cgroups ignored: with them, {error}"));
        }
        Ok(peer)
    }

    /// `runsc run` of `argv`, whose whole output must be `expected`.
    pub async fn run(&mut self, argv: &[&str], expected: &str) -> Result<Run, String> {
        self.runs += 1;
        let bundle = self.state.path().join(format!("bundle-{}", self.runs));
        std::fs::create_dir(&bundle).map_err(|e| format!("{}: {e}", bundle.display()))?;
        let config = serde_json::to_vec_pretty(&spec(argv, &self.rootfs))
            .map_err(|e| format!("config.json: {e}"))?;
        std::fs::write(bundle.join("config.json"), config)
            .map_err(|e| format!("config.json: {e}"))?;
        let id = format!("airlock-bench-{}-{}", std::process::id(), self.runs);
        let began = Instant::now();
        let mut child = tokio::process::Command::new(&self.runsc)
            .arg("--root")
            .arg(self.state.path())
            .args(&self.flags)
            .args(["run", "--bundle"])
            .arg(&bundle)
            .arg(&id)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("{}: {e}", self.runsc.display()))?;
        let mut stdout = child.stdout.take().ok_or("no stdout")?;
        let mut out = Vec::new();
        let mut first = None;
        let mut buf = [0u8; 4096];
        loop {
            let n = stdout
                .read(&mut buf)
                .await
                .map_err(|e| format!("runsc's stdout: {e}"))?;
            if n == 0 {
                break;
            }
            first.get_or_insert_with(Instant::now);
            out.extend_from_slice(&buf[..n]);
        }
        let result = child
            .wait_with_output()
            .await
            .map_err(|e| format!("runsc: {e}"))?;
        let exited = began.elapsed();
        let _ = std::fs::remove_dir_all(&bundle);
        let text = String::from_utf8_lossy(&out);
        if !result.status.success() || text != expected {
            return Err(format!(
                "`runsc {} run {}` {} with stdout {text:?} and stderr {:?}",
                self.flags.join(" "),
                argv.join(" "),
                result.status,
                String::from_utf8_lossy(&result.stderr).trim()
            ));
        }
        Ok(Run {
            first_output: first.map_or(exited, |at| at - began),
            exited,
        })
    }
}

/// The OCI runtime spec of a container running `argv` on `rootfs`, as
/// `runsc spec` writes it, with a writable root.
fn spec(argv: &[&str], rootfs: &Path) -> serde_json::Value {
    let caps = ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"];
    json!({
        "ociVersion": "1.0.0",
        "process": {
            "user": {"uid": 0, "gid": 0},
            "args": argv,
            "env": [
                "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "HOME=/root",
            ],
            "cwd": "/",
            "capabilities": {
                "bounding": caps, "effective": caps, "inheritable": caps, "permitted": caps,
            },
        },
        "root": {"path": rootfs, "readonly": false},
        "hostname": "runsc",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs"},
            {"destination": "/sys", "type": "sysfs", "source": "sysfs",
             "options": ["nosuid", "noexec", "nodev", "ro"]},
        ],
        "linux": {
            "namespaces": [
                {"type": "pid"}, {"type": "network"}, {"type": "ipc"},
                {"type": "uts"}, {"type": "mount"},
            ],
        },
    })
}

/// The image's files in a directory of their own, unpacked on first use.
fn unpack(image: &Path, target_dir: &Path) -> Result<PathBuf, String> {
    let id = image
        .parent()
        .and_then(Path::file_name)
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|| "image".to_owned());
    let dir = target_dir.join("bench-gvisor").join(id);
    let rootfs = dir.join("rootfs");
    if rootfs.join("usr/bin/python3").exists() {
        return Ok(rootfs);
    }
    let partial = dir.join("rootfs.partial");
    let _ = std::fs::remove_dir_all(&partial);
    std::fs::create_dir_all(&partial).map_err(|e| format!("{}: {e}", partial.display()))?;
    let debugfs = find_in_path("debugfs")
        .or_else(|| Some(PathBuf::from("/usr/sbin/debugfs")).filter(|p| p.is_file()))
        .ok_or("debugfs is not installed: scripts/setup installs e2fsprogs")?;
    let request = format!("rdump / {}", partial.display());
    output_of(&debugfs, &["-R", &request, &image.to_string_lossy()])?;
    if !partial.join("usr/bin/python3").exists() {
        return Err(format!(
            "debugfs did not unpack {} into {}",
            image.display(),
            partial.display()
        ));
    }
    std::fs::rename(&partial, &rootfs).map_err(|e| format!("{}: {e}", rootfs.display()))?;
    Ok(rootfs)
}

fn find_in_path(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(program))
            .find(|candidate| candidate.is_file())
    })
}

/// A program's stdout, or why it failed.
fn output_of(program: &Path, args: &[&str]) -> Result<String, String> {
    let out = std::process::Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{}: {e}", program.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} {} {}: {}",
            program.display(),
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
