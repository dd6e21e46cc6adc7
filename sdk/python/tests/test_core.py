"""The core both clients share (:mod:`airlock.sandbox`), without a server:
that it makes no calls and that neither client imports the other, then
what it decides on its own (requests from arguments, answers as models,
output decoding, a handle's bookkeeping). Milliseconds: nothing here starts
a server or a sandbox."""

from __future__ import annotations

import ast
import io
import os
import tarfile
from pathlib import Path
from typing import Any, List, Set

import pytest

import airlock
from airlock import (
    BuildException,
    CommandExitException,
    Context,
    InvalidArgumentException,
    OutputMessage,
    RateLimitException,
    Result,
    SandboxException,
    SandboxState,
    Secret,
    Template,
    TimeoutException,
    WriteEntry,
    wait_for_file,
    wait_for_port,
    wait_for_timeout,
    wait_for_url,
)
from airlock.api.v1 import code_pb2, files_pb2, ingress_pb2, processes_pb2, sandboxes_pb2, templates_pb2
from airlock.exceptions import NotFoundException
from airlock.models.commands import PtySize
from airlock.sandbox import code, commands, files, ingress, lifecycle, pty, snapshots, templates
from airlock.sandbox.command_handle import HandleState
from airlock.sandbox.limits import CHUNK_BYTES, STDIN_PIECE_BYTES, WRITE_CHUNK_BYTES
from airlock.sandbox.output import CellOutput, CommandOutput, route, route_cell

PACKAGE = Path(airlock.__file__).parent


def imports(directory: str) -> Set[str]:
    """What the modules of `directory` (below the package) import, as
    absolute module names."""
    found: Set[str] = set()
    for path in (PACKAGE / directory).glob("*.py"):
        package = ["airlock", directory]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                found.add(".".join(base + ([node.module] if node.module else [])))
    return found


def test_the_core_makes_no_calls() -> None:
    used = imports("sandbox")
    for io in ("grpc", "airlock._client", "airlock._errors", "airlock._local"):
        assert not any(name == io or name.startswith(io + ".") for name in used), io
    assert not any(name.startswith(("airlock.sandbox_sync", "airlock.sandbox_async")) for name in used)


def test_neither_client_imports_the_other() -> None:
    assert not any(name.startswith("airlock.sandbox_sync") for name in imports("sandbox_async"))
    assert not any(name.startswith("airlock.sandbox_async") for name in imports("sandbox_sync"))


# -- lifecycle ---------------------------------------------------------------


def test_create_request_carries_every_option() -> None:
    request = lifecycle.create_request(
        template="t", image="i", timeout=90, metadata={"a": "b"}, envs={"E": "1"}, memory_mb=512,
        vcpus=2, allow_net=["x.example"], secrets=[Secret("S", "v", ["x.example"])], no_image=True,
        cold=True, workspace="w", ca_certs=["pem"], public_ports=[8000],
    )
    assert (request.template, request.image, request.timeout_secs) == ("t", "i", 90)
    assert (dict(request.metadata), dict(request.envs)) == ({"a": "b"}, {"E": "1"})
    assert (request.memory_mib, request.vcpus, list(request.allow_net)) == (512, 2, ["x.example"])
    assert [(s.name, s.value, list(s.hosts)) for s in request.secrets] == [("S", "v", ["x.example"])]
    assert (request.no_image, request.cold, request.workspace) == (True, True, "w")
    assert (list(request.ca_certs), list(request.public_ports)) == (["pem"], [8000])
    assert lifecycle.create_request().timeout_secs == 300  # E2B's default lifetime


def test_create_request_refuses_what_airlock_cannot_do() -> None:
    with pytest.raises(InvalidArgumentException) as internet:
        lifecycle.create_request(allow_internet_access=True)
    assert internet.value.field == "allow_net"
    for bad in (0, 65536, True, "80"):
        with pytest.raises(InvalidArgumentException) as port:
            lifecycle.create_request(public_ports=[bad])  # type: ignore[list-item]
        assert port.value.field == "public_ports"


