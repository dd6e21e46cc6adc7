//! The process API in a real VM: exit codes and signals, deadlines, errors,
//! users, whole-tree kills, stdin, detached processes, flow control with
//! large output, and many concurrent programs. One VM serves every check,
//! each a named test (`cargo test --test process -- exit_codes` runs one);
//! each prints what it measured.

// A test panics with its reason; that is what expect is for here.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::ExitCode;
use std::time::{Duration, Instant};

use airlock::{Code, Command, Event, ExitStatus, ProcessState, Sandbox, Signal, Stdin};
use airlock_tests::shared_vm::{Order, Suite};
use airlock_tests::{run, sh, sha256_hex, status_kib, stdout_of};

fn main() -> ExitCode {
    // One at a time: large_output_to_a_slow_reader measures the agent's
    // memory, the OOM check exhausts the guest's, and the deadline and
    // SIGTERM checks count the guest's `sleep 1000` processes.
    Suite::new(boot, Order::Sequential)
        .checks(airlock_tests::checks![
            exit_codes_and_signals,
            programs_that_cannot_start,
            users_and_cgroups,
            deadline_keeps_partial_output,
            sigterm_kills_the_whole_tree,
            output_is_complete_and_background_children_do_not_hold_it,
            stdin_round_trips,
            detached_processes_survive_and_replay,
            many_concurrent_programs,
            large_output_to_a_slow_reader,
            out_of_memory_kills_the_program_not_the_agent,
        ])
        .run()
}

/// The shared VM, with an agent new enough for these checks.
async fn boot() -> Sandbox {
    let sandbox = airlock_tests::boot().await;
    let health = sandbox.health().await.expect("health");
    assert!(health.protocol_revision >= 2, "rebuild the initramfs");
    sandbox
}

async fn exit_codes_and_signals(sandbox: &Sandbox) {
    let out = run(sandbox, sh("echo out; echo err >&2; exit 3")).await;
    assert_eq!(out.status, ExitStatus::Code(3));
    assert_eq!(
        (out.stdout.as_slice(), out.stderr.as_slice()),
        (&b"out\n"[..], &b"err\n"[..])
    );
    assert!(!out.timed_out && !out.oom_killed);
    assert!(out.duration > Duration::ZERO);

    let out = run(sandbox, sh("kill -TERM $$")).await;
    assert_eq!(out.status, ExitStatus::Signal(15));
    assert_eq!(out.status.shell_code(), 143);

    // A signal sent through the API: 128 + N as a shell reports it.
    let execution = sandbox
        .exec(sh("echo ready; exec sleep 1000"))
        .await
        .expect("start");
    let mut execution = execution;
    assert_eq!(
        execution.next_event().await.expect("event"),
        Some(Event::Stdout("ready\n".into()))
    );
    execution.signal(Signal::INT).await.expect("signal");
    let exit = execution.wait().await.expect("wait");
    assert_eq!(exit.status, ExitStatus::Signal(2));
    assert_eq!(exit.status.shell_code(), 130);
}

async fn programs_that_cannot_start(sandbox: &Sandbox) {
    let error = sandbox
        .exec(Command::new("no-such-program-xyz"))
        .await
        .expect_err("a missing program cannot start");
    assert_eq!(error.agent_code(), Some(Code::NotFound), "{error}");
    assert!(error.to_string().contains("no-such-program-xyz"), "{error}");

    let error = sandbox
        .exec(Command::new("true").cwd("/no/such/dir"))
        .await
        .expect_err("a missing cwd");
    assert_eq!(error.agent_code(), Some(Code::NotFound), "{error}");
    assert!(error.to_string().contains("/no/such/dir"), "{error}");

    let error = sandbox
        .exec(Command::new("true").cwd("/etc/passwd"))
        .await
        .expect_err("a file as cwd");
    assert_eq!(error.agent_code(), Some(Code::InvalidArgument), "{error}");

    let error = sandbox
        .exec(Command::new("true").user("no-such-user"))
        .await
        .expect_err("an unknown user");
    assert_eq!(error.agent_code(), Some(Code::NotFound), "{error}");
    assert!(error.to_string().contains("no-such-user"), "{error}");
}

