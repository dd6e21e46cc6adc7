//! Detached processes: a program outlives its client; List shows it;
//! Connect replays what it wrote meanwhile (with a marker when the replay
//! buffer overflowed) and then follows it live.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use airlock_proto::v1::exited::Status as ExitStatus;
use airlock_proto::v1::{
    process_event, ConnectRequest, ListRequest, ProcessInfo, ProcessState, SendInputRequest,
    StartRequest,
};
use common::{by_pid, by_tag, collect, collect_after_started, piped, request, started_pid, Agent};
use tonic::Code;

fn tagged(mut req: StartRequest, tag: &str) -> StartRequest {
    req.tag = tag.into();
    req
}

async fn list(agent: &Agent) -> Vec<ProcessInfo> {
    agent
        .process()
        .list(ListRequest {})
        .await
        .unwrap()
        .into_inner()
        .processes
}

async fn find(agent: &Agent, pid: u32) -> ProcessInfo {
    list(agent)
        .await
        .into_iter()
        .find(|p| p.pid == pid)
        .unwrap_or_else(|| panic!("pid {pid} not listed"))
}

/// Waits until `pid` is listed as exited.
async fn wait_exited(agent: &Agent, pid: u32) -> ProcessInfo {
    for _ in 0..1000 {
        let info = find(agent, pid).await;
        if info.state == ProcessState::Exited as i32 {
            return info;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("pid {pid} did not exit");
}

#[tokio::test]
async fn a_detached_process_is_listed_replayed_and_followed() {
    let agent = Agent::start().await;
    // Writes a line, then echoes each stdin line, so the test controls
    // when it writes more.
    let req = tagged(
        piped(&[
            "sh",
            "-c",
            "echo one; echo two >&2; while read l; do echo \"$l\"; done; exit 3",
        ]),
        "echoer",
    );
    let mut stream = agent.process().start(req).await.unwrap().into_inner();
    let pid = started_pid(&mut stream).await;
    drop(stream); // the client goes away; the program runs on

    let info = find(&agent, pid).await;
    assert_eq!(info.tag, "echoer");
    assert_eq!(info.argv[0], "sh");
    assert_eq!(info.state, ProcessState::Running as i32);

    // Written while nobody was attached.
    agent
        .process()
        .send_input(SendInputRequest {
            process: by_tag("echoer"),
            data: b"three\n".to_vec().into(),
        })
        .await
        .unwrap();
    let mut listed = find(&agent, pid).await;
    for _ in 0..500 {
        if listed.output_bytes >= 14 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        listed = find(&agent, pid).await;
    }
    assert!(!listed.attached);
    assert_eq!(listed.output_bytes, 14, "one\\n two\\n three\\n read");
    assert_eq!(listed.held_from, 0, "and all of it held");

    // Connect by tag: the replay, in order, then live output.
    let mut stream = agent
        .process()
        .connect(ConnectRequest {
            process: by_tag("echoer"),
            from_offset: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(started_pid(&mut stream).await, pid);
    // Within a stream in order; stdout and stderr are separate pipes. How
    // the bytes are cut into chunks depends on when the agent read them
    // (a busy host can read "one\nthree\n" at once), so compare bytes.
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let replay = async {
        while out.len() + err.len() < 14 {
            match stream.message().await.unwrap().unwrap().event.unwrap() {
                process_event::Event::Stdout(b) => out.extend_from_slice(&b),
                process_event::Event::Stderr(b) => err.extend_from_slice(&b),
                other => panic!("unexpected {other:?}"),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), replay)
        .await
        .expect("the replay delivers all 14 bytes");
    assert_eq!(String::from_utf8_lossy(&out), "one\nthree\n");
    assert_eq!(String::from_utf8_lossy(&err), "two\n");
    assert!(find(&agent, pid).await.attached);

    agent
        .process()
        .send_input(SendInputRequest {
            process: by_pid(pid),
            data: b"four\n".to_vec().into(),
        })
        .await
        .unwrap();
    agent
        .process()
        .close_stdin(airlock_proto::v1::CloseStdinRequest {
            process: by_pid(pid),
        })
        .await
        .unwrap();
    let rest = collect_after_started(stream).await;
    assert_eq!(rest.stdout_text(), "four\n");
    assert_eq!(rest.exit, ExitStatus::Code(3));

    let info = wait_exited(&agent, pid).await;
    let exit = info.exit.unwrap();
    assert_eq!(exit.status, Some(ExitStatus::Code(3)));
    assert!(exit.duration_us > 0);
}

#[tokio::test]
async fn a_finished_process_keeps_its_output_tail_and_exit() {
    let agent = Agent::start().await;
    let mut stream = agent
        .process()
        .start(tagged(
            request(&["sh", "-c", "sleep 0.2; echo bye; exit 5"]),
            "quick",
        ))
        .await
        .unwrap()
        .into_inner();
    let pid = started_pid(&mut stream).await;
    drop(stream);
    let info = wait_exited(&agent, pid).await;
    assert_eq!(info.exit.unwrap().status, Some(ExitStatus::Code(5)));

    let stream = agent
        .process()
        .connect(ConnectRequest {
            process: by_pid(pid),
            from_offset: 0,
        })
        .await
        .unwrap()
        .into_inner();
    let out = collect(stream).await.unwrap();
    assert_eq!(out.pid, pid);
    assert_eq!(out.stdout_text(), "bye\n");
    assert_eq!(out.exit, ExitStatus::Code(5));
    assert_eq!(out.dropped, 0);

    // Another look replays the tail again, or from an offset, or nothing.
    for (from, want) in [(0, "bye\n"), (2, "e\n"), (4, ""), (1000, "")] {
        let stream = agent
            .process()
            .connect(ConnectRequest {
                process: by_tag("quick"),
                from_offset: from,
            })
            .await
            .unwrap()
            .into_inner();
        let out = collect(stream).await.unwrap();
        assert_eq!(out.stdout_text(), want, "from {from}");
        assert_eq!(out.exit, ExitStatus::Code(5));
    }
}

#[tokio::test]
async fn overflow_while_detached_is_marked_and_the_newest_output_kept() {
    let agent = Agent::start().await;
    let done = agent.dir().join("written");
    // About 2.7 MiB of numbered lines while detached, then wait for stdin.
    let script = format!("seq 1 400000; echo marker; : > {}; read x", done.display());
    let mut stream = agent
        .process()
        .start(piped(&["sh", "-c", &script]))
        .await
        .unwrap()
        .into_inner();
    let pid = started_pid(&mut stream).await;
    drop(stream);
    let full: Vec<u8> = (1..=400_000)
        .map(|i| format!("{i}\n"))
        .chain(std::iter::once("marker\n".to_owned()))
        .collect::<String>()
        .into_bytes();
    while !done.exists() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stream = agent
        .process()
        .connect(ConnectRequest {
            process: by_pid(pid),
            from_offset: 0,
        })
        .await
        .unwrap()
        .into_inner();
    agent
        .process()
        .close_stdin(airlock_proto::v1::CloseStdinRequest {
            process: by_pid(pid),
        })
        .await
        .unwrap();
    let out = collect(stream).await.unwrap();
    // Whatever was not dropped arrives: the replay, then the live rest.
    assert!(out.dropped > 0, "the replay buffer overflowed");
    assert!(
        out.stdout.len() >= 1024 * 1024,
        "{} bytes kept",
        out.stdout.len()
    );
    assert_eq!(out.dropped as usize + out.stdout.len(), full.len());
    assert!(full.ends_with(&out.stdout), "the kept bytes are the newest");
    let info = find(&agent, pid).await;
    assert_eq!(info.output_bytes as usize, full.len());
    assert_eq!(info.held_from, out.dropped);
}

#[tokio::test]
async fn a_new_client_takes_over_from_the_old_one() {
    let agent = Agent::start().await;
    let req = tagged(piped(&["cat"]), "shared");
    let mut first = agent.process().start(req).await.unwrap().into_inner();
    let pid = started_pid(&mut first).await;
    let mut second = agent
        .process()
        .connect(ConnectRequest {
            process: by_tag("shared"),
            from_offset: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(started_pid(&mut second).await, pid);
    let err = first.message().await.unwrap_err();
    assert_eq!(err.code(), Code::Aborted, "{err:?}");
    assert!(
        err.message().contains("another client"),
        "{}",
        err.message()
    );

    agent
        .process()
        .send_input(SendInputRequest {
            process: by_pid(pid),
            data: b"to the second\n".to_vec().into(),
        })
        .await
        .unwrap();
    agent
        .process()
        .close_stdin(airlock_proto::v1::CloseStdinRequest {
            process: by_pid(pid),
        })
        .await
        .unwrap();
    let out = collect_after_started(second).await;
    assert_eq!(out.stdout_text(), "to the second\n");
}

#[tokio::test]
async fn tags_are_unique_while_running_and_lookups_fail_clearly() {
    let agent = Agent::start().await;
    let mut stream = agent
        .process()
        .start(tagged(piped(&["cat"]), "only-one"))
        .await
        .unwrap()
        .into_inner();
    let pid = started_pid(&mut stream).await;
    let err = agent
        .process()
        .start(tagged(request(&["true"]), "only-one"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists, "{err:?}");

    let err = agent
        .process()
        .connect(ConnectRequest {
            process: by_tag("nobody-has-this"),
            from_offset: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    assert!(
        err.message().contains("nobody-has-this"),
        "{}",
        err.message()
    );
    let err = agent
        .process()
        .connect(ConnectRequest {
            process: None,
            from_offset: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");

    let err = agent
        .process()
        .start(tagged(request(&["true"]), "bad\ntag"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");

    // Once it finished, the tag can be used again.
    agent
        .process()
        .close_stdin(airlock_proto::v1::CloseStdinRequest {
            process: by_pid(pid),
        })
        .await
        .unwrap();
    collect_after_started(stream).await;
    wait_exited(&agent, pid).await;
    let out = agent
        .run(tagged(request(&["echo", "again"]), "only-one"))
        .await
        .unwrap();
    assert_eq!(out.stdout_text(), "again\n");
}

#[tokio::test]
async fn a_transient_process_delivers_its_output_then_is_forgotten() {
    let agent = Agent::start().await;
    let kept = agent.run_argv(&["sh", "-c", "echo kept"]).await.unwrap();
    let mut req = request(&["sh", "-c", "echo gone; exit 3"]);
    req.transient = true;
    req.tag = "warm".into();
    let outcome = agent.run(req).await.unwrap();
    assert_eq!(outcome.stdout_text(), "gone\n");
    assert_eq!(outcome.exit, ExitStatus::Code(3));

    // Its end was recorded before the stream ended; it is forgotten then.
    let listed: Vec<u32> = list(&agent).await.iter().map(|p| p.pid).collect();
    assert_eq!(
        listed,
        vec![kept.pid],
        "only the ordinary program is listed"
    );
    for selector in [by_pid(outcome.pid), by_tag("warm")] {
        let status = agent
            .process()
            .connect(ConnectRequest {
                process: selector,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::NotFound, "{status:?}");
    }
}
