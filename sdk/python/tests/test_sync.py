"""The blocking client against a real server with real sandboxes (QEMU):
every call, with the errors a user meets. Checks that need no sandbox of
their own share one busybox sandbox (``sbx``) or one of the default image
(``py``, which has python3 for ``run_code``).

``test_async.py`` mirrors this suite: the same tests, by the same names,
with the same cases, awaited (``test_mirror.py`` holds them to it)."""

from __future__ import annotations

import base64
import hashlib
import os
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest

from airlock import (
    AuthenticationException,
    CommandExitException,
    ConnectionConfig,
    Context,
    FilesystemEventType,
    FileType,
    InvalidArgumentException,
    LogEntry,
    LogEntryEnd,
    LogEntryStart,
    NotFoundException,
    PtySize,
    RateLimitException,
    Result,
    Sandbox,
    SandboxException,
    SandboxNotFoundException,
    SandboxState,
    Secret,
    Template,
    TimeoutException,
    Usage,
    WriteEntry,
    wait_for_file,
)
from airlock.exceptions import AlreadyExistsException

from .conftest import MIB, TEMPLATE_FILE, TINY_PNG, Pattern, Server


@pytest.fixture(scope="module")
def sbx(server: Server) -> Iterator[Sandbox]:
    with Sandbox.create(no_image=True, metadata={"suite": "sync"}, envs={"SUITE": "sync"}) as sandbox:
        yield sandbox


@pytest.fixture(scope="module")
def py(server: Server) -> Iterator[Sandbox]:
    with Sandbox.create(metadata={"suite": "sync-py"}) as sandbox:
        yield sandbox


# -- lifecycle ---------------------------------------------------------


def test_create_sets_what_was_asked_and_list_finds_it(server: Server) -> None:
    sandbox = Sandbox.create(
        no_image=True, timeout=600, metadata={"owner": "sync-create"}, envs={"GREETING": "hi"},
        memory_mb=320, vcpus=2,
    )
    try:
        info = sandbox.get_info()
        assert (info.sandbox_id, info.memory_mb, info.cpu_count) == (sandbox.sandbox_id, 320, 2)
        assert info.metadata == {"owner": "sync-create"} and info.state == SandboxState.RUNNING
        assert info.end_at is not None and 590 <= (info.end_at - info.started_at).total_seconds() <= 610
        assert info.env_names == ["GREETING"]
        assert sandbox.commands.run("echo $GREETING; nproc").stdout == "hi\n2\n"
        listed = list(Sandbox.list(metadata={"owner": "sync-create"}))
        assert [i.sandbox_id for i in listed] == [sandbox.sandbox_id]
        assert list(Sandbox.list(metadata={"owner": "sync-create"}, state=[SandboxState.PAUSED])) == []
        assert Sandbox.list(metadata={"owner": "sync-create"}, state=SandboxState.PAUSED).next_items() == []
        assert Sandbox.get_info(sandbox.sandbox_id).sandbox_id == sandbox.sandbox_id
        assert sandbox.is_running()
    finally:
        assert sandbox.kill() is True
    assert sandbox.is_running() is False
    assert Sandbox.kill(sandbox.sandbox_id) is False
    with pytest.raises(NotFoundException):
        Sandbox.connect(sandbox.sandbox_id)


def test_with_kills_the_sandbox_on_exit(server: Server) -> None:
    with Sandbox.create(no_image=True) as sandbox:
        sandbox_id = sandbox.sandbox_id
        assert sandbox.commands.run("echo in").stdout == "in\n"
    with pytest.raises(NotFoundException):
        Sandbox.get_info(sandbox_id)
    with pytest.raises(ValueError):
        with Sandbox.create(no_image=True) as sandbox:
            sandbox_id = sandbox.sandbox_id
            raise ValueError("the body failed")
    assert not any(i.sandbox_id == sandbox_id for i in Sandbox.list())


def test_set_timeout_ends_it_then(server: Server) -> None:
    sandbox = Sandbox.create(no_image=True)
    Sandbox.set_timeout(sandbox.sandbox_id, 600)
    moved = sandbox.get_info().end_at
    assert moved is not None and 540 <= (moved - datetime.now(timezone.utc)).total_seconds() <= 601
    sandbox.set_timeout(1)
    deadline = time.monotonic() + 30
    while sandbox.is_running():
        assert time.monotonic() < deadline, "still running 30 s after a 1 s timeout"
        time.sleep(0.2)
    info = Sandbox.get_info(sandbox.sandbox_id)
    assert info.state == SandboxState.ENDED and "lifetime" in info.end_reason
    with pytest.raises(NotFoundException):
        sandbox.commands.run("true")
    sandbox.kill()
    assert Sandbox.kill(sandbox.sandbox_id) is False