async fn users_and_cgroups(sandbox: &Sandbox) {
    let out = run(
        sandbox,
        sh("echo $(id -u) $(id -g) $HOME; touch /tmp/as-user; ls -n /tmp/as-user")
            .user("1000:1000"),
    )
    .await;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("1000 1000 /"), "{text}");
    assert!(lines.next().is_some_and(|l| l.contains(" 1000 ")), "{text}");
    let root = stdout_of(sandbox, "id -u; echo $HOME").await;
    assert_eq!(root, "0\n/root\n");

    // Each program runs in a cgroup of its own.
    let first = stdout_of(sandbox, "cat /proc/self/cgroup").await;
    let second = stdout_of(sandbox, "cat /proc/self/cgroup").await;
    assert!(first.starts_with("0::/airlock/exec-"), "{first}");
    assert_ne!(first, second);

    // Finished programs' cgroups are removed (in the background, off the
    // exec's path): what is left is the listing program's own and the
    // spare made ahead for the next program.
    let began = Instant::now();
    let left = loop {
        let listed = stdout_of(sandbox, "ls /sys/fs/cgroup/airlock | grep -c '^exec-'").await;
        let count: usize = listed.trim().parse().expect("a count");
        if count <= 2 || began.elapsed() > Duration::from_secs(10) {
            break count;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        left <= 2,
        "{left} program cgroups left after their programs ended"
    );
}

async fn deadline_keeps_partial_output(sandbox: &Sandbox) {
    let began = Instant::now();
    let out = run(
        sandbox,
        sh("echo partial; echo err >&2; sleep 1000 & wait; echo never")
            .timeout(Duration::from_secs(2)),
    )
    .await;
    assert!(out.timed_out, "{out:?}");
    assert_eq!(out.status, ExitStatus::Signal(9));
    assert_eq!(out.stdout, b"partial\n");
    assert_eq!(out.stderr, b"err\n");
    assert!(out.duration >= Duration::from_secs(2));
    eprintln!("deadline: 2 s timeout ended after {:?}", began.elapsed());
    assert_no_process(sandbox, "sleep 1000").await;
}

/// How many processes in the guest have exactly this command line.
async fn processes_running(sandbox: &Sandbox, cmdline: &str) -> usize {
    let listing = stdout_of(
        sandbox,
        "for p in /proc/[0-9]*; do [ -r $p/cmdline ] && tr '\\0' ' ' < $p/cmdline && echo; done",
    )
    .await;
    listing.lines().filter(|l| l.trim_end() == cmdline).count()
}

/// Fails if a process with this command line is left in the guest.
async fn assert_no_process(sandbox: &Sandbox, cmdline: &str) {
    let left = processes_running(sandbox, cmdline).await;
    assert_eq!(left, 0, "{left} of {cmdline:?} left behind");
}

async fn sigterm_kills_the_whole_tree(sandbox: &Sandbox) {
    let mut execution = sandbox
        .exec(sh("sleep 1000 & sleep 1000 & echo started; wait").tag("tree"))
        .await
        .expect("start");
    assert_eq!(
        execution.next_event().await.expect("event"),
        Some(Event::Stdout("started\n".into()))
    );
    assert_eq!(processes_running(sandbox, "sleep 1000").await, 2);
    sandbox
        .process("tree")
        .signal(Signal::TERM)
        .await
        .expect("signal by tag");
    let exit = execution.wait().await.expect("wait");
    assert_eq!(exit.status, ExitStatus::Signal(15));
    assert_no_process(sandbox, "sleep 1000").await;
}

