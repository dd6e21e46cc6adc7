"""What issue #52 found E2B code relying on, decided by the SDK alone (no
server): E2B's names, refusals that say what to do, and the translations
of E2B's shapes (a write's watch events, tracebacks, a plain value's
result, IPython's shell lines, relative paths, the shell). Milliseconds."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

import airlock
from airlock import (
    ALL_TRAFFIC,
    AsyncSandbox,
    ConnectionConfig,
    FileNotFoundException,
    FilesystemEventType,
    InvalidArgumentException,
    NotFoundException,
    Sandbox,
    SandboxNotFoundException,
)
from airlock.api.v1 import code_pb2, files_pb2, sandboxes_pb2
from airlock.exceptions import SandboxException
from airlock.sandbox import code, commands, files, lifecycle


class _Status:
    def __init__(self, code_name: str, reason: str) -> None:
        self._code, self._reason = code_name, reason

    def code(self) -> object:
        return type("C", (), {"name": self._code})()

    def details(self) -> str:
        return "nope"

    def trailing_metadata(self) -> object:
        return (("airlock-error", self._reason),)


def test_e2b_exception_names_by_reason() -> None:
    missing_file = airlock.exceptions.from_rpc_error(_Status("NOT_FOUND", "GUEST_NOT_FOUND"))
    assert isinstance(missing_file, FileNotFoundException) and isinstance(missing_file, NotFoundException)
    for reason in ("SANDBOX_NOT_FOUND", "SANDBOX_ENDED"):
        gone = airlock.exceptions.from_rpc_error(_Status("NOT_FOUND", reason))
        assert isinstance(gone, SandboxNotFoundException), reason
    other = airlock.exceptions.from_rpc_error(_Status("NOT_FOUND", "NOT_FOUND"))
    assert type(other) is NotFoundException


def test_names_e2b_code_imports() -> None:
    assert ALL_TRAFFIC == "0.0.0.0/0"
    for cls in (Sandbox, AsyncSandbox):
        assert callable(cls.beta_pause) and callable(cls.connect)
    ConnectionConfig.set_integration("my-agent/1.0")
    assert ConnectionConfig.integration() == "my-agent/1.0"
    ConnectionConfig.set_integration(None)
    assert ConnectionConfig.integration() is None


def test_unknown_keyword_arguments_are_refused() -> None:
    with pytest.raises(TypeError, match="no_such_kw"):
        Sandbox(no_such_kw=1)
    with pytest.raises(TypeError, match="domain.*host="):
        Sandbox.create(domain="e2b.app")
    with pytest.raises(TypeError, match="no_such_kw"):
        Sandbox.kill("sandbox-x", no_such_kw=1)
    with pytest.raises(TypeError, match="no_such_kw"):
        asyncio.run(AsyncSandbox.create(no_such_kw=1))
    with pytest.raises(TypeError, match="no_such_kw"):
        AsyncSandbox.list(no_such_kw=1)
    create, opts = lifecycle.split_create("Sandbox()", {"image": "default", "host": None})
    assert create == {"image": "default"} and opts == {"host": None}


def test_network_as_e2b_writes_it() -> None:
    request = lifecycle.create_request(network={"allow_out": ["pypi.org"], "deny_out": [ALL_TRAFFIC]})
    assert list(request.allow_net) == ["pypi.org"]
    with pytest.raises(InvalidArgumentException, match="allow_out"):
        lifecycle.create_request(network={"deny_out": ["evil.example"]})
    with pytest.raises(InvalidArgumentException, match="rule by rule"):
        lifecycle.create_request(network={"allow_out": [ALL_TRAFFIC]})
    with pytest.raises(InvalidArgumentException, match="allow_net"):
        lifecycle.create_request(allow_internet_access=True)


def test_defaults_as_e2b() -> None:
    assert lifecycle.create_request().timeout_secs == 300
    assert lifecycle.create_request(timeout=0).timeout_secs == 0
    listed = lifecycle.list_request(None, None, None, None, None)
    assert sandboxes_pb2.SANDBOX_STATE_ENDED not in listed.states and len(listed.states) == 3
    ended = lifecycle.list_request(None, "ended", None, None, None)
    assert list(ended.states) == [sandboxes_pb2.SANDBOX_STATE_ENDED]
    info = lifecycle.sandbox_info(sandboxes_pb2.SandboxInfo(sandbox_id="s", image="default"))
    assert info.template_id == "default"


def test_paginator_is_not_a_list_and_says_so() -> None:
    pages = lifecycle.Pages(sandboxes_pb2.ListSandboxesRequest())
    assert pages
    with pytest.raises(TypeError, match="next_items"):
        len(pages)
    with pytest.raises(TypeError, match="has_next"):
        pages[0]


def test_commands_run_with_bash_login_or_sh() -> None:
    argv = commands.shell("[[ 1 == 1 ]] && echo yes")
    assert commands.shown_argv(argv) == ["/bin/bash", "-l", "-c", "[[ 1 == 1 ]] && echo yes"]
    # The wrapper itself, on this machine's sh: bash where there is one.
    out = subprocess.run(argv, capture_output=True, text=True, check=True)
    assert out.stdout == "yes\n"


def test_kill_of_an_exited_program_is_false() -> None:
    refused = SandboxException("pid 85 has exited", reason="GUEST_REFUSED")
    assert commands.kill_missed(refused)
    assert not commands.kill_missed(SandboxException("other", reason="GUEST_REFUSED"))
    assert not commands.kill_missed(SandboxNotFoundException("x", reason="SANDBOX_NOT_FOUND"))


def _event(path: str, kind: int, cookie: int = 0) -> files_pb2.WatchEvent:
    return files_pb2.WatchEvent(path=path, type=kind, cookie=cookie)


def test_a_watched_write_reports_the_file_written() -> None:
    names = files.WatchNames("/root")
    tmp = "/root/.my-file.airlock-813422522-0.tmp"
    seen = []
    for raw in (
        _event(tmp, files_pb2.WATCH_EVENT_TYPE_CREATE),
        _event(tmp, files_pb2.WATCH_EVENT_TYPE_WRITE),
        _event(tmp, files_pb2.WATCH_EVENT_TYPE_RENAME_FROM, 7),
        _event("/root/my-file", files_pb2.WATCH_EVENT_TYPE_RENAME_TO, 7),
        _event("/root/a", files_pb2.WATCH_EVENT_TYPE_RENAME_TO, 9),
    ):
        seen += [(e.name, e.type) for e in names.events(raw)]
    assert seen == [
        ("my-file", FilesystemEventType.CREATE),
        ("my-file", FilesystemEventType.WRITE),
        ("a", FilesystemEventType.RENAME),
    ]


def test_relative_paths_from_home() -> None:
    assert files.guest_path("data.txt") == "/root/data.txt"
    assert files.guest_path("a/../b", "user") == "/home/user/b"
    assert files.guest_path("/etc/hosts", "user") == "/etc/hosts"


def test_traceback_lines_joined_once() -> None:
    error = code.execution_error(
        code_pb2.CodeError(
            name="ZeroDivisionError",
            value="division by zero",
            traceback=["Traceback (most recent call last):\n", '  File "<cell-2>", line 1\n', "ZeroDivisionError\n"],
        )
    )
    assert error.traceback == 'Traceback (most recent call last):\n  File "<cell-2>", line 1\nZeroDivisionError'


def _result(**items: bytes) -> code_pb2.CodeResult:
    out = code_pb2.CodeResult(is_main_result=True)
    for mime, data in items.items():
        out.items.append(code_pb2.MimeItem(mime_type=mime.replace("_", "/"), data=data))
    return out


def test_a_plain_value_is_text_not_json() -> None:
    forty_two = code.code_result(_result(text_plain=b"42", application_json=b"42"))
    assert forty_two.text == "42" and forty_two.json is None
    own = code.code_result(_result(text_plain=b"<Thing>", application_json=b'{"a": 1}'))
    assert own.json == {"a": 1}


def test_shell_magics_run_in_the_shell() -> None:
    cell = "import os\n!echo hi && echo there\n%pip --version\nif True:\n    !echo indented\nx = 1 != 2"
    translated = code.shell_magics(cell)
    assert "x = 1 != 2" in translated and "import os" in translated
    out = subprocess.run([sys.executable, "-c", translated], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("hi\nthere\npip ") and out.stdout.endswith("indented\n")
    request = code.run_request("s", "!ls", "bash", None, None, None)
    assert request.code == "!ls"


def test_hints_for_what_an_image_lacks() -> None:
    from airlock.exceptions import guest_hint, missing_tool_hint

    assert "no pip" in missing_tool_hint(127, "sh: 1: pip: not found\n")
    assert "python3" in missing_tool_hint(127, "bash: line 1: python: command not found\n")
    assert "--target" in missing_tool_hint(1, "error: externally-managed-environment\n")
    assert missing_tool_hint(1, "pip: not found") == "" and missing_tool_hint(127, "make: not found") == ""
    assert "leave user= out" in guest_hint("Process.Start: user not found in the guest's /etc/passwd: user")
    assert "/root" in guest_hint("Process.Start: working directory not found: /home/user")
    assert guest_hint("cannot open /x") == ""