def test_pause_resume_to_disk_and_connect(sbx: Sandbox) -> None:
    sbx.files.write("/root/kept", "before the pause")
    assert sbx.pause() is True
    assert sbx.get_info().state == SandboxState.PAUSED and not sbx.is_running()
    assert sbx.pause() is False
    sbx.resume()
    assert sbx.is_running()
    assert Sandbox.pause(sbx.sandbox_id, to_disk=True) is True
    assert sbx.get_info().state == SandboxState.ON_DISK
    again = Sandbox.connect(sbx.sandbox_id)
    assert again.is_running() and again.files.read("/root/kept") == "before the pause"
    assert again.commands.run("echo $SUITE").stdout == "sync\n"


def test_fork_copies_memory_and_files(sbx: Sandbox) -> None:
    sbx.files.write("/tmp/parent", "from the parent")
    children = sbx.fork(2)
    try:
        assert len({c.sandbox_id for c in children} | {sbx.sandbox_id}) == 3
        for child in children:
            assert child.files.read("/tmp/parent") == "from the parent"
            assert child.commands.run("hostname").stdout.strip() == child.sandbox_id
    finally:
        for child in children:
            assert child.kill() is True


def test_metrics_measure_the_guest(sbx: Sandbox) -> None:
    # The writable root starts empty: 2 MiB written into it show.
    sbx.commands.run("head -c 2097152 /dev/urandom > /root/metrics.fill")
    [metrics] = sbx.get_metrics()
    assert metrics.mem_total > 100 * MIB and 0 < metrics.mem_used < metrics.mem_total
    assert metrics.cpu_count == 1 and metrics.running_ms > 0
    assert metrics.disk_total is not None and metrics.disk_used is not None
    assert 2 * MIB <= metrics.disk_used <= metrics.disk_total
    [again] = Sandbox.get_metrics(sbx.sandbox_id)
    assert again.mem_total == metrics.mem_total and again.cpu_count == 1


# -- commands ----------------------------------------------------------


def test_run_returns_output_and_raises_on_failure(sbx: Sandbox) -> None:
    result = sbx.commands.run("echo out; echo err >&2")
    assert (result.stdout, result.stderr, result.exit_code, result.error) == ("out\n", "err\n", 0, None)
    with pytest.raises(CommandExitException) as failed:
        sbx.commands.run("echo partial; exit 3")
    assert (failed.value.exit_code, failed.value.stdout) == (3, "partial\n")
    assert isinstance(failed.value, SandboxException)
    ran = sbx.commands.run(
        "echo $A $SUITE; pwd; id -u", envs={"A": "1"}, cwd="/tmp", user="65534"
    )
    assert ran.stdout == "1 sync\n/tmp\n65534\n"
    assert sbx.commands.run("cat", stdin="given stdin").stdout == "given stdin"
    assert sbx.commands.run("cat").stdout == ""


def test_on_stdout_is_called_as_output_arrives(sbx: Sandbox) -> None:
    seen: List[Tuple[float, str]] = []
    result = sbx.commands.run(
        "echo first; sleep 3; echo second; echo late >&2",
        on_stdout=lambda text: seen.append((time.monotonic(), text)),
        on_stderr=lambda text: seen.append((time.monotonic(), "E:" + text)),
    )
    ended = time.monotonic()
    assert [text for _, text in seen if not text.startswith("E:")] == ["first\n", "second\n"]
    assert [text for _, text in seen if text.startswith("E:")] == ["E:late\n"]
    assert ended - seen[0][0] > 2, "the first line arrived only at the end"
    assert result.stdout == "first\nsecond\n"


def test_a_command_past_its_timeout_is_killed(sbx: Sandbox) -> None:
    began = time.monotonic()
    with pytest.raises(TimeoutException):
        sbx.commands.run("sleep 30", timeout=1)
    assert time.monotonic() - began < 20