def test_list_request_takes_states_one_or_many_and_the_query() -> None:
    one = lifecycle.list_request(None, "paused", None, 5, "tok")
    assert list(one.states) == [sandboxes_pb2.SANDBOX_STATE_PAUSED]
    assert (one.page_size, one.page_token) == (5, "tok")
    many = lifecycle.list_request({"a": "b"}, [SandboxState.RUNNING, "on_disk"], None, None, None)
    assert list(many.states) == [sandboxes_pb2.SANDBOX_STATE_RUNNING, sandboxes_pb2.SANDBOX_STATE_ON_DISK]
    query = airlock.SandboxQuery(metadata={"q": "1"}, state=[SandboxState.ENDED])
    asked = lifecycle.list_request(None, None, query, None, None)
    assert dict(asked.metadata) == {"q": "1"} and list(asked.states) == [sandboxes_pb2.SANDBOX_STATE_ENDED]
    with pytest.raises(InvalidArgumentException) as bad:
        lifecycle.list_request(None, "sleeping", None, None, None)
    assert bad.value.field == "state"


def test_pages_follow_the_token_until_there_is_none() -> None:
    pages = lifecycle.Pages(lifecycle.list_request(None, None, None, 1, None))
    request = pages._next_request()
    assert request is not None and request.page_token == ""
    first = sandboxes_pb2.ListSandboxesResponse(
        sandboxes=[sandboxes_pb2.SandboxInfo(sandbox_id="a", state=sandboxes_pb2.SANDBOX_STATE_RUNNING)],
        next_page_token="next",
    )
    assert [i.sandbox_id for i in pages._take(first)] == ["a"] and pages.has_next
    request = pages._next_request()
    assert request is not None and request.page_token == "next"
    assert pages._take(sandboxes_pb2.ListSandboxesResponse()) == [] and not pages.has_next
    assert pages._next_request() is None


def test_pause_and_resume_decisions() -> None:
    assert lifecycle.should_pause(SandboxState.RUNNING, False)
    assert not lifecycle.should_pause(SandboxState.PAUSED, False)
    assert lifecycle.should_pause(SandboxState.PAUSED, True)
    assert not lifecycle.should_pause(SandboxState.ON_DISK, True)
    assert [s for s in SandboxState if lifecycle.should_resume(s)] == [SandboxState.PAUSED, SandboxState.ON_DISK]


def test_metrics_are_a_list_of_one_with_the_cpu_share() -> None:
    figures = sandboxes_pb2.SandboxMetrics(memory_total_bytes=100, memory_available_bytes=30)
    figures.usage.running_ms, figures.usage.guest_cpu_ms = 1000, 500
    [metrics] = lifecycle.metrics(figures, 2)
    assert (metrics.mem_used, metrics.cpu_used_pct, metrics.cpu_count) == (70, 25.0, 2)


# -- commands ----------------------------------------------------------------


def test_run_plans_stdin_and_timeout() -> None:
    default = commands.DEFAULT_TIMEOUT
    assert commands.plan_run(None, False, default) == (None, False, default)
    assert commands.plan_run(None, True, default) == (None, True, None)
    assert commands.plan_run(None, True, 5.0).timeout == 5.0
    assert commands.plan_run(True, False, default).stdin
    assert not commands.plan_run(False, True, default).stdin
    given = commands.plan_run("text", False, default)
    assert (given.data, given.keep_open, given.stdin) == (b"text", False, True)


def test_stdin_goes_in_pieces_the_server_takes() -> None:
    data = b"x" * (2 * CHUNK_BYTES + 1)
    by_pid = commands.stdin_requests("s", 7, data, True)
    assert [len(r.data) for r in by_pid] == [CHUNK_BYTES, CHUNK_BYTES, 1]
    assert [r.close for r in by_pid] == [False, False, True] and by_pid[0].process.pid == 7
    [closing] = commands.stdin_requests("s", 7, b"", True)
    assert (closing.data, closing.close) == (b"", True)
    stream = commands.whole_stdin(b"y" * (STDIN_PIECE_BYTES + 1))
    assert [len(m.stdin) for m in stream[:-1]] == [STDIN_PIECE_BYTES, 1] and stream[-1].close_stdin
    assert commands.stdin_inputs(b"") == []


