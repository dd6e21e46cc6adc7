"""Templates as data, in E2B's names: :class:`TemplateInfo` (what a build
answers and ``Template.list()`` lists), :class:`LogEntry` (what a build's
``on_build_logs`` gets, with :class:`LogEntryStart` and
:class:`LogEntryEnd` around the build), and :class:`ReadyCmd` with the
``wait_for_*`` helpers that say when a template's ``START`` program is
ready."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Optional

from typing_extensions import Literal

LogEntryLevel = Literal["debug", "info", "warn", "error"]

#: What a :class:`LogEntry` reports: the build's start and end, a step
#: beginning, a line a step printed, a phase after the steps.
LogEntryKind = Literal["start", "step", "output", "phase", "end"]


@dataclass
class TemplateInfo:
    """A named template: built through the API (``Template.build``), or
    the server's own (``airlock template build`` on its machine). The first
    fields are E2B's ``BuildInfo``'s; the rest are Airlock's."""

    #: Its name: what ``Sandbox.create(template)`` takes (E2B's id).
    template_id: str
    name: str
    #: Bytes it takes on the server's disk.
    size_bytes: int
    created_at: datetime
    #: The image it was built ``FROM``.
    image: str
    #: The key that built it ("" for the server's own, which every key may
    #: start from, and for the server machine's owner).
    owner: str
    #: Its sandboxes' size.
    memory_mb: int
    cpu_count: int

    @property
    def alias(self) -> str:
        """E2B's older name of :attr:`name`."""
        return self.name


@dataclass
class LogEntry:
    """One thing a build reported, as E2B's ``on_build_logs`` gets it
    (``timestamp``, ``level``, ``message``); ``str()`` of it is E2B's line.
    Airlock adds what it is (``kind``), its step, the stream a line came
    from and whether a step came from the cache."""

    timestamp: datetime
    level: LogEntryLevel
    message: str
    kind: LogEntryKind = "output"
    #: The step (1-based) it belongs to; ``None`` for the build's own.
    step: Optional[int] = None
    #: For ``kind="output"``: "stdout" or "stderr".
    stream: Optional[str] = None
    #: For ``kind="step"``: its result came from the cache (it does not run).
    cached: bool = False

    def __str__(self) -> str:
        return f"[{self.timestamp.isoformat()}] [{self.level}] {self.message}"


@dataclass
class LogEntryStart(LogEntry):
    """The first entry of a build (E2B's)."""

    level: LogEntryLevel = field(default="debug", init=False)
    kind: LogEntryKind = field(default="start", init=False)


@dataclass
class LogEntryEnd(LogEntry):
    """The last entry of a build, whether it succeeded or not (E2B's)."""

    level: LogEntryLevel = field(default="debug", init=False)
    kind: LogEntryKind = field(default="end", init=False)


@dataclass(frozen=True)
class ReadyCmd:
    """When a template's ``START`` program is ready, as the template file's
    ``READY`` line says it (``port 8000``, ``file /tmp/ready``,
    ``url http://...``, ``cmd COMMAND``). E2B's ``wait_for_*`` helpers make
    one; a plain string given where one is expected is a command that exits
    0 once ready."""

    check: str

    def get_cmd(self) -> str:
        """The ``READY`` line's check (E2B's method name)."""
        return self.check


def wait_for_port(port: int) -> ReadyCmd:
    """Ready once something listens on TCP ``port`` in the guest."""
    return ReadyCmd(f"port {int(port)}")


def wait_for_url(url: str, status_code: int = 200) -> ReadyCmd:
    """Ready once ``url`` (an ``http://`` URL the guest serves) answers.
    Airlock's check takes any 2xx status; another ``status_code`` is
    checked with curl in the guest."""
    if 200 <= status_code < 300:
        return ReadyCmd(f"url {url}")
    return ReadyCmd(
        f'cmd [ "$(curl -s -o /dev/null -w %{{http_code}} {url})" = "{int(status_code)}" ]'
    )


def wait_for_file(filename: str) -> ReadyCmd:
    """Ready once ``filename`` exists in the guest."""
    return ReadyCmd(f"file {filename}")


def wait_for_process(process_name: str) -> ReadyCmd:
    """Ready once a process named ``process_name`` runs (``pgrep``)."""
    return ReadyCmd(f"cmd pgrep {process_name} >/dev/null")


def wait_for_timeout(timeout: int) -> ReadyCmd:
    """Ready after ``timeout`` milliseconds (at least one second)."""
    seconds = max(1, (int(timeout) + 999) // 1000)
    return ReadyCmd(f"cmd sleep {seconds}")
