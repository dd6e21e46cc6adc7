"""The control plane through the official ``e2b`` SDK (sync and async):
create (its envs reaching a command), kill, list with metadata, connect,
set_timeout, get_info, metrics, pause (and beta_pause) and resume, auto-pause
pausing an idle sandbox and a call resuming it, fork (of a paused sandbox
too), snapshots (a file and a running program in sandboxes created from
one, listed, deleted, another key's not found, mode="filesystem" refused),
and the refusals (another key's sandbox, a wrong key, an unknown template,
bad input)."""

import asyncio
import json
import os
import time
import urllib.error
import urllib.request
import uuid

import pytest
from e2b import (
    AsyncSandbox,
    AuthenticationException,
    NotFoundException,
    Sandbox,
    SandboxException,
    SandboxQuery,
    SandboxState,
)


def _api(method: str, path: str, body: bytes | None = None, key: str | None = None):
    """A raw control-plane call: (status, parsed JSON or None)."""
    request = urllib.request.Request(
        os.environ["E2B_API_URL"] + path,
        data=body,
        method=method,
        headers={"X-API-KEY": key or os.environ["E2B_API_KEY"], "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            raw = answer.read()
            return answer.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as error:
        raw = error.read()
        return error.code, json.loads(raw) if raw else None


def test_create_get_info_and_kill() -> None:
    tag = uuid.uuid4().hex
    sbx = Sandbox.create(timeout=120, metadata={"suite": "e2b", "tag": tag}, envs={"GREETING": "hi"})
    try:
        assert sbx.sandbox_id
        info = sbx.get_info()
        assert info.sandbox_id == sbx.sandbox_id
        assert info.metadata == {"suite": "e2b", "tag": tag}
        assert info.state == "running"
        assert info.template_id == "base"
        assert info.cpu_count >= 1 and info.memory_mb >= 64
        assert info.end_at > info.started_at
        assert Sandbox.get_info(sbx.sandbox_id).sandbox_id == sbx.sandbox_id
        assert sbx.commands.run("echo $GREETING").stdout == "hi\n"
    finally:
        assert sbx.kill() is True
    # Gone: a second kill says so, and the info is not found.
    assert Sandbox.kill(sbx.sandbox_id) is False
    with pytest.raises(NotFoundException):
        Sandbox.get_info(sbx.sandbox_id)


def test_list_filters_by_metadata_and_pages(sandbox: Sandbox) -> None:
    tag = uuid.uuid4().hex
    second = Sandbox.create(timeout=120, metadata={"tag": tag, "n": "2"})
    first = Sandbox.create(timeout=120, metadata={"tag": tag, "n": "1"})
    try:
        found = Sandbox.list(query=SandboxQuery(metadata={"tag": tag})).next_items()
        assert sorted(s.sandbox_id for s in found) == sorted([first.sandbox_id, second.sandbox_id])
        one = Sandbox.list(query=SandboxQuery(metadata={"tag": tag, "n": "1"})).next_items()
        assert [s.sandbox_id for s in one] == [first.sandbox_id]
        # Pages of one, followed by x-next-token.
        paginator = Sandbox.list(query=SandboxQuery(metadata={"tag": tag}), limit=1)
        seen = []
        while paginator.has_next:
            page = paginator.next_items()
            assert len(page) <= 1
            seen += [s.sandbox_id for s in page]
        assert sorted(seen) == sorted([first.sandbox_id, second.sandbox_id])
        # The fixture's sandbox has no tag: not in the filtered list.
        assert sandbox.sandbox_id not in seen
        running = Sandbox.list(query=SandboxQuery(state=[SandboxState.RUNNING], metadata={"tag": tag})).next_items()
        assert len(running) == 2
    finally:
        first.kill()
        second.kill()


def test_connect_and_set_timeout(sandbox: Sandbox) -> None:
    before = sandbox.get_info().end_at
    sandbox.set_timeout(600)
    after = sandbox.get_info().end_at
    assert (after - before).total_seconds() > 300
    same = Sandbox.connect(sandbox.sandbox_id)
    assert same.sandbox_id == sandbox.sandbox_id
    assert same.get_info().state == "running"


def test_metrics(sandbox: Sandbox) -> None:
    # The writable root starts empty: 2 MiB written into it show.
    sandbox.commands.run("head -c 2097152 /dev/urandom > ~/metrics.fill")
    metrics = sandbox.get_metrics()
    assert len(metrics) == 1
    reading = metrics[0]
    assert reading.cpu_count >= 1
    assert reading.mem_total > 0
    assert 0 <= reading.mem_used <= reading.mem_total
    assert 0.0 <= reading.cpu_used_pct <= 100.0
    assert 2 * 1024 * 1024 <= reading.disk_used <= reading.disk_total


def test_pause_and_connect_resumes(sandbox: Sandbox) -> None:
    assert sandbox.pause() is True
    assert sandbox.get_info().state == "paused"
    # Already paused: E2B's 409, which the SDK reads as False.
    assert Sandbox.pause(sandbox.sandbox_id) is False
    listed = Sandbox.list(query=SandboxQuery(state=[SandboxState.PAUSED])).next_items()
    assert sandbox.sandbox_id in [s.sandbox_id for s in listed]
    resumed = Sandbox.connect(sandbox.sandbox_id)
    assert resumed.get_info().state == "running"
    # beta_pause, E2B's older name, pauses as pause does.
    assert resumed.beta_pause() is True
    assert resumed.get_info().state == "paused"
    assert Sandbox.connect(sandbox.sandbox_id).get_info().state == "running"


def test_auto_pause_pauses_an_idle_sandbox_and_a_call_resumes_it() -> None:
    sbx = Sandbox.create(timeout=3, lifecycle={"on_timeout": "pause"})
    try:
        sbx.files.write("/tmp/before.txt", "kept")
        # Paused 3 s after the last call (Airlock's idle policy).
        deadline = time.monotonic() + 30
        while sbx.get_info().state != "paused":
            assert time.monotonic() < deadline, "not paused 30 s after a timeout of 3 s"
            time.sleep(0.5)
        # The next call resumes it, with what it held.
        assert sbx.commands.run("cat /tmp/before.txt").stdout == "kept"
    finally:
        sbx.kill()


def test_pause_and_resume_keep_files_and_a_running_process(sandbox: Sandbox) -> None:
    sandbox.files.write("kept.txt", "written before the pause")
    counter = sandbox.commands.run(
        "i=0; while true; do i=$((i+1)); echo $i > /tmp/count; sleep 0.2; done",
        background=True,
    )
    # Started is not yet counting: wait for its first number.
    sandbox.commands.run("while [ ! -s /tmp/count ]; do sleep 0.05; done", timeout=30)
    assert sandbox.pause() is True
    resumed = Sandbox.connect(sandbox.sandbox_id)
    assert resumed.files.read("kept.txt") == "written before the pause"
    running = [process.pid for process in resumed.commands.list()]
    assert counter.pid in running, running
    before = int(resumed.files.read("/tmp/count"))
    resumed.commands.run("sleep 1")
    assert int(resumed.files.read("/tmp/count")) > before, "the program runs on"
    assert resumed.commands.kill(counter.pid) is True


def test_a_fork_has_the_parents_files(sandbox: Sandbox) -> None:
    sandbox.files.write("/tmp/parent.txt", "the parent's")
    (child,) = sandbox.fork(count=1)
    assert isinstance(child, Sandbox), child
    try:
        assert child.files.read("/tmp/parent.txt") == "the parent's"
        child.files.write("/tmp/parent.txt", "the child's")
        assert sandbox.files.read("/tmp/parent.txt") == "the parent's"
    finally:
        child.kill()


def test_a_paused_sandbox_forks_as_a_running_one_and_stays_paused(sandbox: Sandbox) -> None:
    sandbox.files.write("/tmp/parent.txt", "written before the pause")
    assert sandbox.pause() is True
    (child,) = sandbox.fork(count=1)
    assert isinstance(child, Sandbox), child
    try:
        assert child.sandbox_id != sandbox.sandbox_id
        assert child.get_info().state == "running"
        assert child.files.read("/tmp/parent.txt") == "written before the pause"
        assert Sandbox.get_info(sandbox.sandbox_id).state == "paused"
    finally:
        child.kill()
    resumed = Sandbox.connect(sandbox.sandbox_id)
    assert resumed.files.read("/tmp/parent.txt") == "written before the pause"


def _snapshot_ids(**opts) -> list:
    """Every snapshot listed, page after page."""
    paginator = Sandbox.list_snapshots(**opts)
    ids = []
    while paginator.has_next:
        ids.extend(s.snapshot_id for s in paginator.next_items())
    return ids


def test_a_snapshot_starts_sandboxes_with_its_files_and_running_programs(
    sandbox: Sandbox, other_key: str
) -> None:
    sandbox.files.write("/tmp/snap.txt", "in the snapshot")
    counter = sandbox.commands.run(
        "i=0; while true; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; "
        "sleep 0.2; done",
        background=True,
    )
    sandbox.commands.run("while [ ! -s /tmp/count ]; do sleep 0.05; done", timeout=30)
    name = f"e2b-{uuid.uuid4().hex[:12]}"
    info = sandbox.create_snapshot(name=name)
    assert (info.snapshot_id, info.names) == (name, [name])
    try:
        # The source runs on.
        assert sandbox.get_info().state == "running"
        assert name in _snapshot_ids()
        assert [s.snapshot_id for s in sandbox.list_snapshots().next_items()] == [name]
        assert [s.snapshot_id for s in Sandbox.list_snapshots(name=name).next_items()] == [name]
        # Pages of one, followed by x-next-token.
        unnamed = sandbox.create_snapshot()
        assert unnamed.snapshot_id.startswith("snapshot-")
        paged = []
        paginator = Sandbox.list_snapshots(sandbox_id=sandbox.sandbox_id, limit=1)
        while paginator.has_next:
            page = paginator.next_items()
            assert len(page) <= 1
            paged.extend(s.snapshot_id for s in page)
        assert sorted(paged) == sorted([name, unnamed.snapshot_id])
        assert Sandbox.delete_snapshot(unnamed.snapshot_id) is True

        # A sandbox from it: its own, with the file and the program counting on.
        copy = Sandbox.create(info.snapshot_id, timeout=120)
        try:
            assert copy.sandbox_id != sandbox.sandbox_id
            assert copy.get_info().template_id == name
            assert copy.files.read("/tmp/snap.txt") == "in the snapshot"
            running = [process.pid for process in copy.commands.list()]
            assert counter.pid in running, running
            before = int(copy.files.read("/tmp/count"))
            copy.commands.run("sleep 1")
            assert int(copy.files.read("/tmp/count")) > before, "the program runs on"
            assert copy.commands.run("hostname").stdout.strip() != sandbox.commands.run("hostname").stdout.strip()
        finally:
            copy.kill()

        # Another key's: not listed, not started from, not deleted.
        assert name not in _snapshot_ids(api_key=other_key)
        with pytest.raises(SandboxException) as refused:
            Sandbox.create(name, api_key=other_key)
        assert refused.value.status_code == 404 and name in str(refused.value)
        assert Sandbox.delete_snapshot(name, api_key=other_key) is False
        # Filesystem-only is refused by name: Airlock's snapshots keep memory.
        with pytest.raises(SandboxException) as refused:
            sandbox.create_snapshot(mode="filesystem")
        assert refused.value.status_code == 400 and "filesystem" in str(refused.value)
        # A name taken is a conflict.
        with pytest.raises(SandboxException) as refused:
            sandbox.create_snapshot(name=name)
        assert refused.value.status_code == 409 and name in str(refused.value)
    finally:
        assert Sandbox.delete_snapshot(name) is True
    # Deleted: not listed, gone for a second delete and for a create.
    assert name not in _snapshot_ids()
    assert Sandbox.delete_snapshot(name) is False
    with pytest.raises(SandboxException) as refused:
        Sandbox.create(name)
    assert refused.value.status_code == 404


def test_another_keys_sandbox_is_not_found(sandbox: Sandbox, other_key: str) -> None:
    with pytest.raises(NotFoundException):
        Sandbox.get_info(sandbox.sandbox_id, api_key=other_key)
    with pytest.raises(NotFoundException):
        Sandbox.connect(sandbox.sandbox_id, api_key=other_key)
    with pytest.raises(NotFoundException):
        Sandbox.set_timeout(sandbox.sandbox_id, 30, api_key=other_key)
    assert Sandbox.kill(sandbox.sandbox_id, api_key=other_key) is False
    others = Sandbox.list(api_key=other_key).next_items()
    assert sandbox.sandbox_id not in [s.sandbox_id for s in others]
    # Still there for its own key.
    assert sandbox.get_info().state == "running"


def test_a_wrong_key_is_an_authentication_error() -> None:
    # One refusal only: the front counts failed authentications per address
    # (tests/e2b/README.md).
    with pytest.raises(AuthenticationException):
        Sandbox.create(api_key="e2b_not-a-key-of-this-server")


def test_an_unknown_template_is_refused_by_name() -> None:
    with pytest.raises(SandboxException) as refused:
        Sandbox.create(template="no-such-template-here")
    assert "no-such-template-here" in str(refused.value)


def test_bad_input_gets_e2b_errors_and_the_server_keeps_serving() -> None:
    status, body = _api("POST", "/v2/sandboxes", b"{not json")
    assert status == 400 and body["code"] == 400 and body["message"]
    status, body = _api("POST", "/v2/sandboxes", b'{"templateID": "base", "timeout": "soon"}')
    assert status == 400 and body["message"].startswith("timeout")
    status, body = _api("POST", "/v2/sandboxes", b'{"timeout": 5}')
    assert status == 400 and "templateID" in body["message"]
    status, body = _api("POST", "/v2/sandboxes", b"x" * (2 << 20))
    assert status == 413 and body["code"] == 413
    status, body = _api("GET", "/v2/sandboxes?limit=0")
    assert status == 400 and body["message"].startswith("limit")
    status, body = _api("GET", "/sandboxes/no-such-sandbox")
    assert status == 404 and body["code"] == 404
    status, body = _api("POST", "/sandboxes/no-such-sandbox/snapshots", b"{}")
    assert status == 404
    status, body = _api("DELETE", "/templates/no-such-snapshot")
    assert status == 404 and "no-such-snapshot" in body["message"]
    # Still serving.
    status, listed = _api("GET", "/v2/sandboxes")
    assert status == 200 and isinstance(listed, list)


def test_fork(sandbox: Sandbox) -> None:
    results = sandbox.fork(count=1)
    assert len(results) == 1
    child = results[0]
    assert isinstance(child, Sandbox), child
    try:
        assert child.sandbox_id != sandbox.sandbox_id
        assert child.get_info().state == "running"
    finally:
        child.kill()


def test_async_sdk_lifecycle() -> None:
    async def run() -> None:
        tag = uuid.uuid4().hex
        sbx = await AsyncSandbox.create(timeout=120, metadata={"tag": tag})
        try:
            info = await sbx.get_info()
            assert info.metadata == {"tag": tag}
            await sbx.set_timeout(300)
            found = await AsyncSandbox.list(query=SandboxQuery(metadata={"tag": tag})).next_items()
            assert [s.sandbox_id for s in found] == [sbx.sandbox_id]
            again = await AsyncSandbox.connect(sbx.sandbox_id)
            assert again.sandbox_id == sbx.sandbox_id
            assert len(await sbx.get_metrics()) == 1
        finally:
            assert await sbx.kill() is True

    asyncio.run(run())


def test_templates_list_names_base() -> None:
    status, templates = _api("GET", "/templates")
    assert status == 200
    assert "base" in [t["templateID"] for t in templates]


def _port(sandbox: Sandbox, port: int, headers: dict) -> int:
    """The status of GET / on `port` of `sandbox` through the front's one
    endpoint (E2B_SANDBOX_URL with E2B's two headers)."""
    request = urllib.request.Request(
        os.environ["E2B_SANDBOX_URL"] + "/",
        headers={"E2b-Sandbox-Id": sandbox.sandbox_id, "E2b-Sandbox-Port": str(port), **headers},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code


def test_other_ports_go_through_the_ingress_with_its_token_rules(sandbox: Sandbox) -> None:
    host = sandbox.get_host(8080)
    assert host == f"8080-{sandbox.sandbox_id}.{os.environ.get('E2B_DOMAIN', 'e2b.localhost')}"
    # No token: the ingress refuses.
    assert _port(sandbox, 8080, {}) == 401
    assert _port(sandbox, 8080, {"X-Access-Token": "at_wrong"}) == 401
    # The sandbox's token (E2B's envdAccessToken, or its traffic-token
    # header): let through; nothing listens on 8080, so the guest's 502.
    token = sandbox._envd_access_token
    assert token
    assert _port(sandbox, 8080, {"X-Access-Token": token}) == 502
    assert _port(sandbox, 8080, {"e2b-traffic-access-token": token}) == 502


def test_auto_pause_and_network_rules_are_taken_or_refused_by_name() -> None:
    paused = Sandbox.create(timeout=60, lifecycle={"on_timeout": "pause"})
    try:
        assert paused.get_info().state == "running"
    finally:
        paused.kill()
    ruled = Sandbox.create(timeout=60, network={"allow_out": ["example.com"], "deny_out": ["0.0.0.0/0"]})
    try:
        assert ruled.get_info().allow_internet_access is True
    finally:
        ruled.kill()
    closed = Sandbox.create(timeout=60, allow_internet_access=False)
    try:
        assert closed.get_info().allow_internet_access is False
    finally:
        closed.kill()
    with pytest.raises(SandboxException) as refused:
        Sandbox.create(timeout=60, network={"deny_out": ["10.0.0.0/8"]})
    assert "denyOut" in str(refused.value)


def test_update_network_replaces_the_allow_rules() -> None:
    ruled = Sandbox.create(timeout=60, network={"allow_out": ["example.com"]})
    try:
        ruled.update_network({"allow_out": ["example.org", "10.0.0.0/8:5432"]})
        with pytest.raises(SandboxException) as refused:
            ruled.update_network({"deny_out": ["10.1.0.0/16"]})
        assert "denyOut" in str(refused.value)
    finally:
        ruled.kill()