def test_start_request_and_the_first_event() -> None:
    first = commands.start_request(
        sandbox_id="s", argv=commands.shell("echo hi"), envs={"A": "1"}, cwd="/tmp", user="nobody",
        timeout=3, stdin=True, pty=PtySize(24, 80), tag="t", kill_on_disconnect=True,
    )
    start = first.start
    assert list(start.argv)[-1] == "echo hi" and list(start.argv)[:2] == ["/bin/sh", "-c"] and start.timeout_secs == 3.0
    assert (start.pty.rows, start.pty.cols, start.tag, start.kill_on_disconnect) == (24, 80, "t", True)
    started = processes_pb2.ProcessEvent(started=processes_pb2.Started(pid=42))
    assert commands.started_pid(started) == 42
    assert commands.started_pid(None) is None
    assert commands.started_pid(processes_pb2.ProcessEvent(dropped=1)) is None


def test_a_result_becomes_e2b_s_exceptions() -> None:
    ok = commands.command_result("o", "e", processes_pb2.ProcessExit(exit_code=0))
    assert commands.check(ok, 1.0) is ok and ok.error is None
    with pytest.raises(CommandExitException) as failed:
        commands.check(commands.command_result("", "", processes_pb2.ProcessExit(exit_code=3)), None)
    assert failed.value.exit_code == 3
    killed = commands.command_result("", "", processes_pb2.ProcessExit(exit_code=-1, signal=9))
    assert killed.error == "signal: 9"
    with pytest.raises(TimeoutException) as late:
        commands.check(commands.command_result("", "", processes_pb2.ProcessExit(timed_out=True)), 2.0)
    assert late.value.reason == "TIMEOUT" and "2.0 s" in str(late.value)


def test_only_an_interrupted_stream_is_resumed_and_not_forever() -> None:
    interrupted = SandboxException("cut", reason="INTERRUPTED")
    assert commands.resumable(interrupted, 0)
    assert not commands.resumable(interrupted, commands.MAX_RESUMES)
    assert not commands.resumable(SandboxException("other", reason="GUEST_REFUSED"), 0)
    assert commands.kill_missed(NotFoundException("gone", reason="NOT_FOUND"))
    assert not commands.kill_missed(NotFoundException("gone", reason="SANDBOX_NOT_FOUND"))


def test_a_terminal_s_shell_environment_and_size() -> None:
    assert pty.terminal_env(None) == {"TERM": "xterm-256color"}
    assert pty.terminal_env({"TERM": "dumb", "A": "1"}) == {"TERM": "dumb", "A": "1"}
    resize = pty.resize_request("s", 3, PtySize(rows=50, cols=132))
    assert (resize.process.pid, resize.size.rows, resize.size.cols) == (3, 50, 132)


# -- output ------------------------------------------------------------------


def out(data: bytes, offset: int, stderr: bool = False) -> processes_pb2.ProcessEvent:
    chunk = processes_pb2.Output(data=data, offset=offset)
    return processes_pb2.ProcessEvent(stderr=chunk) if stderr else processes_pb2.ProcessEvent(stdout=chunk)


def test_output_is_decoded_across_a_cut_character() -> None:
    output = CommandOutput()
    euro = "€".encode()
    assert output.feed(out(b"a" + euro[:1], 0)) == ("a", None, None)
    assert output.feed(out(euro[1:], 2)) == ("€", None, None)
    assert output.feed(out(b"err", 0, stderr=True)) == (None, "err", None)
    assert output.feed(out(euro[:2], 4)) is None
    assert output.flush() == [("\ufffd", None, None)]
    assert (output.stdout, output.stderr, output.offset) == ("a€\ufffd", "err", 6)
    output.feed(processes_pb2.ProcessEvent(dropped=5))
    output.feed(processes_pb2.ProcessEvent(exited=processes_pb2.ProcessExit(exit_code=2)))
    assert output.dropped == 5 and output.result().exit_code == 2
    terminal = CommandOutput(pty=True)
    assert terminal.feed(out(euro[:1], 0)) == (None, None, euro[:1])