async fn output_is_complete_and_background_children_do_not_hold_it(sandbox: &Sandbox) {
    for _ in 0..20 {
        let out = run(sandbox, sh("echo last; exit 0")).await;
        assert_eq!(out.stdout, b"last\n");
    }
    // A background grandchild keeps running but does not hold the end back
    // (it would for 30 s).
    let began = Instant::now();
    let out = tokio::time::timeout(
        Duration::from_secs(25),
        run(sandbox, sh("(sleep 30 >/dev/null 2>&1 &) ; echo done")),
    )
    .await
    .expect("the background child held the output open");
    assert_eq!(out.stdout, b"done\n");
    eprintln!("background child: ended after {:?}", began.elapsed());
}

async fn stdin_round_trips(sandbox: &Sandbox) {
    let mut cat = sandbox
        .exec(Command::new("cat").stdin(Stdin::Piped))
        .await
        .expect("start");
    cat.write_stdin("hello ").await.expect("write");
    cat.write_stdin("cat\n").await.expect("write");
    let mut echoed = Vec::new();
    while echoed != b"hello cat\n" {
        match cat.next_event().await.expect("event") {
            Some(Event::Stdout(data)) => echoed.extend_from_slice(&data),
            other => panic!("unexpected {other:?}"),
        }
    }
    cat.close_stdin().await.expect("close");
    assert_eq!(cat.wait().await.expect("wait").status, ExitStatus::Code(0));

    // Every byte value, 1000 times, through a stream while the output is read.
    let data: Vec<u8> = (0..256_000u32).map(|i| (i % 256) as u8).collect();
    let cat = sandbox
        .exec(Command::new("cat").stdin(Stdin::Piped))
        .await
        .expect("start");
    let handle = cat.handle();
    let chunks: Vec<airlock::Bytes> = data
        .chunks(10_000)
        .map(airlock::Bytes::copy_from_slice)
        .collect();
    let writer = tokio::spawn(async move {
        handle.stream_stdin(futures::stream::iter(chunks)).await?;
        handle.close_stdin().await
    });
    let out = cat.output().await.expect("output");
    writer.await.expect("join").expect("stdin");
    assert_eq!(out.stdout.len(), data.len());
    assert!(out.stdout == data, "binary stdin changed on the way");
}

async fn detached_processes_survive_and_replay(sandbox: &Sandbox) {
    let execution = sandbox
        .exec(
            sh("echo early; read line; echo \"late $line\"; exit 4")
                .stdin(Stdin::Piped)
                .tag("detached"),
        )
        .await
        .expect("start");
    let pid = execution.pid();
    drop(execution); // the client goes away

    let listed = sandbox.list().await.expect("list");
    let info = listed.iter().find(|p| p.pid == pid).expect("listed");
    assert_eq!(info.tag.as_deref(), Some("detached"));
    assert_eq!(info.state, ProcessState::Running);
    assert_eq!(info.argv[0], "sh");

    // Re-attach by tag: the earlier output first, then live output.
    let mut attached = sandbox.attach("detached").await.expect("attach");
    assert_eq!(attached.pid(), pid);
    assert_eq!(
        attached.next_event().await.expect("event"),
        Some(Event::Stdout("early\n".into()))
    );
    attached.write_stdin("now\n").await.expect("write");
    let out = attached.output().await.expect("output");
    assert_eq!(out.stdout, b"late now\n");
    assert_eq!(out.status, ExitStatus::Code(4));

    // Finished, it is still listed with its exit, and replays its tail.
    let listed = sandbox.list().await.expect("list");
    let info = listed.iter().find(|p| p.pid == pid).expect("still listed");
    assert!(
        matches!(info.state, ProcessState::Exited(exit) if exit.status == ExitStatus::Code(4)),
        "{info:?}"
    );
    let again = sandbox
        .attach(pid)
        .await
        .expect("attach")
        .output()
        .await
        .expect("output");
    assert_eq!(again.stdout, b"early\nlate now\n");
}

