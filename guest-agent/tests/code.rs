//! The `Code` service without a VM: the real agent on a Unix socket runs
//! the host's `python3` (and bash) as its interpreter driver. Values,
//! JSON, state between cells, errors with tracebacks, deadlines,
//! interrupts, restarts, separate contexts, rich outputs in order with the
//! output around them, bash, and an interpreter that dies.

// A test panics with its reason.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::time::Duration;

use airlock_proto::v1::{
    code_event, CellDone, CellStatus, CodeError, CodeEvent, ContextRequest, CreateContextRequest,
    ListContextsRequest, RunCodeRequest,
};
use common::Agent;
use tonic::{Code, Streaming};

/// Everything a cell produced.
#[derive(Debug, Default)]
struct Cell {
    stdout: String,
    stderr: String,
    results: Vec<HashMap<String, Vec<u8>>>,
    displays: Vec<HashMap<String, Vec<u8>>>,
    errors: Vec<CodeError>,
    /// Event kinds in arrival order ("out", "err", "result", "display",
    /// "error"), runs of one kind as one.
    order: Vec<&'static str>,
    done: CellDone,
}

impl Cell {
    fn saw(&mut self, kind: &'static str) {
        if self.order.last() != Some(&kind) {
            self.order.push(kind);
        }
    }

    fn result_text(&self, mime: &str) -> String {
        let result = self.results.first().expect("no result");
        String::from_utf8(result.get(mime).expect("no such type").clone()).unwrap()
    }

    fn status(&self) -> CellStatus {
        self.done.status()
    }
}

fn bundle(output: airlock_proto::v1::RichOutput) -> HashMap<String, Vec<u8>> {
    output
        .data
        .into_iter()
        .map(|d| (d.mime_type, d.data.to_vec()))
        .collect()
}

async fn collect(mut stream: Streaming<CodeEvent>) -> Cell {
    let mut cell = Cell::default();
    while let Some(event) = stream.message().await.unwrap() {
        assert_eq!(
            cell.done,
            CellDone::default(),
            "event after done: {event:?}"
        );
        match event.event.expect("empty event") {
            code_event::Event::Stdout(data) => {
                cell.stdout.push_str(&String::from_utf8_lossy(&data));
                cell.saw("out");
            }
            code_event::Event::Stderr(data) => {
                cell.stderr.push_str(&String::from_utf8_lossy(&data));
                cell.saw("err");
            }
            code_event::Event::Result(output) => {
                cell.results.push(bundle(output));
                cell.saw("result");
            }
            code_event::Event::Display(output) => {
                cell.displays.push(bundle(output));
                cell.saw("display");
            }
            code_event::Event::Error(error) => {
                cell.errors.push(error);
                cell.saw("error");
            }
            code_event::Event::Done(done) => cell.done = done,
        }
    }
    assert_ne!(
        cell.done,
        CellDone::default(),
        "the stream ended without done"
    );
    cell
}

async fn run_in(agent: &Agent, context: &str, code: &str) -> Cell {
    run_with(agent, context, "", code, 0).await
}

async fn run_with(
    agent: &Agent,
    context: &str,
    language: &str,
    code: &str,
    timeout_ms: u64,
) -> Cell {
    let stream = agent
        .code()
        .run_code(RunCodeRequest {
            context_id: context.into(),
            language: language.into(),
            code: code.into(),
            timeout_ms,
        })
        .await
        .unwrap_or_else(|status| panic!("run {code:?}: {status:?}\n{}", agent.log()))
        .into_inner();
    collect(stream).await
}

async fn create(agent: &Agent, id: &str, language: &str) {
    agent
        .code()
        .create_context(CreateContextRequest {
            id: id.into(),
            language: language.into(),
            ..Default::default()
        })
        .await
        .unwrap_or_else(|status| panic!("create {id}: {status:?}\n{}", agent.log()));
}

#[tokio::test]
async fn values_come_back_as_text_and_json() {
    let agent = Agent::start().await;
    let cell = run_in(&agent, "", "1 + 1").await;
    assert_eq!(cell.status(), CellStatus::Ok, "{cell:?}");
    assert_eq!(cell.result_text("text/plain"), "2");
    assert_eq!(cell.result_text("application/json"), "2");
    assert_eq!(cell.done.execution_count, 1);

    let cell = run_in(&agent, "", "{'a': [1, 2.5], 'b': None, 'c': 'x'}").await;
    let json: serde_json::Value =
        serde_json::from_str(&cell.result_text("application/json")).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"a": [1, 2.5], "b": null, "c": "x"})
    );
    assert_eq!(
        cell.result_text("text/plain"),
        "{'a': [1, 2.5], 'b': None, 'c': 'x'}"
    );

    // Not JSON-able: repr only. No value: no result.
    let cell = run_in(&agent, "", "{1: float('nan')}").await;
    assert!(
        !cell.results[0].contains_key("application/json"),
        "{cell:?}"
    );
    let cell = run_in(&agent, "", "x = 1").await;
    assert!(cell.results.is_empty(), "{cell:?}");
    let cell = run_in(&agent, "", "None").await;
    assert!(cell.results.is_empty(), "{cell:?}");
}