def test_each_piece_goes_to_its_callback() -> None:
    a, b, c = print, repr, len
    assert route(("x", None, None), a, b, c) == (a, "x")
    assert route((None, "y", None), a, b, c) == (b, "y")
    assert route((None, None, b"z"), a, b, c) == (c, b"z")
    assert route((None, "y", None), a, None) == (None, "y")
    message = OutputMessage(line="l", timestamp=0, error=True)
    assert route_cell(message, a, b, None, None) is b
    assert route_cell(Result(), a, b, c, None) is c
    assert route_cell(None, a, b, c, repr) is None


def test_a_handle_s_iterators_take_every_piece_then_the_failure() -> None:
    handle = HandleState("s", 9, CommandOutput(), (None, None, None), None)
    assert not handle._ready(0)
    handle._chunks.append(("a", None, None))
    assert handle._ready(0) and handle._after(0) == ([("a", None, None)], False)
    assert not handle._done(1, False)
    failure = SandboxException("cut")
    handle._end(failure)
    assert handle._ready(1) and handle._after(1) == ([], True)
    with pytest.raises(SandboxException):
        handle._done(1, True)
    handle._disconnected = True
    assert handle._done(1, True)
    assert handle._failed(failure) is failure
    assert "reading command 9 failed" in str(handle._failed(ValueError("callback")))
    with pytest.raises(CommandExitException):
        handle._result(processes_pb2.ProcessExit(exit_code=1))
    assert handle.exit_code == 1


# -- files -------------------------------------------------------------------


def test_writes_go_in_chunks_with_a_header_first() -> None:
    data = "é" * WRITE_CHUNK_BYTES
    chunks = list(files.memory_chunks(data))
    assert b"".join(chunks) == data.encode() and max(map(len, chunks)) == WRITE_CHUNK_BYTES
    assert list(files.memory_chunks(b"")) == []
    header = files.write_header("s", "/f", None, 0o600, True).header
    assert (header.path, header.mode, header.user, header.append) == ("/f", 0o600, "", True)
    with pytest.raises(SandboxException):
        files.write_data(None)
    assert files.entry({"path": "/p", "data": b"d"}) == WriteEntry("/p", b"d")


def test_entries_and_reads_as_models() -> None:
    info = files_pb2.FileInfo(name="a", path="/a", type=files_pb2.FILE_TYPE_DIRECTORY, mode=0o755)
    entry = files.entry_info(info)
    assert (entry.type.value, entry.permissions) == ("dir", "drwxr-xr-x")
    written = files.written(files_pb2.WriteFileResponse(file=info, bytes_written=3))
    assert (written.path, written.size) == ("/a", 3)
    assert files.content(bytearray(b"\xffok"), "bytes") == bytearray(b"\xffok")
    assert files.content(bytearray(b"\xffok"), "text") == "\ufffdok"
    event = files.watch_event(files_pb2.WatchEvent(path="/w/d/x", type=files_pb2.WATCH_EVENT_TYPE_CREATE), "/w")
    assert (event.name, event.type.value) == (os.path.join("d", "x"), "create")


# -- code and ingress ----------------------------------------------------------


def test_run_code_arguments_are_checked_before_any_call() -> None:
    with pytest.raises(InvalidArgumentException) as both:
        code.run_request("s", "1", "python", "ctx", None, None)
    assert both.value.field == "language"
    with pytest.raises(InvalidArgumentException) as envs:
        code.run_request("s", "1", None, None, {"A": "1"}, None)
    assert envs.value.field == "envs"
    request = code.run_request("s", "1", None, Context(id="c", language="bash"), None, None)
    assert (request.language, request.context_id, request.timeout_secs) == ("bash", "c", code.DEFAULT_TIMEOUT)
    assert not code.run_request("s", "1", None, None, None, 0).HasField("timeout_secs")
    assert code.context_request("s", "c").context_id == "c"


