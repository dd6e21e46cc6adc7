//! Programs on a pseudo-terminal (`StartRequest.pty`, `Resize`): an
//! interactive shell is typed at like a user would, its screen read back,
//! its window resized, a running job interrupted with ^C, and its exit
//! reported like any program's; a terminal session survives a detach.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use airlock_proto::v1::exited::Status as ExitStatus;
use airlock_proto::v1::{
    process_event, CloseStdinRequest, ConnectRequest, ProcessEvent, ProcessSelector, Pty,
    ResizeRequest, SendInputRequest, SendSignalRequest, StartRequest,
};
use common::{by_pid, by_tag, collect_after_started, proc_state, request, started_pid, Agent};
use tonic::{Code, Streaming};

/// How long a screen may take to show what a test waits for.
const PATIENCE: Duration = Duration::from_secs(20);

/// `argv` on a terminal of `rows` x `cols`.
fn on_pty(argv: &[&str], rows: u32, cols: u32) -> StartRequest {
    StartRequest {
        pty: Some(Pty {
            rows,
            cols,
            term: String::new(),
        }),
        ..request(argv)
    }
}

/// An interactive `sh` with a recognisable prompt.
fn shell() -> StartRequest {
    let mut req = on_pty(&["sh", "-i"], 0, 0);
    req.env.insert("PS1".into(), "pty-test$ ".into());
    // No user startup file may change what the test sees.
    req.env.insert("ENV".into(), "/dev/null".into());
    req
}

/// A terminal session as a user sees it: what has appeared on the screen,
/// and what was typed.
struct Session<'a> {
    agent: &'a Agent,
    selector: Option<ProcessSelector>,
    pid: u32,
    events: Streaming<ProcessEvent>,
    screen: Vec<u8>,
    /// Where the next `expect` starts looking.
    seen: usize,
}