#[tokio::test]
async fn variables_persist_between_cells() {
    let agent = Agent::start().await;
    run_in(&agent, "", "x = 41\nimport math").await;
    let cell = run_in(&agent, "", "x + 1").await;
    assert_eq!(cell.result_text("text/plain"), "42");
    let cell = run_in(&agent, "", "math.floor(2.5), _").await;
    assert_eq!(cell.result_text("text/plain"), "(2, 42)");
    assert_eq!(cell.done.execution_count, 3);
}

#[tokio::test]
async fn an_exception_gives_its_name_value_and_the_line() {
    let agent = Agent::start().await;
    let cell = run_in(&agent, "", "def f():\n    return 1 / 0\n\nf()").await;
    assert_eq!(cell.status(), CellStatus::Error);
    let error = &cell.errors[0];
    assert_eq!(error.name, "ZeroDivisionError");
    assert_eq!(error.value, "division by zero");
    let traceback = error.traceback.concat();
    assert!(
        traceback.starts_with("Traceback (most recent call last):"),
        "{traceback}"
    );
    assert!(
        traceback.contains("File \"<cell-1>\", line 4, in <module>"),
        "{traceback}"
    );
    assert!(
        traceback.contains("File \"<cell-1>\", line 2, in f"),
        "{traceback}"
    );
    assert!(traceback.contains("return 1 / 0"), "{traceback}");
    assert!(!traceback.contains("driver"), "{traceback}");

    let cell = run_in(&agent, "", "x = (").await;
    assert_eq!(cell.errors[0].name, "SyntaxError");
    assert!(
        cell.errors[0].traceback.concat().contains("<cell-2>"),
        "{cell:?}"
    );
    // sys.exit is an error, not the end of the context.
    let cell = run_in(&agent, "", "import sys; sys.exit(3)").await;
    assert_eq!(cell.errors[0].name, "SystemExit");
    assert_eq!(
        run_in(&agent, "", "40 + 2").await.result_text("text/plain"),
        "42"
    );
}

#[tokio::test]
async fn a_deadline_interrupts_and_the_context_still_answers() {
    let agent = Agent::start().await;
    run_in(&agent, "", "kept = 'yes'").await;
    let cell = run_with(&agent, "", "", "while True: pass", 1000).await;
    assert_eq!(cell.status(), CellStatus::Interrupted, "{cell:?}");
    assert!(cell.done.timed_out);
    assert!(!cell.done.context_restarted);
    assert_eq!(cell.errors[0].name, "KeyboardInterrupt");
    assert_eq!(
        run_in(&agent, "", "kept").await.result_text("text/plain"),
        "'yes'"
    );
}

#[tokio::test]
async fn a_cell_that_ignores_interrupts_is_killed_after_its_deadline() {
    let agent = Agent::start().await;
    run_in(&agent, "", "kept = 1").await;
    let code = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: time.sleep(0.1)";
    let cell = run_with(&agent, "", "", code, 500).await;
    assert_eq!(cell.status(), CellStatus::Interrupted, "{cell:?}");
    assert!(
        cell.done.timed_out && cell.done.context_restarted,
        "{cell:?}"
    );
    assert_eq!(cell.errors[0].name, "InterpreterDied");
    // A fresh interpreter answers; the old variables are gone.
    let cell = run_in(&agent, "", "'kept' in globals()").await;
    assert_eq!(cell.result_text("text/plain"), "False");
    assert!(!cell.done.context_restarted);
}