def test_a_cell_s_results_and_its_timeout() -> None:
    result = code_pb2.CodeResult(is_main_result=True)
    result.items.add(mime_type="text/plain", data=b"42")
    result.items.add(mime_type="image/png", data=b"\x89PNG")
    result.items.add(mime_type="application/json", data=b'{"a": 1}')
    result.items.add(mime_type="application/x-odd", data=b"\xff")
    made = code.code_result(result)
    assert (made.text, made.png, made.json, made.extra) == ("42", "iVBORw==", {"a": 1}, {"application/x-odd": "/w=="})
    cell = CellOutput()
    told: List[Any] = [cell.feed(code_pb2.CodeEvent(stdout=b"hi\n")), cell.feed(code_pb2.CodeEvent(result=result))]
    assert isinstance(told[0], OutputMessage) and told[0].line == "hi\n" and isinstance(told[1], Result)
    cell.feed(code_pb2.CodeEvent(done=code_pb2.CellDone(timed_out=True, execution_count=4)))
    with pytest.raises(TimeoutException) as late:
        cell.finish(None)
    assert late.value.execution.execution_count == 4  # type: ignore[attr-defined]


def test_guest_ports_are_checked_and_exposed() -> None:
    assert ingress.get_host_request("s", 8000).port == 8000
    with pytest.raises(InvalidArgumentException):
        ingress.get_host_request("s", 0)
    exposed = ingress.exposed_port(8000, ingress_pb2.GetHostResponse(host="h", token="t"))
    assert (exposed.port, exposed.host, exposed.token) == (8000, "h", "t")



# -- snapshots ---------------------------------------------------------------


def test_a_snapshot_s_mode_is_full_or_refused() -> None:
    snapshots.check_mode(None)
    snapshots.check_mode("full")
    with pytest.raises(InvalidArgumentException, match="memory") as files_only:
        snapshots.check_mode("filesystem")
    assert files_only.value.field == "mode"
    assert snapshots.snapshot_request("s", None).name == ""  # the server names it


def test_a_create_whose_template_is_missing_is_tried_as_a_snapshot() -> None:
    request = lifecycle.create_request(template="snap", memory_mb=512)
    missing = NotFoundException("no template snap", reason="NOT_FOUND", code="NOT_FOUND")
    retry = snapshots.as_snapshot(request, missing)
    assert retry is not None
    assert (retry.snapshot, retry.template, retry.image, retry.memory_mib) == ("snap", "", "", 512)
    assert request.template == "snap"  # the caller's request is left as it was
    gone = airlock.SandboxNotFoundException("gone", reason="SANDBOX_NOT_FOUND")
    assert snapshots.as_snapshot(request, gone) is None
    assert snapshots.as_snapshot(lifecycle.create_request(image="x"), missing) is None
    assert snapshots.as_snapshot(lifecycle.create_request(template="t", snapshot="s"), missing) is None
    neither = snapshots.neither("snap", missing)
    assert "nor is there a snapshot" in neither.message and neither.field == "template"