impl<'a> Session<'a> {
    async fn start(agent: &'a Agent, req: StartRequest) -> Session<'a> {
        let mut events = agent.process().start(req).await.unwrap().into_inner();
        let pid = started_pid(&mut events).await;
        Session {
            agent,
            selector: by_pid(pid),
            pid,
            events,
            screen: Vec::new(),
            seen: 0,
        }
    }

    async fn type_in(&self, keys: &str) {
        self.agent
            .process()
            .send_input(SendInputRequest {
                process: self.selector.clone(),
                data: keys.as_bytes().to_vec().into(),
            })
            .await
            .unwrap();
    }

    /// Reads the screen until `text` appears after what earlier calls
    /// matched; fails showing the screen if it does not.
    async fn expect(&mut self, text: &str) {
        let read = async {
            loop {
                if let Some(at) = find(&self.screen[self.seen..], text.as_bytes()) {
                    self.seen += at + text.len();
                    return;
                }
                let event = self.events.message().await.unwrap();
                match event.and_then(|e| e.event) {
                    Some(process_event::Event::Stdout(data)) => {
                        self.screen.extend_from_slice(&data)
                    }
                    Some(process_event::Event::Stderr(data)) => {
                        panic!("a terminal's output came as stderr: {data:?}")
                    }
                    other => panic!("waiting for {text:?}, got {other:?}"),
                }
            }
        };
        if tokio::time::timeout(PATIENCE, read).await.is_err() {
            panic!(
                "{text:?} did not appear; screen:\n{}",
                String::from_utf8_lossy(&self.screen)
            );
        }
    }

    async fn resize(&self, rows: u32, cols: u32) -> Result<(), tonic::Status> {
        self.agent
            .process()
            .resize(ResizeRequest {
                process: self.selector.clone(),
                rows,
                cols,
            })
            .await
            .map(|_| ())
    }

    /// The exit, after the rest of the screen.
    async fn exit(self) -> (ExitStatus, String) {
        let rest = tokio::time::timeout(PATIENCE, collect_after_started(self.events))
            .await
            .expect("the program did not exit");
        let mut screen = self.screen;
        screen.extend_from_slice(&rest.stdout);
        assert!(rest.stderr.is_empty(), "stderr on a terminal");
        (rest.exit, String::from_utf8_lossy(&screen).into_owned())
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Waits for a child of `parent` running `comm`; returns its pid.
async fn child_named(parent: u32, comm: &str) -> u32 {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let found = std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .find(|&pid| {
                let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
                name.trim() == comm
                    && proc_state(pid).is_some_and(|(state, ppid)| ppid == parent && state != 'Z')
            });
        if let Some(pid) = found {
            return pid;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {comm} child of {parent}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn an_interactive_shell_is_typed_at_resized_interrupted_and_exits() {
    let agent = Agent::start().await;
    let mut sh = Session::start(&agent, shell()).await;
    sh.expect("pty-test$ ").await;

    // A command's output, and the terminal the shell is on.
    sh.type_in("echo hello $((6 * 7)) $TERM\n").await;
    sh.expect("hello 42 xterm-256color").await;
    sh.expect("pty-test$ ").await;
    sh.type_in("stty size\n").await;
    sh.expect("24 80").await;

    // A resize reaches the terminal (0 means the default, as at start).
    sh.resize(50, 132).await.unwrap();
    sh.type_in("stty size\n").await;
    sh.expect("50 132").await;
    sh.resize(0, 0).await.unwrap();
    sh.type_in("stty size\n").await;
    sh.expect("24 80").await;

    // ^C typed at a running job interrupts the job, not the shell.
    sh.type_in("sleep 1000\n").await;
    let sleep = child_named(sh.pid, "sleep").await;
    sh.type_in("\x03").await;
    common::assert_gone(sleep).await;
    sh.type_in("echo status=$?\n").await;
    sh.expect("status=130").await;

    // Exiting ends the session with the shell's status; what it printed
    // last is on the screen before the exit arrives.
    sh.type_in("echo goodbye; exit 3\n").await;
    let (exit, screen) = sh.exit().await;
    assert_eq!(exit, ExitStatus::Code(3));
    assert!(screen.contains("\ngoodbye"), "{screen}");
}

#[tokio::test]
async fn output_written_just_before_exit_is_never_lost() {
    let agent = Agent::start().await;
    for _ in 0..20 {
        let mut events = agent
            .process()
            .start(on_pty(
                &[
                    "sh",
                    "-c",
                    "i=0; while [ $i -lt 300 ]; do echo line$i; i=$((i+1)); done; exit 7",
                ],
                0,
                0,
            ))
            .await
            .unwrap()
            .into_inner();
        started_pid(&mut events).await;
        let out = collect_after_started(events).await;
        assert_eq!(out.exit, ExitStatus::Code(7));
        let text = out.stdout_text();
        // The terminal turns "\n" into "\r\n", as on a real one.
        assert!(text.ends_with("line299\r\n"), "{text}");
        assert_eq!(text.matches("\r\n").count(), 300);
    }
}

#[tokio::test]
async fn signals_from_the_rpc_reach_a_terminal_session() {
    let agent = Agent::start().await;
    let mut events = agent
        .process()
        .start(on_pty(&["sleep", "1000"], 0, 0))
        .await
        .unwrap()
        .into_inner();
    let pid = started_pid(&mut events).await;
    agent
        .process()
        .send_signal(SendSignalRequest {
            process: by_pid(pid),
            signal: 2,
            leader_only: false,
        })
        .await
        .unwrap();
    let out = tokio::time::timeout(PATIENCE, collect_after_started(events))
        .await
        .unwrap();
    assert_eq!(out.exit, ExitStatus::Signal(2));
}

#[tokio::test]
async fn a_detached_session_replays_its_screen_and_takes_input_again() {
    let agent = Agent::start().await;
    let mut req = shell();
    req.tag = "console".into();
    let mut sh = Session::start(&agent, req).await;
    sh.type_in("echo before-$((1 + 1))\n").await;
    sh.expect("before-2").await;
    sh.expect("pty-test$ ").await;
    // The client goes away; the shell runs on and its screen is kept.
    let pid = sh.pid;
    drop(sh);
    tokio::time::sleep(Duration::from_millis(100)).await;

    let mut events = agent
        .process()
        .connect(ConnectRequest {
            process: by_tag("console"),
            from_offset: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(started_pid(&mut events).await, pid);
    let mut again = Session {
        agent: &agent,
        selector: by_tag("console"),
        pid,
        events,
        screen: Vec::new(),
        seen: 0,
    };
    again.expect("before-2").await;
    again.resize(33, 99).await.unwrap();
    again.type_in("stty size; exit\n").await;
    again.expect("33 99").await;
    let (exit, _) = again.exit().await;
    assert_eq!(exit, ExitStatus::Code(0));
}

#[tokio::test]
async fn misuse_gets_precise_codes() {
    let agent = Agent::start().await;

    // Resize needs a terminal; CloseStdin cannot close one.
    let mut events = agent
        .process()
        .start(request(&["sleep", "1000"]))
        .await
        .unwrap()
        .into_inner();
    let plain = started_pid(&mut events).await;
    let err = agent
        .process()
        .resize(ResizeRequest {
            process: by_pid(plain),
            rows: 10,
            cols: 10,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("no terminal"), "{}", err.message());

    let mut events = agent
        .process()
        .start(on_pty(&["sleep", "1000"], 0, 0))
        .await
        .unwrap()
        .into_inner();
    let pty = started_pid(&mut events).await;
    let err = agent
        .process()
        .close_stdin(CloseStdinRequest {
            process: by_pid(pty),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    let err = agent
        .process()
        .resize(ResizeRequest {
            process: by_pid(pty),
            rows: 100_000,
            cols: 80,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");

    // Too big a terminal is refused at start too.
    let err = agent
        .process()
        .start(on_pty(&["true"], 1, 1 << 20))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");

    // After the exit there is no terminal left to resize.
    for pid in [plain, pty] {
        agent
            .process()
            .send_signal(SendSignalRequest {
                process: by_pid(pid),
                signal: 9,
                leader_only: false,
            })
            .await
            .unwrap();
    }
    let out = collect_after_started(events).await;
    assert_eq!(out.exit, ExitStatus::Signal(9));
    let err = agent
        .process()
        .resize(ResizeRequest {
            process: by_pid(pty),
            rows: 10,
            cols: 10,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
}