#[tokio::test]
async fn interrupt_keeps_variables_and_restart_clears_them() {
    let agent = Agent::start().await;
    create(&agent, "work", "python").await;
    run_in(&agent, "work", "y = 7").await;
    let stream = agent
        .code()
        .run_code(RunCodeRequest {
            context_id: "work".into(),
            code: "import time\nprint('looping', flush=True)\nwhile True: time.sleep(0.05)".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let running = tokio::spawn(collect(stream));
    // Busy once the cell runs.
    loop {
        let info = agent
            .code()
            .list_contexts(ListContextsRequest {})
            .await
            .unwrap()
            .into_inner();
        if info.contexts.iter().any(|c| c.id == "work" && c.busy) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    agent
        .code()
        .interrupt_context(ContextRequest { id: "work".into() })
        .await
        .unwrap();
    let cell = running.await.unwrap();
    assert_eq!(cell.status(), CellStatus::Interrupted, "{cell:?}");
    assert_eq!(cell.errors[0].name, "KeyboardInterrupt");
    assert_eq!(
        run_in(&agent, "work", "y").await.result_text("text/plain"),
        "7"
    );

    let info = agent
        .code()
        .restart_context(ContextRequest { id: "work".into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.execution_count, 0);
    let cell = run_in(&agent, "work", "y").await;
    assert_eq!(cell.errors[0].name, "NameError", "{cell:?}");
    assert_eq!(cell.done.execution_count, 1);
}

#[tokio::test]
async fn contexts_do_not_see_each_others_variables() {
    let agent = Agent::start().await;
    create(&agent, "a", "python").await;
    create(&agent, "b", "").await;
    run_in(&agent, "a", "v = 'a'").await;
    run_in(&agent, "b", "v = 'b'").await;
    assert_eq!(
        run_in(&agent, "a", "v").await.result_text("text/plain"),
        "'a'"
    );
    assert_eq!(
        run_in(&agent, "b", "v").await.result_text("text/plain"),
        "'b'"
    );
    let cell = run_in(&agent, "", "v").await;
    assert_eq!(
        cell.errors[0].name, "NameError",
        "the default context is a third"
    );

    let ids: Vec<String> = agent
        .code()
        .list_contexts(ListContextsRequest {})
        .await
        .unwrap()
        .into_inner()
        .contexts
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(ids, ["a", "b", "python"]);
    agent
        .code()
        .delete_context(ContextRequest { id: "a".into() })
        .await
        .unwrap();
    let status = agent
        .code()
        .run_code(RunCodeRequest {
            context_id: "a".into(),
            code: "v".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
}

#[tokio::test]
async fn rich_outputs_arrive_in_order_with_the_output_around_them() {
    let agent = Agent::start().await;
    let code = r#"
import subprocess, sys
class Page:
    def _repr_html_(self):
        return "<b>bold</b>"
    def _repr_markdown_(self):
        return "**bold**"
print("before")
display(Page())
print("oops", file=sys.stderr)
subprocess.run(["echo", "from a child"])
Page()
"#;
    let cell = run_in(&agent, "", code).await;
    assert_eq!(cell.status(), CellStatus::Ok, "{cell:?}");
    assert_eq!(cell.stdout, "before\nfrom a child\n");
    assert_eq!(cell.stderr, "oops\n");
    // Two pipes have no order between them; each has its own with the
    // rich outputs.
    let order: Vec<_> = cell.order.iter().filter(|kind| **kind != "err").collect();
    assert_eq!(order, [&"out", &"display", &"out", &"result"]);
    let display = &cell.displays[0];
    assert_eq!(display["text/html"], b"<b>bold</b>");
    assert_eq!(display["text/markdown"], b"**bold**");
    assert!(String::from_utf8_lossy(&display["text/plain"]).contains("Page object"));
    assert_eq!(cell.results[0]["text/html"], b"<b>bold</b>");

    // An image's bytes arrive decoded, not as base64.
    let code = "class Png:\n    def _repr_png_(self):\n        return b'\\x89PNG\\r\\n\\x1a\\nrest'\nPng()";
    let cell = run_in(&agent, "", code).await;
    assert_eq!(cell.results[0]["image/png"], b"\x89PNG\r\n\x1a\nrest");

    // Too big for one output: the text is cut and says so.
    let cell = run_in(&agent, "", "'x' * (3 << 20)").await;
    let text = cell.result_text("text/plain");
    assert!(text.len() < 2 << 20, "{}", text.len());
    assert!(text.contains("more bytes of text/plain"));
}

#[tokio::test]
async fn output_streams_while_the_cell_runs() {
    let agent = Agent::start().await;
    let mut stream = agent
        .code()
        .run_code(RunCodeRequest {
            code: "import time\nprint('first', flush=True)\ntime.sleep(1)\nprint('second')".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().unwrap();
    assert_eq!(
        first.event,
        Some(code_event::Event::Stdout("first\n".into())),
        "one line, one event"
    );
    // The cell is still running when its first output arrives.
    let contexts = agent
        .code()
        .list_contexts(ListContextsRequest {})
        .await
        .unwrap()
        .into_inner()
        .contexts;
    assert!(contexts[0].busy, "{contexts:?}");
    let rest = collect(stream).await;
    assert_eq!(rest.stdout, "second\n");
}

#[tokio::test]
async fn a_client_that_goes_away_interrupts_its_cell() {
    let agent = Agent::start().await;
    run_in(&agent, "", "z = 3").await;
    let mut stream = agent
        .code()
        .run_code(RunCodeRequest {
            code: "print('go', flush=True)\nwhile True: pass".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    stream.message().await.unwrap().unwrap();
    drop(stream);
    // The next cell waits for the interrupted one, then runs with z kept.
    let cell = run_in(&agent, "", "z").await;
    assert_eq!(cell.result_text("text/plain"), "3");
}

#[tokio::test]
async fn an_interpreter_that_dies_is_replaced() {
    let agent = Agent::start().await;
    run_in(&agent, "", "gone = 1").await;
    let cell = run_in(
        &agent,
        "",
        "import os\nprint('bye', flush=True)\nos._exit(3)",
    )
    .await;
    assert_eq!(cell.stdout, "bye\n");
    assert_eq!(cell.status(), CellStatus::Error);
    assert!(cell.done.context_restarted);
    assert_eq!(cell.errors[0].name, "InterpreterDied");
    assert!(cell.errors[0].value.contains("exit status 3"), "{cell:?}");
    let cell = run_in(&agent, "", "'gone' in globals()").await;
    assert_eq!(cell.result_text("text/plain"), "False");
}

#[tokio::test]
async fn bash_keeps_its_directory_and_variables() {
    let agent = Agent::start().await;
    let cell = run_with(&agent, "", "bash", "cd /tmp\nexport X=5\nY=6\necho hi", 0).await;
    assert_eq!(cell.status(), CellStatus::Ok, "{cell:?}");
    assert_eq!(cell.stdout, "hi\n");
    let cell = run_with(
        &agent,
        "",
        "bash",
        "echo \"$PWD $X $Y\"; sh -c 'echo $X'",
        0,
    )
    .await;
    assert_eq!(cell.stdout, "/tmp 5 6\n5\n");

    let cell = run_with(&agent, "", "bash", "echo out; ls /nonexistent-dir", 0).await;
    assert_eq!(cell.status(), CellStatus::Error);
    assert_eq!(cell.errors[0].name, "ExitStatus");
    assert_eq!(cell.errors[0].value, "2");
    assert!(cell.stderr.contains("nonexistent-dir"), "{cell:?}");

    let cell = run_with(&agent, "", "bash", "sleep 100", 500).await;
    assert_eq!(cell.status(), CellStatus::Interrupted, "{cell:?}");
    assert!(!cell.done.context_restarted);
    let cell = run_with(&agent, "", "bash", "echo $Y", 0).await;
    assert_eq!(cell.stdout, "6\n");

    // `exit` ends the shell; the next cell gets a fresh one.
    let cell = run_with(&agent, "", "bash", "exit 4", 0).await;
    assert_eq!(cell.errors[0].value, "4");
    assert!(cell.done.context_restarted);
    let cell = run_with(&agent, "", "bash", "echo \"[$Y]\"", 0).await;
    assert_eq!(cell.stdout, "[]\n");
    assert!(!cell.done.context_restarted);
}

#[tokio::test]
async fn bad_requests_are_refused_with_precise_codes() {
    let agent = Agent::start().await;
    let status = agent
        .code()
        .create_context(CreateContextRequest {
            language: "cobol".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    create(&agent, "dup", "").await;
    let status = agent
        .code()
        .create_context(CreateContextRequest {
            id: "dup".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::AlreadyExists);
    let status = agent
        .code()
        .create_context(CreateContextRequest {
            cwd: "/nonexistent".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
    let status = agent
        .code()
        .run_code(RunCodeRequest {
            context_id: "dup".into(),
            language: "bash".into(),
            code: "true".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    let status = agent
        .code()
        .interrupt_context(ContextRequest { id: "nope".into() })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
}

#[tokio::test]
async fn an_interrupt_during_a_display_leaves_the_wire_intact() {
    let agent = Agent::start().await;
    for round in 0..5 {
        let mut stream = agent
            .code()
            .run_code(RunCodeRequest {
                code: "i = 0\nwhile True:\n    i += 1\n    display({'n': i, 'pad': 'x' * 600_000})"
                    .into(),
                // A broken wire would hang the cell: the deadline (then the
                // kill) turns that into a failure.
                timeout_ms: 60_000,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        // Let displays pile up behind a client that does not read, then
        // interrupt while the driver is most likely blocked sending one.
        stream.message().await.unwrap().unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        agent
            .code()
            .interrupt_context(ContextRequest {
                id: "python".into(),
            })
            .await
            .unwrap();
        let cell = collect(stream).await;
        assert_eq!(
            cell.status(),
            CellStatus::Interrupted,
            "round {round}: {:?}",
            cell.done
        );
        assert!(
            !cell.done.context_restarted,
            "round {round}: the wire broke"
        );
        assert_eq!(cell.errors[0].name, "KeyboardInterrupt");
        let next = run_in(&agent, "", "i > 0").await;
        assert_eq!(next.result_text("text/plain"), "True");
    }
}