def test_a_create_from_a_snapshot_takes_no_default_image(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(lifecycle.IMAGE_ENV, "e2b-code-base")
    assert lifecycle.create_request(snapshot="s").image == ""
    assert lifecycle.create_request(snapshot="s").snapshot == "s"
    assert lifecycle.create_request().image == "e2b-code-base"


def test_snapshot_pages_cut_the_whole_answer() -> None:
    answer = sandboxes_pb2.ListSnapshotsResponse(
        snapshots=[sandboxes_pb2.SnapshotInfo(name=n, id="i" * 64, created_at_ms=1000) for n in "abc"]
    )
    pages = snapshots.SnapshotPages("sandbox-x", None, 2, None)
    assert pages.request.sandbox_id == "sandbox-x" and pages._needs_fetch()
    pages._fetched(answer)
    assert [s.snapshot_id for s in pages._page()] == ["a", "b"] and pages.next_token == "2"
    assert [s.names for s in pages._page()] == [["c"]] and not pages.has_next and pages.next_token is None
    assert pages._page() == []
    later = snapshots.SnapshotPages(None, None, None, "1")
    later._fetched(answer)
    assert [s.snapshot_id for s in later._page()] == ["b", "c"]
    named = snapshots.SnapshotPages(None, "b", None, None)
    named._fetched(answer)
    assert [s.content_id for s in named._page()] == ["i" * 64]
    with pytest.raises(InvalidArgumentException):
        snapshots.SnapshotPages(None, None, None, "not-a-token")
    with pytest.raises(TypeError, match="next_items"):
        len(pages)


# -- templates ---------------------------------------------------------------


def test_the_builder_writes_the_template_file() -> None:
    built = (
        Template(file_context_path="/ctx")
        .from_base_image()
        .copy(["a b", "c"], "/srv/", user="user", mode=0o755)
        .run_cmd(["echo 1", "echo 2"])
        .run_cmd("whoami", user="user")
        .set_envs({"A": "x y", "B": "$HOME"})
        .set_workdir("/srv")
        .set_user("app")
        .run_cmd("id", user="root")
        .run_cmd("cat <<EOF\nhi\nEOF")
        .set_start_cmd("python3 -m http.server 8000", wait_for_port(8000))
    )
    assert built.to_dockerfile() == (
        "FROM default\n"
        'COPY --chown=user --chmod=0755 "a b" c /srv/\n'
        "RUN echo 1 && echo 2\n"
        "USER user\nRUN whoami\nUSER root\n"
        'ENV A="x y" B="\\$HOME"\n'
        "WORKDIR /srv\n"
        "USER app\n"
        "USER root\nRUN id\nUSER app\n"
        'RUN ["/bin/sh", "-c", "cat <<EOF\\nhi\\nEOF"]\n'
        "START python3 -m http.server 8000\n"
        "READY port 8000\n"
    )
    assert Template.to_dockerfile(built) == built.to_dockerfile()  # E2B's static form
    assert built.file_context_path == "/ctx"
    checks = [wait_for_file("/tmp/r"), wait_for_url("http://localhost:8000/"), "test -e /x", wait_for_timeout(1500)]
    lines = [Template().from_image("x").set_ready_cmd(c).to_dockerfile().splitlines()[-1] for c in checks]
    assert lines == ["READY file /tmp/r", "READY url http://localhost:8000/", "READY cmd test -e /x", "READY cmd sleep 2"]


def test_the_builder_refuses_what_airlock_cannot_build() -> None:
    with pytest.raises(InvalidArgumentException, match="no base"):
        Template().to_dockerfile()
    with pytest.raises(InvalidArgumentException, match="one base"):
        Template().from_base_image().from_image("x")
    with pytest.raises(InvalidArgumentException, match="registry"):
        Template().from_image("private/x", username="u", password="p")
    with pytest.raises(InvalidArgumentException, match="cache"):
        Template().skip_cache()
    for bad in ({"tags": ["v1"]}, {"skip_cache": True}, {"min_free_disk_mb": 1024}):
        with pytest.raises(InvalidArgumentException):
            templates.check_build(bad.get("tags"), bool(bad.get("skip_cache")), bad.get("min_free_disk_mb"))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentException, match="tags"):
        templates.build_name("web:v1", None)
    assert templates.build_name(None, "web") == "web"  # E2B's older alias=