def test_background_handle_stdin_list_kill(sbx: Sandbox) -> None:
    handle = sbx.commands.run("while read line; do echo got $line; done", background=True)
    pieces = iter(handle)
    received = ""
    # Through the handle's own stream, then by pid (another call: not
    # ordered with the stream, so the second waits for the first's answer).
    for word in ("one", "two"):
        if word == "one":
            handle.send_stdin("one\n")
        else:
            sbx.commands.send_stdin(handle.pid, "two\n")
        while f"got {word}" not in received:
            stdout, _, _ = next(pieces)
            received += stdout or ""
    assert received == "got one\ngot two\n"
    listed = {p.pid: p for p in sbx.commands.list()}
    assert listed[handle.pid].running and listed[handle.pid].args[-1].startswith("while read")
    handle.close_stdin()
    ended = handle.wait()
    assert ended.exit_code == 0 and ended.stdout == "got one\ngot two\n"
    sleeper = sbx.commands.run("sleep 600", background=True)
    assert sbx.commands.kill(sleeper.pid) is True
    with pytest.raises(CommandExitException) as killed:
        sleeper.wait()
    assert killed.value.signal == 9 and killed.value.error == "signal: 9"
    other = sbx.commands.run("sleep 600", background=True)
    assert other.kill() is True
    assert sbx.commands.kill(999_999) is False


def test_background_command_reattached_with_replay(sbx: Sandbox) -> None:
    handle = sbx.commands.run(
        "for i in 1 2 3; do echo line $i; sleep 0.5; done; read x; echo then $x",
        background=True,
    )
    while handle.stdout.count("line") < 3:
        time.sleep(0.1)
    handle.disconnect()
    again = sbx.commands.connect(handle.pid)
    first = next(iter(again))
    assert first[0] is not None and first[0].startswith("line 1")
    again.send_stdin("back\n")
    result = again.wait()
    assert result.stdout == "line 1\nline 2\nline 3\nthen back\n"


# -- files -------------------------------------------------------------


def test_files_read_write_list_and_more(sbx: Sandbox, tmp_path: Path) -> None:
    fs = sbx.files
    info = fs.write("/tmp/f/a.txt", "alpha")
    assert (info.name, info.path, info.type) == ("a.txt", "/tmp/f/a.txt", FileType.FILE)
    assert fs.read("/tmp/f/a.txt") == "alpha"
    fs.write("/tmp/f/b.bin", b"\x00\xffbin")
    assert fs.read("/tmp/f/b.bin", format="bytes") == bytearray(b"\x00\xffbin")
    assert b"".join(fs.read("/tmp/f/b.bin", format="stream")) == b"\x00\xffbin"
    with open(tmp_path / "local", "wb") as f:
        f.write(b"from a file object")
    with open(tmp_path / "local", "rb") as f:
        fs.write("/tmp/f/c", f)
    assert fs.read("/tmp/f/c") == "from a file object"
    written = fs.write_files([WriteEntry("/tmp/f/d/1", "one"), {"path": "/tmp/f/d/2", "data": b"two"}])
    assert [w.path for w in written] == ["/tmp/f/d/1", "/tmp/f/d/2"]
    names = sorted(e.name for e in fs.list("/tmp/f"))
    assert names == ["a.txt", "b.bin", "c", "d"]
    deep = sorted(e.path for e in fs.list("/tmp/f", depth=2))
    assert "/tmp/f/d/2" in deep and "/tmp/f/d/2" not in [e.path for e in fs.list("/tmp/f")]
    assert fs.exists("/tmp/f/a.txt") and not fs.exists("/tmp/f/none")
    stat = fs.get_info("/tmp/f/a.txt")
    assert (stat.size, stat.type, stat.permissions) == (5, FileType.FILE, "-rw-r--r--")
    assert fs.get_info("/tmp/f/d").type == FileType.DIR
    assert fs.make_dir("/tmp/f/new/deep") is True and fs.make_dir("/tmp/f/new/deep") is False
    moved = fs.rename("/tmp/f/a.txt", "/tmp/f/new/a.txt")
    assert moved.path == "/tmp/f/new/a.txt" and not fs.exists("/tmp/f/a.txt")
    fs.remove("/tmp/f/new")
    assert not fs.exists("/tmp/f/new/a.txt")
    with pytest.raises(NotFoundException) as missing:
        fs.read("/tmp/f/none")
    assert missing.value.reason == "GUEST_NOT_FOUND"


