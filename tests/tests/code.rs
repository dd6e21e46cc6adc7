//! Running code and tracking what it changed, in one VM booted from the
//! default image (Python 3.11, bash): `1 + 1` is `2`, a dict comes back as
//! JSON, variables persist between cells, an exception names its line, a
//! deadline stops a busy loop and the context still answers, interrupt
//! keeps variables, restart clears them, contexts are separate, output
//! streams while a cell runs, bash keeps its directory; and the changes a
//! program or a cell makes under /root and /tmp are listed exactly and
//! downloaded in one call. Each check is a named test
//! (`cargo test -p airlock-tests --test code -- NAME`).

// A test panics with its reason; that is what expect is for here.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::ExitCode;
use std::time::Duration;

use airlock::fs::{ChangeKind, Changes, FileKind};
use airlock::{Cell, CellEvent, CellOutput, CellStatus, ContextOptions, Language, Sandbox};
use airlock_tests::shared_vm::{Order, Suite};
use airlock_tests::{run, sh};
use serde_json::json;

fn main() -> ExitCode {
    // One at a time: the deadline checks and the change lists must not see
    // another check's cells or files.
    Suite::new(boot, Order::Sequential)
        .checks(airlock_tests::checks![
            one_plus_one_gives_two,
            a_dict_gives_json,
            variables_persist_between_calls,
            an_exception_gives_its_name_value_and_line,
            a_deadline_stops_a_busy_loop_and_the_context_still_answers,
            interrupt_keeps_the_variables,
            restart_clears_the_variables,
            two_contexts_do_not_see_each_others_variables,
            output_streams_while_the_cell_runs,
            bash_keeps_its_directory_and_variables,
            a_programs_changes_are_listed_exactly_and_downloaded,
            a_cells_changes_are_listed_too,
        ])
        .run()
}

async fn boot() -> Sandbox {
    let sandbox = airlock_tests::builder()
        .image(airlock_tests::default_image())
        .memory_mib(512)
        .start()
        .await
        .expect("sandbox did not start");
    let health = sandbox.health().await.expect("health");
    assert!(
        health.protocol_revision >= 7,
        "the agent speaks revision {}: rebuild the initramfs with scripts/setup",
        health.protocol_revision
    );
    sandbox
}

async fn cell(sandbox: &Sandbox, cell: impl Into<Cell>) -> CellOutput {
    let cell = cell.into();
    let execution = match sandbox.run_code(cell.clone()).await {
        Ok(execution) => execution,
        Err(error) => panic!("run {cell:?}: {error}"),
    };
    match execution.output().await {
        Ok(output) => output,
        Err(error) => panic!("output of {cell:?}: {error}"),
    }
}

async fn in_context(sandbox: &Sandbox, context: &str, code: &str) -> CellOutput {
    cell(sandbox, Cell::new(code).context(context)).await
}

async fn context(sandbox: &Sandbox, id: &str, language: Language) {
    sandbox
        .contexts()
        .create(&ContextOptions::new(language).id(id))
        .await
        .unwrap_or_else(|error| panic!("create {id}: {error}"));
}

async fn one_plus_one_gives_two(sandbox: &Sandbox) {
    let out = cell(sandbox, "1 + 1").await;
    assert_eq!(out.done.status, CellStatus::Ok, "{out:?}");
    assert_eq!(out.text(), Some("2"));
    assert_eq!(out.json(), Some(json!(2)));
}

async fn a_dict_gives_json(sandbox: &Sandbox) {
    let out = cell(
        sandbox,
        "{'name': 'airlock', 'sizes': [1, 2.5], 'ok': True}",
    )
    .await;
    assert_eq!(
        out.json(),
        Some(json!({"name": "airlock", "sizes": [1, 2.5], "ok": true}))
    );
    assert_eq!(
        out.text(),
        Some("{'name': 'airlock', 'sizes': [1, 2.5], 'ok': True}")
    );
}

async fn variables_persist_between_calls(sandbox: &Sandbox) {
    context(sandbox, "persist", Language::Python).await;
    let first = in_context(sandbox, "persist", "x = 41").await;
    assert!(first.result.is_none());
    let out = in_context(sandbox, "persist", "x + 1").await;
    assert_eq!(out.text(), Some("42"));
    assert_eq!(out.done.execution_count, 2);
}