async fn many_concurrent_programs(sandbox: &Sandbox) {
    let began = Instant::now();
    let runs = (0..100).map(|i| async move {
        let command = sh("for j in 1 2 3 4 5 6 7 8 9 10; do echo \"$0-$j\"; echo \"$0-err\" >&2; done; exit $(($0 % 7))")
            .arg(i.to_string());
        let out = match sandbox.exec(command).await {
            Ok(execution) => execution.output().await,
            Err(error) => Err(error),
        };
        (i, out)
    });
    let results = futures::future::join_all(runs).await;
    let elapsed = began.elapsed();
    for (i, out) in results {
        let out = out.expect("concurrent exec");
        let want: String = (1..=10).map(|j| format!("{i}-{j}\n")).collect();
        assert_eq!(String::from_utf8_lossy(&out.stdout), want, "run {i}");
        assert_eq!(
            out.stderr,
            format!("{i}-err\n").repeat(10).into_bytes(),
            "run {i}"
        );
        assert_eq!(out.status, ExitStatus::Code(i % 7));
    }
    eprintln!("100 concurrent execs: {elapsed:?}");
}

async fn large_output_to_a_slow_reader(sandbox: &Sandbox) {
    const SIZE: usize = 52_428_800;
    let agent_before = stdout_of(sandbox, "cat /proc/1/status").await;
    let began = Instant::now();
    let mut execution = sandbox
        .exec(sh(&format!(
            "head -c {SIZE} /dev/urandom | tee /tmp/big; sha256sum < /tmp/big >&2; rm /tmp/big"
        )))
        .await
        .expect("start");
    let mut stdout = Vec::with_capacity(SIZE);
    let mut stderr = Vec::new();
    let mut agent_mid = None;
    loop {
        match execution.next_event().await.expect("event") {
            Some(Event::Stdout(data)) => stdout.extend_from_slice(&data),
            Some(Event::Stderr(data)) => stderr.extend_from_slice(&data),
            Some(Event::Exited(exit)) => {
                assert_eq!(exit.status, ExitStatus::Code(0));
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
        // A slow reader: the program must wait for it, losing nothing.
        tokio::time::sleep(Duration::from_millis(2)).await;
        if agent_mid.is_none() && stdout.len() > SIZE / 2 {
            agent_mid = Some(stdout_of(sandbox, "cat /proc/1/status").await);
        }
    }
    let elapsed = began.elapsed();
    assert_eq!(stdout.len(), SIZE);
    let guest_sum = String::from_utf8_lossy(&stderr);
    assert_eq!(
        guest_sum.split_whitespace().next(),
        Some(sha256_hex(&stdout).as_str()),
        "checksums differ: {guest_sum}"
    );

    let agent_after = stdout_of(sandbox, "cat /proc/1/status").await;
    let before = status_kib(&agent_before, "VmRSS");
    let mid = status_kib(&agent_mid.expect("sampled mid-transfer"), "VmRSS");
    let peak = status_kib(&agent_after, "VmHWM");
    eprintln!(
        "50 MiB to a slow reader: {elapsed:?} ({:.1} MiB/s); agent RSS {before} KiB before, {mid} KiB mid-transfer, peak {peak} KiB",
        SIZE as f64 / 1_048_576.0 / elapsed.as_secs_f64()
    );
    assert!(
        mid < before + 16 * 1024,
        "agent RSS grew from {before} to {mid} KiB"
    );
    assert!(peak < 64 * 1024, "agent peak RSS {peak} KiB");
}

async fn out_of_memory_kills_the_program_not_the_agent(sandbox: &Sandbox) {
    // awk keeps 1 MiB strings until the guest (256 MiB, no swap) runs out
    // of memory; the OOM killer picks it.
    let hog = Command::new("awk")
        .arg("BEGIN { s = sprintf(\"%1048576s\", \"\"); while (1) a[n++] = s n }");
    let out = run(sandbox, hog).await;
    eprintln!("out of memory after {:?}", out.duration);
    assert_eq!(out.status, ExitStatus::Signal(9), "{out:?}");
    assert!(out.oom_killed, "{out:?}");
    assert!(out.stdout.is_empty());
    // The agent is still there.
    assert_eq!(stdout_of(sandbox, "echo alive").await, "alive\n");
}