def test_watch_dir_sees_changes(sbx: Sandbox) -> None:
    sbx.files.make_dir("/tmp/watched")
    called = threading.Event()
    handle = sbx.files.watch_dir("/tmp/watched", on_event=lambda e: called.set(), recursive=True)
    try:
        sbx.commands.run("echo x > /tmp/watched/new.txt")
        deadline = time.monotonic() + 15
        events = []
        while not any(e.type == FilesystemEventType.CREATE and e.name == "new.txt" for e in events):
            assert time.monotonic() < deadline, f"no CREATE event: {events}"
            time.sleep(0.1)
            events += handle.get_new_events()
        assert called.is_set()
    finally:
        handle.stop()


def test_directories_travel_as_tar(sbx: Sandbox, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "run.sh").write_text("#!/bin/sh\necho ran\n")
    os.chmod(src / "sub" / "run.sh", 0o755)
    os.symlink("sub/run.sh", src / "link")
    assert sbx.files.upload_dir(str(src), "/tmp/tree") > 0
    assert sbx.commands.run("/tmp/tree/link").stdout == "ran\n"
    out = tmp_path / "out"
    assert sbx.files.download_dir("/tmp/tree", str(out)) >= 3
    assert (out / "sub" / "run.sh").read_text() == "#!/bin/sh\necho ran\n"
    assert os.readlink(out / "link") == "sub/run.sh"
    assert os.stat(out / "sub" / "run.sh").st_mode & 0o777 == 0o755


def test_track_changes_lists_and_downloads(sbx: Sandbox, tmp_path: Path) -> None:
    sbx.commands.run("mkdir -p /root/w && echo old > /root/w/mod && echo gone > /root/w/del")
    tracker = sbx.files.track_changes(["/root/w"])
    sbx.commands.run("echo new > /root/w/made; echo changed >> /root/w/mod; rm /root/w/del")
    changes = {(c.kind.value, c.path) for c in tracker.changes()}
    assert changes == {
        ("created", "/root/w/made"),
        ("modified", "/root/w/mod"),
        ("deleted", "/root/w/del"),
    }
    tracker.download(str(tmp_path))
    assert (tmp_path / "root" / "w" / "made").read_text() == "new\n"
    tracker.stop()
    with pytest.raises(NotFoundException):
        tracker.changes()


def test_a_200_mib_file_streams_both_ways(server: Server) -> None:
    with Sandbox.create(no_image=True, memory_mb=1024) as big:
        source = Pattern(200 * MIB)
        written = big.files.write("/tmp/big", source)
        assert written.size == 200 * MIB
        expected = source.digest.hexdigest()
        assert big.commands.run("sha256sum /tmp/big").stdout.split()[0] == expected
        digest, size = hashlib.sha256(), 0
        for chunk in big.files.read("/tmp/big", format="stream"):
            digest.update(chunk)
            size += len(chunk)
        assert (size, digest.hexdigest()) == (200 * MIB, expected)


# -- terminals -----------------------------------------------------------


def test_pty_types_resizes_and_kills(sbx: Sandbox) -> None:
    screen = bytearray()
    changed = threading.Condition()

    def on_data(data: bytes) -> None:
        with changed:
            screen.extend(data)
            changed.notify_all()

    def wait_for(text: bytes) -> None:
        with changed:
            assert changed.wait_for(lambda: text in screen, timeout=15), bytes(screen)

    terminal = sbx.pty.create(PtySize(rows=24, cols=80), on_data=on_data, envs={"PS1": "$ "})
    sbx.pty.send_stdin(terminal.pid, b"echo $((6 * 7))\n")
    wait_for(b"42")
    sbx.pty.resize(terminal.pid, PtySize(rows=50, cols=132))
    sbx.pty.send_stdin(terminal.pid, b"stty size\n")
    wait_for(b"50 132")
    assert sbx.pty.kill(terminal.pid) is True
    with pytest.raises(CommandExitException):
        terminal.wait()


# -- code --------------------------------------------------------------