async fn an_exception_gives_its_name_value_and_line(sandbox: &Sandbox) {
    let out = cell(sandbox, "def ratio(a, b):\n    return a / b\n\nratio(1, 0)").await;
    assert_eq!(out.done.status, CellStatus::Error);
    let error = out.error.expect("an error");
    assert_eq!(error.name, "ZeroDivisionError");
    assert_eq!(error.value, "division by zero");
    let traceback = error.traceback.concat();
    assert!(traceback.contains(", line 4, in <module>"), "{traceback}");
    assert!(traceback.contains(", line 2, in ratio"), "{traceback}");
    assert!(traceback.contains("return a / b"), "{traceback}");
}

async fn a_deadline_stops_a_busy_loop_and_the_context_still_answers(sandbox: &Sandbox) {
    context(sandbox, "deadline", Language::Python).await;
    in_context(sandbox, "deadline", "before = 'kept'").await;
    let out = cell(
        sandbox,
        Cell::new("while True: pass")
            .context("deadline")
            .timeout(Duration::from_secs(2)),
    )
    .await;
    assert_eq!(out.done.status, CellStatus::Interrupted, "{out:?}");
    assert!(out.done.timed_out);
    assert!(!out.done.context_restarted, "{out:?}");
    assert_eq!(
        out.error.map(|e| e.name).as_deref(),
        Some("KeyboardInterrupt")
    );
    let out = in_context(sandbox, "deadline", "before").await;
    assert_eq!(out.text(), Some("'kept'"));
}

async fn interrupt_keeps_the_variables(sandbox: &Sandbox) {
    context(sandbox, "interrupt", Language::Python).await;
    in_context(sandbox, "interrupt", "kept = [1, 2, 3]").await;
    let mut running = sandbox
        .run_code(
            Cell::new("import time\nprint('started', flush=True)\nwhile True: time.sleep(0.1)")
                .context("interrupt"),
        )
        .await
        .unwrap();
    // The cell runs once its first output arrives.
    let first = running.next_event().await.unwrap();
    assert!(matches!(first, Some(CellEvent::Stdout(_))), "{first:?}");
    sandbox.contexts().interrupt("interrupt").await.unwrap();
    let out = running.output().await.unwrap();
    assert_eq!(out.done.status, CellStatus::Interrupted, "{out:?}");
    assert_eq!(
        out.error.map(|e| e.name).as_deref(),
        Some("KeyboardInterrupt")
    );
    let out = in_context(sandbox, "interrupt", "kept").await;
    assert_eq!(out.json(), Some(json!([1, 2, 3])));
}

async fn restart_clears_the_variables(sandbox: &Sandbox) {
    context(sandbox, "restart", Language::Python).await;
    in_context(sandbox, "restart", "gone = 1").await;
    let info = sandbox.contexts().restart("restart").await.unwrap();
    assert_eq!(info.execution_count, 0);
    let out = in_context(sandbox, "restart", "gone").await;
    assert_eq!(out.error.map(|e| e.name).as_deref(), Some("NameError"));
}

async fn two_contexts_do_not_see_each_others_variables(sandbox: &Sandbox) {
    context(sandbox, "left", Language::Python).await;
    context(sandbox, "right", Language::Python).await;
    in_context(sandbox, "left", "side = 'left'").await;
    in_context(sandbox, "right", "side = 'right'").await;
    assert_eq!(
        in_context(sandbox, "left", "side").await.text(),
        Some("'left'")
    );
    assert_eq!(
        in_context(sandbox, "right", "side").await.text(),
        Some("'right'")
    );
    let ids: Vec<String> = sandbox
        .contexts()
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert!(
        ids.contains(&"left".to_owned()) && ids.contains(&"right".to_owned()),
        "{ids:?}"
    );
}

