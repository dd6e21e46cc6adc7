//! Limits and resilience in a real VM: hostile programs (a fork bomb, a
//! memory hog, CPU spinners, an output flood, a full /tmp, reboot and kill
//! of PID 1) are contained, and after each the agent answers and a normal
//! program runs. One VM serves every check; the last one powers it off.
//! A second VM, booted into the default image, fills the overlay's upper
//! layer. Figures are printed (see with `--nocapture`).

// A test panics with its reason; that is what expect is for here.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::{Duration, Instant};

use airlock::{Command, ExitStatus, Limits, Sandbox};
use airlock_tests::{run, sh};

/// The agent's resident memory must stay below this, whatever programs do.
const AGENT_RSS_BUDGET: u64 = 16 << 20;

/// A normal program must run after every hostile one.
async fn still_works(sandbox: &Sandbox, after: &str) {
    let out = run(sandbox, sh("echo alive")).await;
    assert_eq!(out.status, ExitStatus::Code(0), "after {after}: {out:?}");
    assert_eq!(out.stdout, b"alive\n", "after {after}");
    let rss = agent_rss(sandbox).await;
    eprintln!("after {after}: agent RSS {} KiB", rss >> 10);
    assert!(rss < AGENT_RSS_BUDGET, "agent RSS {rss} after {after}");
}

async fn agent_rss(sandbox: &Sandbox) -> u64 {
    sandbox.health().await.expect("health").agent_rss_bytes
}