def test_run_code_values_outputs_errors(py: Sandbox) -> None:
    assert py.run_code("x = 41").results == []
    execution = py.run_code("x + 1")
    assert execution.text == "42" and execution.error is None and execution.execution_count
    # A plain dict is text, as IPython gives it (no JSON without _repr_json_).
    answer = py.run_code("{'answer': x + 1}").results[0]
    assert answer.text == "{'answer': 42}" and answer.json is None
    printed: List[str] = []
    results: List[Result] = []
    errors = []
    out = py.run_code(
        "import time\nprint('a', flush=True)\ntime.sleep(1)\nprint('b')\n" + TINY_PNG,
        on_stdout=lambda m: printed.append(m.line),
        on_result=results.append,
        on_error=errors.append,
    )
    assert "".join(printed) == "a\nb\n" and out.logs.stdout == printed
    png = base64.b64decode(out.results[-1].png or "")
    assert png.startswith(b"\x89PNG") and results == out.results and errors == []
    failed = py.run_code("1 / 0", on_error=errors.append)
    assert failed.error is not None and failed.error.name == "ZeroDivisionError"
    assert "1 / 0" in failed.error.traceback and errors == [failed.error]
    raised = py.run_code("raise KeyError('k')", on_error=errors.append)
    assert raised.error is not None and raised.error.name == "KeyError" and errors[-1] == raised.error
    bash = py.run_code("cd /tmp; echo $PWD", language="bash")
    assert bash.logs.stdout == ["/tmp\n"]
    with pytest.raises(InvalidArgumentException):
        py.run_code("1", envs={"A": "1"})


def test_code_contexts_and_timeouts(py: Sandbox) -> None:
    ctx = py.create_code_context(cwd="/tmp", language="python")
    assert isinstance(ctx, Context) and ctx.cwd == "/tmp"
    assert py.run_code("import os; y = os.getcwd()", context=ctx).error is None
    assert py.run_code("y", context=ctx).text == "'/tmp'"
    assert py.run_code("'y' in dir()").text == "False"
    assert ctx.id in [c.id for c in py.list_code_contexts()]
    with pytest.raises(TimeoutException):
        py.run_code("while True: pass", context=ctx, timeout=2)
    assert py.run_code("y", context=ctx).text == "'/tmp'"
    py.restart_code_context(ctx)
    assert py.run_code("y", context=ctx).error is not None
    with pytest.raises(AlreadyExistsException):
        py.create_code_context(context_id=ctx.id)
    py.interrupt_code_context(ctx)
    py.remove_code_context(ctx)
    assert ctx.id not in [c.id for c in py.list_code_contexts()]
    with pytest.raises(NotFoundException):
        py.restart_code_context(ctx)
    shell = py.create_code_context(language="bash", cwd="/tmp")
    assert py.run_code("echo $PWD", context=shell).logs.stdout == ["/tmp\n"]
    py.remove_code_context(shell)
    # The default context keeps its variables past a timed-out cell too.
    py.run_code("z = 7")
    with pytest.raises(TimeoutException):
        py.run_code("while True: pass", timeout=2)
    assert py.run_code("z").text == "7"


# -- E2B's defaults ----------------------------------------------------


def test_commands_start_in_home_where_relative_paths_are(py: Sandbox) -> None:
    # E2B code writes a file by a relative path, then runs it by one.
    py.files.write("script.py", "print('ran from home')")
    assert py.commands.run("python3 script.py").stdout == "ran from home\n"
    assert py.commands.run("pwd").stdout == "/root\n"
    assert py.files.read("/root/script.py") == "print('ran from home')"


def test_e2b_user_and_home_work_on_the_default_image(py: Sandbox) -> None:
    assert py.commands.run("whoami", user="user").stdout == "user\n"
    assert py.commands.run("pwd", cwd="/home/user").stdout == "/home/user\n"
    # As E2B's: a command as the user starts in the user's home.
    assert py.commands.run("whoami; pwd", user="user").stdout == "user\n/home/user\n"


def test_output_timestamps_are_nanoseconds(py: Sandbox) -> None:
    stamps: List[int] = []
    py.run_code("print('stamped')", on_stdout=lambda m: stamps.append(m.timestamp))
    assert len(stamps) == 1 and abs(stamps[0] / 1e9 - time.time()) < 60, stamps


def test_set_integration_names_the_wrapping_library_on_every_call(py: Sandbox) -> None:
    before = py._client.channel
    ConnectionConfig.set_integration("my-agent/1.0")
    try:
        assert ConnectionConfig.integration() == "my-agent/1.0"
        again = Sandbox.connect(py.sandbox_id)
        # A channel of its own, made with the name in its user agent.
        assert again._client.channel is not before
        assert again.get_info().sandbox_id == py.sandbox_id
        assert again.commands.run("echo named").stdout == "named\n"
    finally:
        ConnectionConfig.set_integration(None)
    assert ConnectionConfig.integration() is None
    assert Sandbox.connect(py.sandbox_id)._client.channel is before


