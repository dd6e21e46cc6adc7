//! The peer: the QEMU guest agent (Debian's `qemu-guest-agent`) in the same
//! VM as ours, doing the same exec round trip and the same upload.
//!
//! The VM boots the `bench-qga` image (the default Debian image plus
//! qemu-guest-agent; `scripts/bench` builds it) with a virtio-serial port
//! named `org.qemu.guest_agent.0` whose host side is a Unix socket
//! ([`airlock::SandboxBuilder::serial_port`]). Our agent starts qemu-ga on
//! that port (`/dev/vportNpM`, found by name under
//! `/sys/class/virtio-ports`, as there is no udev for the
//! `/dev/virtio-ports/` link); [`qga`] talks to it. Ours and theirs then
//! alternate, run for run, so both see the same noise. qemu-ga learns of an
//! exit only when asked, so its exec is measured twice: polling back to
//! back (soonest to notice, but every poll takes the one vCPU from the
//! program) and polling a few ms apart.

mod qga;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use airlock::{Command, Execution, Sandbox};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::common::{ms, percentile, pseudo_random, MIB};
use crate::{fmt_ms, ratio, Table};
use qga::Qga;

/// The image `scripts/bench` builds for the peer.
pub const QGA_IMAGE: &str = "bench-qga";
/// The port name qemu-ga looks for (and libvirt uses).
const QGA_PORT: &str = "org.qemu.guest_agent.0";
/// Sequential `/bin/true` round trips per side.
const EXEC_RUNS: usize = 100;
/// Iterations of the guest's own fork+exec+wait loop (dash).
const GUEST_LOOP_RUNS: usize = 200;
/// Sequential cheapest-request round trips per side.
const PING_RUNS: usize = 200;
/// The blocks the calls in a row are split into, ours and theirs in turn.
const PING_BLOCKS: usize = 4;
/// The pause between `guest-exec-status` polls in the paced variant.
const POLL_PAUSE: Duration = Duration::from_millis(5);
/// Bytes per `guest-file-write` (before base64).
const QGA_CHUNK: usize = 48 * 1024;
/// How long qemu-ga may take to answer its first sync.
const QGA_START_TIMEOUT: Duration = Duration::from_secs(60);