def test_from_dockerfile_reads_a_path_or_takes_the_text(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text("FROM default\nRUN true\n")
    assert Template(file_context_path=tmp_path).from_dockerfile("Dockerfile").to_dockerfile() == "FROM default\nRUN true\n"
    text = Template().from_dockerfile("FROM x\nCOPY a /a\n").set_workdir("/a").to_dockerfile()
    assert text == "FROM x\nCOPY a /a\nWORKDIR /a\n"


def test_the_context_is_sent_less_what_is_ignored(tmp_path: Path) -> None:
    for name in ("app.py", "sub/a.txt", "node_modules/x/y.js", "node_modules/x/keep.js", "build/out.o",
                 "logs/x.log", "keep.log", "drop.log", "deep/a/b/c.tmp"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(name)
    (tmp_path / "link").symlink_to("keep.log")
    (tmp_path / ".dockerignore").write_text("# comment\nnode_modules\nbuild\n*.log\n!keep.log\n!node_modules/x/keep.js\n")
    template = Template(file_context_path=tmp_path, file_ignore_patterns=["**/*.tmp"]).from_base_image()
    assert template._packer(template.to_dockerfile()) is None  # nothing copied, nothing sent
    template.copy(".", "/srv/")
    packer = template._packer(template.to_dockerfile())
    assert packer is not None
    with tarfile.open(fileobj=io.BytesIO(b"".join(packer))) as tar:
        members = {m.name: m for m in tar.getmembers()}
    # As Docker's: a pattern without ** matches from the context's top only;
    # an ignored directory is walked for what an exception brings back, and
    # left out when nothing is (build/, deep/a/b/).
    assert sorted(members) == [
        ".dockerignore", "app.py", "deep", "deep/a", "deep/a/b", "keep.log", "link", "logs", "logs/x.log",
        "node_modules", "node_modules/x", "node_modules/x/keep.js", "sub", "sub/a.txt",
    ]
    assert members["link"].issym() and members["link"].linkname == "keep.log"
    assert all(m.uid == 0 and m.uname == "" for m in members.values())
    patterns = templates._ignore_patterns(str(tmp_path), [])
    assert templates.ignored("node_modules/x/y.js", patterns) and not templates.ignored("keep.log", patterns)


def test_build_events_become_e2b_log_entries() -> None:
    logs = templates.BuildLogs()
    step = templates_pb2.BuildTemplateEvent(step=templates_pb2.BuildStep(number=1, steps=2, instruction="RUN x", cached=True))
    [entry] = logs.take(step)
    assert (entry.kind, entry.step, entry.cached, entry.message) == ("step", 1, True, "[1/2] RUN x (cached)")
    out = [
        templates_pb2.BuildTemplateEvent(log=templates_pb2.BuildLog(step=2, data=b"one\ntw")),
        templates_pb2.BuildTemplateEvent(log=templates_pb2.BuildLog(step=2, data=b"o\r\nthr", stderr=True)),
    ]
    lines = [e for event in out for e in logs.take(event)]
    assert [(e.message, e.stream, e.step) for e in lines] == [("one", "stdout", 2), ("o", "stderr", 2)]
    lines = logs.take(out[0])  # more stdout: "tw" and "one" make a line, "tw" waits
    assert [e.message for e in lines] == ["twone"]
    phase = templates_pb2.BuildTemplateEvent(phase=templates_pb2.BuildPhase(phase="saving the snapshot"))
    flushed = logs.take(phase)  # what waits for its newline goes first
    assert sorted(e.message for e in flushed[:-1]) == ["thr", "tw"]
    assert flushed[-1].kind == "phase" and flushed[-1].message == "saving the snapshot"
    done = templates_pb2.BuildTemplateEvent(done=sandboxes_pb2.TemplateInfo(name="web", memory_mib=512, vcpus=1, image="default"))
    assert logs.take(done) == [] and logs.done is not None
    assert (logs.done.template_id, logs.done.memory_mb, logs.done.cpu_count) == ("web", 512, 1)
    assert str(entry).endswith("[info] [1/2] RUN x (cached)")


def test_a_failed_step_is_e2b_s_build_exception() -> None:
    failed = templates.build_error(SandboxException("step 2 exited 1", reason="GUEST_REFUSED", code="FAILED_PRECONDITION"))
    assert isinstance(failed, BuildException) and failed.reason == "GUEST_REFUSED"
    quota = RateLimitException("quota", reason="QUOTA_EXCEEDED")
    assert templates.build_error(quota) is quota