async fn output_streams_while_the_cell_runs(sandbox: &Sandbox) {
    let mut running = sandbox
        .run_code(Cell::new(
            "import time\nprint('first', flush=True)\ntime.sleep(2)\nprint('second')",
        ))
        .await
        .unwrap();
    let first = running.next_event().await.unwrap();
    assert_eq!(first, Some(CellEvent::Stdout("first\n".into())));
    // It arrived while the cell still ran.
    let busy = sandbox
        .contexts()
        .list()
        .await
        .unwrap()
        .into_iter()
        .any(|c| c.id == "python" && c.busy);
    assert!(busy, "the first line arrived only after the cell ended");
    let rest = running.output().await.unwrap();
    assert_eq!(String::from_utf8_lossy(&rest.stdout), "second\n");
}

async fn bash_keeps_its_directory_and_variables(sandbox: &Sandbox) {
    let bash = |code: &str| Cell::new(code).language(Language::Bash);
    let out = cell(sandbox, bash("cd /tmp && export GREETING=hi && COUNT=3")).await;
    assert_eq!(out.done.status, CellStatus::Ok, "{out:?}");
    let out = cell(
        sandbox,
        bash("echo \"$PWD $GREETING $COUNT $BASH_VERSION\""),
    )
    .await;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.starts_with("/tmp hi 3 5."), "{text}");
    let out = cell(sandbox, bash("false")).await;
    assert_eq!(out.done.status, CellStatus::Error);
    assert_eq!(out.error.map(|e| e.value).as_deref(), Some("1"));
}

/// The changes as `kind path size` lines, directories with a slash.
fn lines(changes: &Changes) -> Vec<String> {
    changes
        .changes
        .iter()
        .map(|c| {
            let size = if c.file_kind == FileKind::Directory {
                String::new()
            } else {
                format!(" {}", c.size)
            };
            let slash = if c.file_kind == FileKind::Directory {
                "/"
            } else {
                ""
            };
            format!("{} {}{slash}{size}", c.kind.as_str(), c.path.display())
        })
        .collect()
}

async fn a_programs_changes_are_listed_exactly_and_downloaded(sandbox: &Sandbox) {
    let setup = "mkdir -p /root/project /tmp/scratch && printf 'v1' > /root/project/notes.txt \
                 && printf 'old' > /tmp/scratch/old.log && printf 'same' > /root/project/same.txt";
    let out = run(sandbox, sh(setup)).await;
    assert!(out.status.success(), "{out:?}");
    let tracker = sandbox.fs().track_changes(["/root", "/tmp"]).await.unwrap();
    assert!(!tracker.truncated());

    let work = "printf 'version two' > /root/project/notes.txt && rm /tmp/scratch/old.log \
                && mkdir /tmp/scratch/out && printf 'result' > /tmp/scratch/out/result.csv";
    let out = run(sandbox, sh(work)).await;
    assert!(out.status.success(), "{out:?}");
    let changes = tracker.changes().await.unwrap();
    assert!(!changes.truncated);
    assert_eq!(
        lines(&changes),
        [
            "modified /root/project/notes.txt 11",
            "created /tmp/scratch/out/",
            "created /tmp/scratch/out/result.csv 6",
            "deleted /tmp/scratch/old.log 3",
        ]
    );
    let notes = &changes.changes[0];
    assert_eq!((notes.kind, notes.previous_size), (ChangeKind::Modified, 2));

    let host = tempfile::tempdir().unwrap();
    let entries = sandbox
        .fs()
        .download_changes(&changes, host.path())
        .await
        .unwrap();
    assert_eq!(entries, 3);
    let read = |path: &str| std::fs::read_to_string(host.path().join(path)).unwrap();
    assert_eq!(read("root/project/notes.txt"), "version two");
    assert_eq!(read("tmp/scratch/out/result.csv"), "result");
    assert!(!host.path().join("root/project/same.txt").exists());
    run(sandbox, sh("rm -rf /root/project /tmp/scratch")).await;
}

async fn a_cells_changes_are_listed_too(sandbox: &Sandbox) {
    let tracker = sandbox.fs().track_changes(["/root"]).await.unwrap();
    let out = cell(
        sandbox,
        "with open('/root/report.json', 'w') as f:\n    f.write('{\"rows\": 3}')",
    )
    .await;
    assert_eq!(out.done.status, CellStatus::Ok, "{out:?}");
    let changes = tracker.finish(100).await.unwrap();
    assert_eq!(lines(&changes), ["created /root/report.json 11"]);
}