/// Boots the peer VM, measures ours against qemu-ga, adds the rows to
/// `table` and returns them as JSON. `upload_mib` is the file size both
/// sides upload.
pub async fn run(table: &mut Table, upload_mib: usize) -> Value {
    let image = peer_image();
    let dir = tempfile::tempdir().expect("temp dir");
    // QEMU creates the socket, and a root caller's library runs QEMU as an
    // unprivileged user (`VmmUser::Auto`, as for every VM of the benchmark):
    // let that user create entries here (sticky, not listable).
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1733))
        .expect("socket directory mode");
    let socket = dir.path().join("qga.sock");
    // /tmp is a tmpfs of half the guest's memory and holds one file at a time.
    let memory = u32::try_from((upload_mib * 4 + 256).max(512)).expect("memory size");
    let sandbox = airlock_tests::builder()
        .image(&image)
        .memory_mib(memory)
        .serial_port(QGA_PORT, &socket)
        .start()
        .await
        .expect("peer sandbox");
    let (qemu_ga, mut qga) = start_qga(&sandbox, &socket).await;
    let info = qga.call("guest-info", json!({})).await.expect("guest-info");
    let version = info
        .get("version")
        .and_then(Value::as_str)
        .unwrap_or("?")
        .to_owned();

    // The program's own cost here: Debian's /bin/true is dynamically linked.
    let guest_spawn = crate::guest_micros(
        &sandbox,
        &format!("i=0; while [ $i -lt {GUEST_LOOP_RUNS} ]; do /bin/true; i=$((i+1)); done"),
        GUEST_LOOP_RUNS,
    )
    .await;

    // Warm both paths (page cache, first-use allocations), then alternate
    // ours, theirs polling back to back, theirs polling every few ms.
    for _ in 0..5 {
        ours_true(&sandbox).await;
        qga_true(&mut qga, Duration::ZERO).await;
    }
    let mut ours = Vec::with_capacity(EXEC_RUNS);
    let mut ours_agent = Vec::with_capacity(EXEC_RUNS);
    let mut theirs = [Vec::with_capacity(EXEC_RUNS), Vec::with_capacity(EXEC_RUNS)];
    let mut polls = [Vec::with_capacity(EXEC_RUNS), Vec::with_capacity(EXEC_RUNS)];
    for _ in 0..EXEC_RUNS {
        let began = Instant::now();
        ours_agent.push(ours_true(&sandbox).await);
        ours.push(began.elapsed());
        for (i, pause) in [Duration::ZERO, POLL_PAUSE].into_iter().enumerate() {
            let began = Instant::now();
            polls[i].push(qga_true(&mut qga, pause).await);
            theirs[i].push(began.elapsed());
        }
    }
    ours.sort();
    ours_agent.sort();
    for times in &mut theirs {
        times.sort();
    }
    for counts in &mut polls {
        counts.sort_unstable();
    }

    // The cheapest request of each: our Health, their guest-ping.
    let mut health = Vec::with_capacity(PING_RUNS);
    let mut ping = Vec::with_capacity(PING_RUNS);
    for _ in 0..PING_RUNS {
        let began = Instant::now();
        sandbox.health().await.expect("health");
        health.push(began.elapsed());
        let began = Instant::now();
        qga.call("guest-ping", json!({})).await.expect("guest-ping");
        ping.push(began.elapsed());
    }
    health.sort();
    ping.sort();
    // The same, each in runs of calls in a row: alternating, every call
    // meets the other agent's work in the guest (its code and its page
    // tables evicted); in a row, each agent is warm, as with many calls.
    let mut health_in_row = Vec::with_capacity(PING_RUNS);
    let mut ping_in_row = Vec::with_capacity(PING_RUNS);
    for _ in 0..PING_BLOCKS {
        for _ in 0..PING_RUNS / PING_BLOCKS {
            let began = Instant::now();
            sandbox.health().await.expect("health");
            health_in_row.push(began.elapsed());
        }
        for _ in 0..PING_RUNS / PING_BLOCKS {
            let began = Instant::now();
            qga.call("guest-ping", json!({})).await.expect("guest-ping");
            ping_in_row.push(began.elapsed());
        }
    }
    health_in_row.sort();
    ping_in_row.sort();

    // The same file both ways in, each checked in the guest, then removed.
    let data = pseudo_random(upload_mib * MIB);
    let digest = hex(&Sha256::digest(&data));
    let source = dir.path().join("source.bin");
    std::fs::write(&source, &data).expect("write source");
    let began = Instant::now();
    sandbox
        .fs()
        .write_file("/tmp/ours.bin", &source)
        .await
        .expect("our upload");
    let ours_upload = began.elapsed();
    check_and_remove(&sandbox, "/tmp/ours.bin", &digest).await;
    let began = Instant::now();
    qga.upload("/tmp/qga.bin", &data, QGA_CHUNK)
        .await
        .expect("qga upload");
    let qga_upload = began.elapsed();
    check_and_remove(&sandbox, "/tmp/qga.bin", &digest).await;
    let bytes = (upload_mib * MIB) as f64;
    let ours_mbps = bytes / ours_upload.as_secs_f64() / 1e6;
    let qga_mbps = bytes / qga_upload.as_secs_f64() / 1e6;

    let (ours_median, ours_p99) = (percentile(&ours, 50), percentile(&ours, 99));
    let ours_agent_median = percentile(&ours_agent, 50);
    let [busy, paced] = theirs.map(|times| (percentile(&times, 50), percentile(&times, 99)));
    let [busy_polls, paced_polls] = polls.map(|counts| counts[counts.len() / 2]);
    let (health_median, ping_median) = (percentile(&health, 50), percentile(&ping, 50));
    let (health_row_median, ping_row_median) =
        (percentile(&health_in_row, 50), percentile(&ping_in_row, 50));
    let pause_ms = POLL_PAUSE.as_millis();
    table.heading(&format!(
        "peer: qemu-ga {version} over virtio-serial, same VM (image {QGA_IMAGE}), accel {}",
        sandbox.accel().qemu_name()
    ));
    table.heading_note(&format!(
        "{EXEC_RUNS} runs each, alternating; ours/QGA below 1 is ours faster for times, \
         above 1 for MB/s"
    ));
    table.row4("measure", "ours", "QGA", "ours/QGA");
    let time_row = |table: &mut Table, name: &str, a: Duration, b: Duration| {
        table.row4(name, &fmt_ms(a), &fmt_ms(b), &ratio(ms(a) / ms(b)));
    };
    time_row(
        table,
        "exec /bin/true, QGA polls back to back (median)",
        ours_median,
        busy.0,
    );
    time_row(table, "  same, p99", ours_p99, busy.1);
    time_row(
        table,
        &format!("exec /bin/true, QGA polls {pause_ms} ms apart (median)"),
        ours_median,
        paced.0,
    );
    time_row(table, "  same, p99", ours_p99, paced.1);
    table.row4(
        "QGA guest-exec-status polls per exec (median)",
        "",
        &format!("{busy_polls} / {paced_polls}"),
        "",
    );
    table.row4(
        &format!("guest fork+exec+wait /bin/true (mean of {GUEST_LOOP_RUNS})"),
        &fmt_ms(guest_spawn),
        "",
        "",
    );
    table.row4(
        "our agent-reported start to exit (median)",
        &fmt_ms(ours_agent_median),
        "",
        "",
    );
    time_row(
        table,
        &format!("cheapest request: Health / guest-ping ({PING_RUNS})"),
        health_median,
        ping_median,
    );
    time_row(
        table,
        &format!("  same, {} in a row each (median)", PING_RUNS / PING_BLOCKS),
        health_row_median,
        ping_row_median,
    );
    table.row4(
        &format!(
            "upload {upload_mib} MiB, MB/s (QGA: {} KiB base64)",
            QGA_CHUNK / 1024
        ),
        &format!("{ours_mbps:.1}"),
        &format!("{qga_mbps:.1}"),
        &ratio(ours_mbps / qga_mbps),
    );

    drop(qga);
    drop(qemu_ga);
    sandbox
        .shutdown(Duration::from_secs(10))
        .await
        .expect("shutdown");
    json!({
        "image": QGA_IMAGE,
        "qga_version": version,
        "exec_true": {
            "runs": EXEC_RUNS,
            "ours_median_ms": ms(ours_median),
            "ours_p99_ms": ms(ours_p99),
            "ours_agent_reported_median_ms": ms(ours_agent_median),
            "guest_spawn_ms": ms(guest_spawn),
            "qga_polls_back_to_back": {
                "median_ms": ms(busy.0),
                "p99_ms": ms(busy.1),
                "status_polls_median": busy_polls,
                "median_ours_over_qga": ms(ours_median) / ms(busy.0),
            },
            "qga_polls_apart": {
                "pause_ms": pause_ms,
                "median_ms": ms(paced.0),
                "p99_ms": ms(paced.1),
                "status_polls_median": paced_polls,
                "median_ours_over_qga": ms(ours_median) / ms(paced.0),
            },
        },
        "cheapest_request": {
            "runs": PING_RUNS,
            "ours_health_median_ms": ms(health_median),
            "qga_ping_median_ms": ms(ping_median),
            "in_a_row": PING_RUNS / PING_BLOCKS,
            "ours_health_in_a_row_median_ms": ms(health_row_median),
            "qga_ping_in_a_row_median_ms": ms(ping_row_median),
        },
        "upload": {
            "bytes": upload_mib * MIB,
            "qga_chunk_bytes": QGA_CHUNK,
            "ours_mb_per_s": ours_mbps,
            "qga_mb_per_s": qga_mbps,
            "ours_over_qga": ours_mbps / qga_mbps,
        },
    })
}