/// Polls Health every 200 ms for `period`; returns the slowest answer.
async fn health_during(sandbox: &Sandbox, period: Duration) -> Duration {
    let end = Instant::now() + period;
    let mut slowest = Duration::ZERO;
    while Instant::now() < end {
        let asked = Instant::now();
        sandbox.health().await.expect("health during load");
        slowest = slowest.max(asked.elapsed());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    slowest
}

#[tokio::test]
async fn hostile_programs_do_not_take_the_agent_down() {
    let sandbox = airlock_tests::builder()
        .vcpus(2)
        .start()
        .await
        .expect("sandbox did not start");
    let health = sandbox.health().await.expect("health");
    assert!(health.protocol_revision >= 4, "rebuild the initramfs");
    eprintln!(
        "guest memory {} MiB, agent RSS at boot {} KiB",
        health.memory_total_bytes >> 20,
        health.agent_rss_bytes >> 10
    );

    fork_bomb_is_contained(&sandbox).await;
    memory_hog_is_oom_killed(&sandbox).await;
    cpu_spinners_leave_health_responsive(&sandbox).await;
    output_flood_ends_at_the_deadline(&sandbox).await;
    full_tmp_is_enospc(&sandbox).await;
    rlimits_apply(&sandbox).await;
    unprivileged_programs_cannot_reboot_or_kill_pid1(&sandbox).await;
    metering_adds_up(&sandbox).await;
    privileged_reboot_ends_the_vm_with_a_clear_error(sandbox).await;
}

async fn fork_bomb_is_contained(sandbox: &Sandbox) {
    // busybox ash refuses `:` as a function name; same bomb, named `b`.
    let bomb = sh("b(){ b|b& };b; sleep 8")
        .limits(Limits::new().pids(64))
        .timeout(Duration::from_secs(8));
    let execution = sandbox.exec(bomb).await.expect("start");
    let pid = execution.pid();
    let collector = tokio::spawn(execution.output());
    let slowest = health_during(sandbox, Duration::from_secs(6)).await;
    let out = collector.await.expect("join").expect("output");
    eprintln!(
        "fork bomb: slowest Health {slowest:?}, usage {:?}, {}, stderr {} bytes: {:?}",
        out.usage,
        out.status,
        out.stderr.len(),
        String::from_utf8_lossy(&out.stderr[..out.stderr.len().min(80)])
    );
    assert!(out.timed_out, "{out:?}");
    let usage = out.usage.expect("usage");
    assert!(usage.pids_peak <= 64, "{usage:?}");
    // Anything the bomb left is gone with its cgroup.
    let _ = sandbox.process(pid).kill().await;
    still_works(sandbox, "the fork bomb").await;
}

async fn memory_hog_is_oom_killed(sandbox: &Sandbox) {
    let hog = Command::new("awk")
        .arg("BEGIN { s = sprintf(\"%1048576s\", \"\"); while (1) a[n++] = s n }")
        .limits(Limits::new().memory_bytes(32 << 20));
    let out = run(sandbox, hog).await;
    eprintln!(
        "memory hog (32 MiB limit): {} after {:?}, usage {:?}",
        out.status, out.duration, out.usage
    );
    assert_eq!(out.status, ExitStatus::Signal(9), "{out:?}");
    assert!(out.oom_killed, "{out:?}");
    let peak = out.usage.expect("usage").memory_peak_bytes;
    assert!(peak <= 33 << 20, "peak {peak} over the limit");
    still_works(sandbox, "the memory hog").await;
}

async fn cpu_spinners_leave_health_responsive(sandbox: &Sandbox) {
    let spin = sh("yes > /dev/null & yes > /dev/null & wait")
        .limits(Limits::new().cpu_millis(1000))
        .timeout(Duration::from_secs(8));
    let execution = sandbox.exec(spin).await.expect("start");
    let collector = tokio::spawn(execution.output());
    tokio::time::sleep(Duration::from_secs(1)).await;
    let slowest = health_during(sandbox, Duration::from_secs(5)).await;
    let out = collector.await.expect("join").expect("output");
    let usage = out.usage.expect("usage");
    eprintln!(
        "two `yes` on two vCPUs, limited to one CPU: slowest Health {slowest:?}, \
         {:?} CPU in {:?}",
        usage.cpu, out.duration
    );
    assert!(out.timed_out, "{out:?}");
    // A user notices a sandbox that stops answering, not milliseconds.
    assert!(slowest < Duration::from_secs(5), "Health took {slowest:?}");
    // One CPU's worth over the run, with slack for the period boundaries.
    assert!(
        usage.cpu <= out.duration + Duration::from_millis(500),
        "{:?} CPU in {:?}",
        usage.cpu,
        out.duration
    );
    still_works(sandbox, "the CPU spinners").await;
}

async fn output_flood_ends_at_the_deadline(sandbox: &Sandbox) {
    let out = run(sandbox, Command::new("yes").timeout(Duration::from_secs(3))).await;
    eprintln!(
        "output flood: {} bytes in {:?}, {}",
        out.stdout.len(),
        out.duration,
        out.status
    );
    assert!(out.timed_out, "{}", out.status);
    assert!(out.stdout.starts_with(b"y\ny\n"));
    still_works(sandbox, "the output flood").await;
}

async fn full_tmp_is_enospc(sandbox: &Sandbox) {
    let out = run(
        sandbox,
        sh("dd if=/dev/zero of=/tmp/fill bs=1M 2>&1; echo rc=$?; df -k /tmp | tail -1; rm -f /tmp/fill"),
    )
    .await;
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("filling /tmp: {}", text.trim());
    assert!(text.contains("No space left on device"), "{text}");
    assert!(!text.contains("rc=0"), "{text}");
    still_works(sandbox, "filling /tmp").await;
}

async fn rlimits_apply(sandbox: &Sandbox) {
    // Without limits of its own a program starts with the usual 1024 open
    // files, under the agent's raised hard limit; the agent itself (which
    // holds descriptors for every program) has far more.
    let out = run(
        sandbox,
        sh("ulimit -Sn; ulimit -Hn; grep 'Max open files' /proc/1/limits"),
    )
    .await;
    let text = String::from_utf8_lossy(&out.stdout);
    let words: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(words.first(), Some(&"1024"), "{text}");
    let hard: u64 = words[1].parse().expect("a number");
    let agent_soft: u64 = words[5].parse().expect("a number");
    assert!(hard >= 65536, "{text}");
    assert!(agent_soft >= 65536, "{text}");
    let out = run(
        sandbox,
        sh("ulimit -n; grep 'core file size' /proc/self/limits")
            .limits(Limits::new().open_files(64).core_bytes(4096)),
    )
    .await;
    let text = String::from_utf8_lossy(&out.stdout);
    let words: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(words.first(), Some(&"64"), "{text}");
    assert_eq!(
        words[words.len() - 3..],
        ["4096", "4096", "bytes"],
        "{text}"
    );
}

async fn unprivileged_programs_cannot_reboot_or_kill_pid1(sandbox: &Sandbox) {
    // Root without CAP_SYS_BOOT: reboot(2) is refused.
    let out = run(sandbox, sh("reboot -f")).await;
    eprintln!(
        "reboot -f as unprivileged root: {}, {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    assert_ne!(out.status, ExitStatus::Code(0), "{out:?}");
    // Another user: not even a signal reaches PID 1.
    let out = run(sandbox, sh("reboot -f").user("1000:1000")).await;
    assert_ne!(out.status, ExitStatus::Code(0), "{out:?}");
    let out = run(sandbox, sh("kill -TERM 1").user("1000:1000")).await;
    eprintln!(
        "kill -TERM 1 as uid 1000: {}, {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    assert_ne!(out.status, ExitStatus::Code(0), "{out:?}");
    // Root may send them, but PID 1 has no handler for them, so the kernel
    // discards them (even SIGKILL: init is unkillable from inside).
    let out = run(
        sandbox,
        sh("kill -TERM 1; kill -INT 1; kill -HUP 1; kill -KILL 1; echo sent"),
    )
    .await;
    assert_eq!(out.stdout, b"sent\n", "{out:?}");
    sandbox.health().await.expect("agent alive after signals");
    still_works(sandbox, "reboot and kill attempts").await;
}

async fn metering_adds_up(sandbox: &Sandbox) {
    let health = sandbox.health().await.expect("health");
    eprintln!(
        "metering: programs used {:?} CPU since boot, {} KiB now; guest {} of {} MiB available; \
         agent RSS {} KiB",
        Duration::from_micros(health.programs_cpu_us),
        health.programs_memory_bytes >> 10,
        health.memory_available_bytes >> 20,
        health.memory_total_bytes >> 20,
        health.agent_rss_bytes >> 10
    );
    // The CPU spinners alone used seconds.
    assert!(health.programs_cpu_us > 1_000_000, "{health:?}");
    assert!(health.agent_rss_bytes < AGENT_RSS_BUDGET);
    // The agent keeps these files open between answers: each answer must
    // still be read anew.
    let out = run(
        sandbox,
        sh("i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done"),
    )
    .await;
    assert_eq!(out.status, ExitStatus::Code(0), "{out:?}");
    let later = sandbox.health().await.expect("health");
    assert!(
        later.programs_cpu_us > health.programs_cpu_us,
        "a program ran, yet its CPU time is not counted: {health:?} then {later:?}"
    );
    assert!(later.uptime_us > health.uptime_us, "{later:?}");
}

async fn privileged_reboot_ends_the_vm_with_a_clear_error(sandbox: Sandbox) {
    let result = sandbox
        .exec(sh("sleep 1; reboot -f").privileged(true))
        .await
        .expect("start")
        .output()
        .await;
    let error = result.expect_err("the VM went away mid-call");
    let message = airlock::error_chain(&error);
    eprintln!("privileged reboot -f: {message}");
    assert!(message.contains("VM exited"), "{message}");
    assert!(sandbox.health().await.is_err());
}

#[tokio::test]
async fn a_full_overlay_is_enospc_not_a_dead_agent() {
    let sandbox = airlock_tests::builder()
        .image(airlock_tests::default_image())
        .start()
        .await
        .expect("sandbox did not start");
    // The overlay's writable layer is a tmpfs of half the guest.
    let out = run(
        &sandbox,
        sh("dd if=/dev/zero of=/root/fill bs=1M 2>&1; echo rc=$?; rm -f /root/fill"),
    )
    .await;
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("filling the overlay: {}", text.trim().replace('\n', "; "));
    assert!(text.contains("No space left on device"), "{text}");
    assert!(!text.contains("rc=0"), "{text}");
    assert!(!out.oom_killed, "{out:?}");
    still_works(&sandbox, "filling the overlay").await;
    sandbox
        .shutdown(Duration::from_secs(10))
        .await
        .expect("shutdown");
}