# -- snapshots ---------------------------------------------------------


def test_a_snapshot_keeps_files_and_variables_for_its_clones(py: Sandbox) -> None:
    py.files.write("/root/snapped.txt", "saved in the snapshot")
    py.run_code("kept = 6 * 7")
    info = py.create_snapshot("sync-snap")
    assert (info.snapshot_id, info.names, info.source_sandbox_id) == ("sync-snap", ["sync-snap"], py.sandbox_id)
    assert len(info.content_id) == 64 and info.size_bytes > 0 and info.owner == ""
    assert (info.memory_mb, info.cpu_count) == (py.get_info().memory_mb, 1)
    # E2B's form: the snapshot's id where a template goes; and Airlock's.
    for start in (lambda: Sandbox.create(info.snapshot_id), lambda: Sandbox.create(snapshot="sync-snap")):
        with start() as clone:
            assert clone.sandbox_id != py.sandbox_id
            assert clone.files.read("/root/snapped.txt") == "saved in the snapshot"
            assert clone.run_code("kept").text == "42"
            assert Sandbox.get_snapshot("sync-snap").sandboxes == 1
    assert py.run_code("kept").text == "42"  # the source runs on
    with pytest.raises(AlreadyExistsException) as taken:
        py.create_snapshot("sync-snap")
    assert taken.value.reason == "ALREADY_EXISTS"
    with pytest.raises(InvalidArgumentException, match="memory"):
        Sandbox.create_snapshot(py.sandbox_id, mode="filesystem")


def test_snapshots_are_listed_in_pages_and_deleted(py: Sandbox) -> None:
    named = Sandbox.create_snapshot(py.sandbox_id)
    assert named.snapshot_id.startswith("snapshot-")
    mine = {s.snapshot_id for s in py.list_snapshots()}
    assert {"sync-snap", named.snapshot_id} <= mine
    assert {s.snapshot_id for s in Sandbox.list_snapshots(sandbox_id=py.sandbox_id)} == mine
    assert [s.snapshot_id for s in Sandbox.list_snapshots(name="sync-snap")] == ["sync-snap"]
    pages = Sandbox.list_snapshots(sandbox_id=py.sandbox_id, limit=1)
    first = pages.next_items()
    assert len(first) == 1 and pages.has_next and pages.next_token
    assert len(first + list(pages)) == len(mine) and not pages.has_next
    with pytest.raises(TypeError, match="next_items"):
        len(pages)
    for name in ("sync-snap", named.snapshot_id):
        assert Sandbox.delete_snapshot(name) is True
        assert Sandbox.delete_snapshot(name) is False
    assert list(py.list_snapshots()) == []
    with pytest.raises(NotFoundException) as gone:
        Sandbox.get_snapshot("sync-snap")
    assert gone.value.reason == "NOT_FOUND"
    with pytest.raises(NotFoundException, match="nor is there a snapshot"):
        Sandbox.create("sync-snap")


def test_another_keys_snapshot_does_not_exist_for_you(tls_server: Server) -> None:
    base = {"host": tls_server.host, "ca_cert": tls_server.ca}
    mine = {**base, "api_key": tls_server.key("sync-snap-owner")}
    theirs = {**base, "api_key": tls_server.key("sync-snap-other")}
    with Sandbox.create(no_image=True, **mine) as sandbox:
        sandbox.files.write("/root/private", "mine")
        assert sandbox.create_snapshot("sync-private").owner == "sync-snap-owner"
        with pytest.raises(NotFoundException):
            Sandbox.get_snapshot("sync-private", **theirs)
        with pytest.raises(NotFoundException):
            Sandbox.create(snapshot="sync-private", **theirs)
        assert Sandbox.delete_snapshot("sync-private", **theirs) is False
        assert list(Sandbox.list_snapshots(**theirs)) == []
        with pytest.raises(SandboxNotFoundException):
            Sandbox.create_snapshot(sandbox.sandbox_id, "theirs", **theirs)
    assert Sandbox.delete_snapshot("sync-private", **mine) is True


# -- templates ---------------------------------------------------------