/// The peer image, failing with the command that builds it.
fn peer_image() -> std::path::PathBuf {
    let store = airlock::images::ImageStore::open_default();
    match store.resolve(QGA_IMAGE) {
        Ok(image) => image.path,
        Err(error) => panic!(
            "{error}: run scripts/bench (it builds {QGA_IMAGE} with \
             `airlock-rootfs image build --name {QGA_IMAGE} --include qemu-guest-agent`)"
        ),
    }
}

/// Starts qemu-ga on the port named [`QGA_PORT`] through our own exec
/// (tagged, left running) and connects to it.
async fn start_qga(sandbox: &Sandbox, socket: &Path) -> (Execution, Qga) {
    let script = format!(
        r#"for d in /sys/class/virtio-ports/vport*; do
             if [ "$(cat "$d/name")" = {QGA_PORT} ]; then
               exec /usr/sbin/qemu-ga -m virtio-serial -p "/dev/${{d##*/}}"
             fi
           done
           echo "no virtio-serial port named {QGA_PORT}" >&2; exit 1"#
    );
    let execution = sandbox
        .exec(Command::new("sh").arg("-c").arg(script).tag("qemu-ga"))
        .await
        .expect("start qemu-ga");
    match Qga::connect(socket, QGA_START_TIMEOUT).await {
        Ok(client) => (execution, client),
        Err(error) => {
            let output = tokio::time::timeout(Duration::from_secs(5), execution.output()).await;
            panic!("qemu-ga: {error}; its output: {output:?}");
        }
    }
}

/// Our exec of `/bin/true` to its exit; returns the agent's start-to-exit.
async fn ours_true(sandbox: &Sandbox) -> Duration {
    let exit = sandbox
        .exec(Command::new("/bin/true"))
        .await
        .expect("exec /bin/true")
        .wait()
        .await
        .expect("wait /bin/true");
    assert!(exit.status.success(), "/bin/true failed: {exit:?}");
    exit.duration
}

/// qemu-ga's exec of `/bin/true` to its exit; returns the status polls.
async fn qga_true(qga: &mut Qga, pause: Duration) -> u32 {
    let exit = qga.exec("/bin/true", pause).await.expect("qga exec");
    assert_eq!(exit.exitcode, 0, "qemu-ga: /bin/true exited {exit:?}");
    exit.polls
}

/// Checks the guest's SHA-256 of `path` against `digest`, then removes it.
async fn check_and_remove(sandbox: &Sandbox, path: &str, digest: &str) {
    let output = sandbox
        .exec(
            Command::new("sh")
                .arg("-c")
                .arg(format!("sha256sum {path} && rm {path}")),
        )
        .await
        .expect("exec sha256sum")
        .output()
        .await
        .expect("sha256sum output");
    assert!(output.status.success(), "sha256sum {path}: {output:?}");
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        text.split_whitespace().next(),
        Some(digest),
        "{path} arrived altered"
    );
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