def test_a_template_built_from_a_context_starts_sandboxes(tls_server: Server, tmp_path: Path) -> None:
    # A key's templates and its build cache are its own, in the server's
    # private data directory.
    conn = {"host": tls_server.host, "api_key": tls_server.key("sync-templates"), "ca_cert": tls_server.ca}
    (tmp_path / "hello.txt").write_text("from the sync suite's context")
    (tmp_path / "Dockerfile").write_text(TEMPLATE_FILE)
    (tmp_path / "left-out.bin").write_bytes(os.urandom(1024))
    logs: List[LogEntry] = []
    template = Template(file_context_path=tmp_path, file_ignore_patterns=["*.bin"]).from_dockerfile("Dockerfile")
    info = Template.build(template, "sync-template", on_build_logs=logs.append, **conn)
    assert (info.name, info.template_id, info.image, info.owner) == ("sync-template",) * 2 + ("default", "sync-templates")
    assert isinstance(logs[0], LogEntryStart) and isinstance(logs[-1], LogEntryEnd)
    [step] = [entry for entry in logs if entry.kind == "step"]
    assert step.message == "[1/1] COPY . /srv/" and not step.cached
    assert any(entry.kind == "phase" for entry in logs)
    assert Template.exists("sync-template", **conn) and "sync-template" in [t.name for t in Template.list(**conn)]
    with Sandbox.create("sync-template", **conn) as sandbox:
        assert sandbox.get_info().template_id == "sync-template"
        assert sandbox.files.read("/tmp/started") == "from the sync suite's context"
        assert sandbox.files.exists("/srv/Dockerfile") and not sandbox.files.exists("/srv/left-out.bin")
    # The same file and context from E2B's builder: every step comes from
    # the cache.
    built = (
        Template(file_context_path=tmp_path, file_ignore_patterns=["*.bin"])
        .from_base_image()
        .copy(".", "/srv/")
        .set_start_cmd("sh -c 'cp /srv/hello.txt /tmp/started; exec sleep infinity'", wait_for_file("/tmp/started"))
    )
    assert built.to_dockerfile() == TEMPLATE_FILE
    again: List[LogEntry] = []
    Template.build(built, "sync-template", on_build_logs=again.append, **conn)
    steps = [entry for entry in again if entry.kind == "step"]
    assert steps and all(entry.cached for entry in steps), steps
    assert Template.delete("sync-template", **conn) is True
    assert Template.delete("sync-template", **conn) is False and not Template.exists("sync-template", **conn)


def test_a_template_file_the_server_cannot_read_names_its_line(server: Server) -> None:
    with pytest.raises(InvalidArgumentException, match="line 2") as bad:
        Template.build(Template().from_dockerfile("FROM default\nCMD python3\n"), "sync-bad")
    assert bad.value.field == "header.file"
    with pytest.raises(InvalidArgumentException, match="tags"):
        Template.build(Template().from_base_image(), "sync-bad", tags=["v1"])


# -- network -----------------------------------------------------------


def test_network_rules_and_audit(server: Server) -> None:
    with Sandbox.create(
        no_image=True,
        allow_net=["a.example"],
        secrets=[Secret("TOKEN", "s3cret", ["a.example"])],
    ) as net:
        assert net.network.rules() == ["a.example"]
        assert net.network.policy().secrets == {"TOKEN": ["a.example"]}
        assert net.network.allow("b.example:443") == ["a.example", "b.example:443"]
        assert net.network.deny("a.example") == ["b.example:443"]
        assert net.commands.run("echo $TOKEN").stdout.strip() != "s3cret"
        net.commands.run("nslookup refused.example 2>&1 || true")
        records = net.network.audit()
        refused = [r for r in records if r.name.startswith("refused.example")]
        assert refused and not refused[0].allowed and refused[0].verdict.startswith("refused")
        with pytest.raises(InvalidArgumentException) as bad:
            net.network.allow("*.*.bad")
        assert bad.value.field is not None
        assert net.network.replace(["c.example"]) == ["c.example"]


def test_no_network_and_bad_arguments_are_named(sbx: Sandbox) -> None:
    with pytest.raises(SandboxException) as none:
        sbx.network.rules()
    assert none.value.reason == "NO_NETWORK"
    # Since API revision 3 a sandbox without network has an audit: its
    # ingress records alone, none here (test_ingress.py checks them).
    assert sbx.network.audit() == []
    with pytest.raises(InvalidArgumentException) as bad:
        Sandbox.create(no_image=True, memory_mb=10)
    assert bad.value.field == "memory_mib"  # the API's field
    with pytest.raises(InvalidArgumentException):
        Sandbox.create(no_image=True, allow_internet_access=True)
    with pytest.raises(InvalidArgumentException):
        Sandbox.create(no_image=True, vcpus=1000)
    with pytest.raises(NotFoundException) as gone:
        Sandbox.connect("sandbox-nobody")
    assert gone.value.reason == "SANDBOX_NOT_FOUND"


# -- servers -----------------------------------------------------------


def test_the_local_server_is_started_on_demand(tmp_path: Path) -> None:
    socket = str(tmp_path / "daemon.sock")
    env_before = dict(os.environ)
    try:
        os.environ["AIRLOCK_STATE_DIR"] = str(tmp_path)
        os.environ["AIRLOCK_SAVED_DIR"] = str(tmp_path / "saved")
        os.environ["AIRLOCK_SERVER_DIR"] = str(tmp_path / "server")
        from .conftest import airlock_bin

        assert Sandbox.list(socket=socket, airlock_bin=airlock_bin()).next_items() == []
        log = (tmp_path / "daemon.log").read_text()
        assert "serving on the Unix socket" in log
        # As the CLI's does, it serves the HTTP ingress on a loopback port.
        assert "airlock: ingress on 127.0.0.1:" in log
    finally:
        os.environ.clear()
        os.environ.update(env_before)
        from .conftest import _processes_mentioning

        for pid in _processes_mentioning(socket):
            os.kill(pid, 15)


def test_a_remote_server_over_tls_with_a_key(tls_server: Server) -> None:
    key = tls_server.key("sync-remote", "--max-sandboxes", "1")
    conn = {"host": tls_server.host, "api_key": key, "ca_cert": tls_server.ca}
    with Sandbox.create(no_image=True, **conn) as remote:
        assert remote.commands.run("hostname").stdout.strip() == remote.sandbox_id
        remote.files.write("/tmp/r", "over tls")
        assert remote.files.read("/tmp/r") == "over tls"
        assert [i.sandbox_id for i in Sandbox.list(**conn)] == [remote.sandbox_id]
        with pytest.raises(RateLimitException) as quota:
            Sandbox.create(no_image=True, **conn)
        assert quota.value.reason == "QUOTA_EXCEEDED"
    with pytest.raises(AuthenticationException):
        Sandbox.list(host=tls_server.host, api_key="ak_wrong", ca_cert=tls_server.ca).next_items()
    with pytest.raises(SandboxException):
        Sandbox.list(host=tls_server.host, api_key=key).next_items()  # no CA: untrusted


def test_the_usage_ledger_bills_a_keys_sandboxes(tls_server: Server) -> None:
    key = tls_server.key("sync-usage")
    conn = {"host": tls_server.host, "api_key": key, "ca_cert": tls_server.ca}
    sandbox = Sandbox.create(no_image=True, **conn)
    sandbox.commands.run("sleep 1")
    assert sandbox.pause() is True
    time.sleep(1)
    sandbox.resume()
    assert sandbox.kill() is True
    [row] = Usage.query(**conn)
    assert row.sandbox_id == sandbox.sandbox_id and row.key == "sync-usage"
    assert row.running_ms >= 1000 and row.paused_ms >= 900 and row.on_disk_ms == 0
    assert row.cpu_count == 1 and row.vcpu_ms == row.running_ms
    assert row.vcpu_seconds == row.vcpu_ms / 1000
    assert row.memory_mib_ms == row.memory_mb * (row.running_ms + row.paused_ms)
    assert row.memory_gib_seconds == row.memory_mib_ms / 1024 / 1000
    assert row.created_at is not None and row.ended_at is not None
    [by_key] = Usage.query(by="key", **conn)
    assert (by_key.key, by_key.sandboxes, by_key.running_ms) == ("sync-usage", 1, row.running_ms)
    days = Usage.query(by="day", since=timedelta(days=1), **conn)
    assert datetime.now(timezone.utc).strftime("%Y-%m-%d") in [day.day for day in days]
    assert sum(day.running_ms for day in days) == row.running_ms
    assert Usage.query(since=datetime.now(timezone.utc) + timedelta(hours=2), **conn) == []
    with pytest.raises(AuthenticationException) as other:
        Usage.query(key="someone-else", **conn)
    assert other.value.reason == "OWNER_ONLY"
    with pytest.raises(InvalidArgumentException) as bad:
        Usage.query(by="week", **conn)  # type: ignore[arg-type]
    assert bad.value.field == "by"
