"""Templates built through the API (the ``Templates`` service, and
``Sandboxes.ListTemplates``), everything but the calls:

- :class:`TemplateBase`, E2B's template builder (``from_image``,
  ``from_dockerfile``, ``copy``, ``run_cmd``, ``set_envs``,
  ``set_workdir``, ``set_user``, ``set_start_cmd``, ``set_ready_cmd``),
  which writes Airlock's template file (the Dockerfile subset of the
  repository's docs/templates.md) and knows its context directory;
- the context: the directory as a tar stream, less what
  ``file_ignore_patterns`` and its ``.dockerignore`` leave out, sent only
  when the file copies something;
- the build's header, its events as E2B's
  :class:`~airlock.models.template.LogEntry` items (a step's output in
  whole lines), and the answers as
  :class:`~airlock.models.template.TemplateInfo`.
"""

from __future__ import annotations

import json
import os
import re
from datetime import datetime, timezone
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

from typing_extensions import Self

from ..api.v1 import sandboxes_pb2, templates_pb2
from ..exceptions import BuildException, InvalidArgumentException, SandboxException
from ..models.template import LogEntry, ReadyCmd, TemplateInfo
from .clock import from_ms
from .dual import either
from .limits import CHUNK_BYTES
from .tar import Packer

#: The image ``from_base_image`` names: the server's default (E2B's is
#: ``e2bdev/base``).
BASE_IMAGE = "default"

_SKIP_CACHE = (
    "skip_cache: Airlock's build cache is keyed by each step's inputs (its instruction, the "
    "ENV, WORKDIR, USER and ARG values in force, the copied files' contents), so a step reruns "
    "when any of them changes; change the step to run it again"
)

#: Where a template file's lines begin a copy from the context.
_COPIES = re.compile(r"^\s*(COPY|ADD)\s", re.IGNORECASE | re.MULTILINE)


def _word(text: str) -> str:
    """`text` as one word of a template file line (quoted when it must be)."""
    if text and not re.search(r"[\s\"'\\$#]", text):
        return text
    escaped = re.sub(r'(["\\$])', r"\\\1", text)
    return f'"{escaped}"'


def _program(keyword: str, command: str) -> str:
    """A ``RUN`` or ``START`` line: the shell form, or for a command the
    shell form cannot carry (several lines, a leading ``[`` or ``--``) the
    exec form running it with ``/bin/sh -c``."""
    if "\n" in command or command.lstrip().startswith(("[", "--")):
        return f"{keyword} {json.dumps(['/bin/sh', '-c', command])}"
    return f"{keyword} {command}"


def _ready(ready_cmd: Union[str, ReadyCmd]) -> str:
    check = ready_cmd.check if isinstance(ready_cmd, ReadyCmd) else f"cmd {ready_cmd}"
    if "\n" in check:
        raise InvalidArgumentException(
            "ready_cmd: one line (a READY check is a single command); put a longer check in a "
            "script the template COPYs and name the script",
            field="ready_cmd",
        )
    return f"READY {check}"


def _read_dockerfile(content_or_path: str, context: str) -> str:
    """E2B's ``from_dockerfile`` argument: a file's path (from the current
    directory, else the context directory) or the file's text."""
    if "\n" not in content_or_path:
        for candidate in (content_or_path, os.path.join(context, content_or_path)):
            if os.path.isfile(candidate):
                with open(candidate, encoding="utf-8") as file:
                    return file.read()
    return content_or_path


class TemplateBase:
    """A template to build: E2B's builder, writing Airlock's template file
    (``to_dockerfile()`` shows it). ``file_context_path`` is the directory
    ``copy`` and the file's ``COPY`` read from (default: the current
    directory; E2B's: the calling file's); ``file_ignore_patterns``, as the
    context's own ``.dockerignore``, leave files out of what is sent
    (``*``, ``?``, ``**``, ``!`` exceptions). Every builder call returns the
    template, so calls chain as E2B's do; pass it to ``Template.build``."""

    def __init__(
        self,
        file_context_path: Optional[Union[str, "os.PathLike[str]"]] = None,
        file_ignore_patterns: Optional[Sequence[str]] = None,
    ) -> None:
        self._context = os.path.abspath(os.fspath(file_context_path or os.getcwd()))
        self._ignore = list(file_ignore_patterns or [])
        #: The file's text so far: a FROM line or a whole file, then lines.
        self._head: Optional[str] = None
        self._lines: List[str] = []
        self._user: Optional[str] = None
        self._start: Optional[str] = None
        self._ready_line: Optional[str] = None

    # -- the base --------------------------------------------------------

    def _set_head(self, head: str) -> Self:
        if self._head is not None:
            raise InvalidArgumentException(
                "a template has one base: from_image, from_base_image or from_dockerfile, once",
                field="file",
            )
        self._head = head
        return self

    def from_image(self, image: str, username: Optional[str] = None, password: Optional[str] = None) -> Self:
        """Starts from a root image of the server's store by name (``airlock
        image ls``), ``debian:bookworm`` (built on the server), or a file in
        the context (``./rootfs.tar``). Airlock pulls from no registry, so
        ``username``/``password`` are refused."""
        if username is not None or password is not None:
            raise InvalidArgumentException(
                "from_image(username=, password=): Airlock pulls from no registry; put the "
                "image on the server (airlock image import) or into the context and name it",
                field="file",
            )
        return self._set_head(f"FROM {_word(image)}")

    def from_base_image(self) -> Self:
        """Starts from the server's ``default`` image (Debian with Python),
        as E2B's starts from its base image."""
        return self.from_image(BASE_IMAGE)

    def from_dockerfile(self, dockerfile_content_or_path: str) -> Self:
        """Starts from a template file (Airlock's Dockerfile subset, see the
        repository's docs/templates.md): its path, or its text. Builder
        calls after it add lines to it."""
        return self._set_head(_read_dockerfile(dockerfile_content_or_path, self._context).rstrip("\n"))

    # -- steps -----------------------------------------------------------

    def _add(self, line: str) -> Self:
        self._lines.append(line)
        return self

    def copy(
        self,
        src: Union[str, "os.PathLike[str]", Sequence[Union[str, "os.PathLike[str]"]]],
        dest: Union[str, "os.PathLike[str]"],
        force_upload: Optional[bool] = None,
        user: Optional[str] = None,
        mode: Optional[int] = None,
    ) -> Self:
        """Copies files or directories of the context (paths relative to
        it) to ``dest`` in the image; ``user`` owns them, ``mode`` (an int,
        ``0o755``) their permissions. ``force_upload`` changes nothing: the
        context is sent whole with every build, and each step's cache key
        holds the copied files' contents."""
        sources = [src] if isinstance(src, (str, os.PathLike)) else list(src)
        flags = []
        if user:
            flags.append(f"--chown={_word(user)}")
        if mode is not None:
            flags.append(f"--chmod={mode:04o}")
        words = [*flags, *(_word(os.fspath(s)) for s in sources), _word(os.fspath(dest))]
        return self._add("COPY " + " ".join(words))

    def run_cmd(self, command: Union[str, Sequence[str]], user: Optional[str] = None) -> Self:
        """Runs a shell command in a build VM (several are joined with
        ``&&``, as E2B joins them), as ``user`` if given. No network unless
        ``Template.build(allow_net=[...])`` allows it."""
        line = command if isinstance(command, str) else " && ".join(command)
        if not user:
            return self._add(_program("RUN", line))
        self._add(f"USER {_word(user)}")
        self._add(_program("RUN", line))
        return self._add(f"USER {_word(self._user or 'root')}")

    def set_workdir(self, workdir: Union[str, "os.PathLike[str]"]) -> Self:
        """The directory later steps, the ``START`` program and the
        template's sandboxes start in."""
        return self._add(f"WORKDIR {_word(os.fspath(workdir))}")

    def set_user(self, user: str) -> Self:
        """The user of later steps, of ``START`` and of the template's
        sandboxes."""
        self._user = user
        return self._add(f"USER {_word(user)}")

    def set_envs(self, envs: Mapping[str, str]) -> Self:
        """Environment variables of later steps, of ``START`` and of the
        template's sandboxes."""
        if not envs:
            return self
        return self._add("ENV " + " ".join(f"{key}={_word(str(value))}" for key, value in envs.items()))

    def set_start_cmd(self, start_cmd: str, ready_cmd: Union[str, ReadyCmd]) -> Self:
        """The program started when the template is built and left running
        in its snapshot (every sandbox of it resumes it running), and when it
        is ready: a :class:`~airlock.ReadyCmd` (``wait_for_port(8000)``,
        ``wait_for_file``, ``wait_for_url``, ...) or a command that exits 0
        once it is."""
        self._start = _program("START", start_cmd)
        self._ready_line = _ready(ready_cmd)
        return self

    def set_ready_cmd(self, ready_cmd: Union[str, ReadyCmd]) -> Self:
        """When the ``START`` program is ready (see :meth:`set_start_cmd`)."""
        self._ready_line = _ready(ready_cmd)
        return self

    def skip_cache(self) -> Self:
        """Refused: an Airlock build reruns exactly the steps whose inputs
        changed (the instruction, its ENV/WORKDIR/USER/ARG values, the
        copied files' contents)."""
        raise InvalidArgumentException(_SKIP_CACHE, field="skip_cache")

    # -- the file --------------------------------------------------------

    def _to_dockerfile(self) -> str:
        """The template file this template builds."""
        if self._head is None:
            raise InvalidArgumentException(
                "the template has no base: start it with from_image(NAME), from_base_image() or "
                "from_dockerfile(PATH_OR_TEXT)",
                field="file",
            )
        lines = [self._head, *self._lines]
        lines += [line for line in (self._start, self._ready_line) if line is not None]
        return "\n".join(lines) + "\n"

    @staticmethod
    def _cls_to_dockerfile(template: "TemplateBase") -> str:
        return template._to_dockerfile()

    #: ``template.to_dockerfile()``, or ``Template.to_dockerfile(template)``
    #: as E2B writes it: the template file's text.
    to_dockerfile = either(_to_dockerfile, _cls_to_dockerfile)

    @property
    def file_context_path(self) -> str:
        return self._context

    def _copies(self, text: str) -> bool:
        return _COPIES.search(text) is not None

    def _packer(self, text: str) -> Optional[Packer]:
        """The context's tar stream, when the file copies from it."""
        if not self._copies(text):
            return None
        patterns = _ignore_patterns(self._context, self._ignore)
        return Packer(
            self._context, CHUNK_BYTES, field="file_context_path",
            entries=lambda: context_entries(self._context, patterns),
        )


# -- the context ---------------------------------------------------------------


def _pattern(text: str) -> "re.Pattern[str]":
    """A ``.dockerignore`` pattern as a regular expression over a path
    relative to the context (``/``-separated)."""
    text = text.strip().strip("/")
    out = ""
    i = 0
    while i < len(text):
        c = text[i]
        if text.startswith("**", i):
            i += 2
            if text.startswith("/", i):
                i += 1
                out += "(?:.*/)?"
            else:
                out += ".*"
            continue
        if c == "*":
            out += "[^/]*"
        elif c == "?":
            out += "[^/]"
        elif c == "[":
            end = text.find("]", i + 1)
            if end < 0:
                raise InvalidArgumentException(
                    f"file_ignore_patterns: {text!r} has an unterminated [", field="file_ignore_patterns"
                )
            out += text[i : end + 1]
            i = end + 1
            continue
        else:
            out += re.escape(c)
        i += 1
    return re.compile(out + r"\Z")


IgnorePatterns = List[Tuple[bool, "re.Pattern[str]"]]


def _ignore_patterns(context: str, extra: Sequence[str]) -> IgnorePatterns:
    """The context's ``.dockerignore`` patterns, then ``extra``
    (``file_ignore_patterns``), each ``(exception, pattern)``."""
    lines: List[str] = []
    try:
        with open(os.path.join(context, ".dockerignore"), encoding="utf-8") as file:
            lines = file.read().splitlines()
    except FileNotFoundError:
        pass
    patterns: IgnorePatterns = []
    for line in [*lines, *extra]:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        patterns.append((negate, _pattern(line[1:] if negate else line)))
    return patterns


def ignored(path: str, patterns: IgnorePatterns) -> bool:
    """Whether `path` (relative to the context) is left out, as Docker
    decides: the last pattern that matches it or a directory above it wins."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    result = False
    for negate, pattern in patterns:
        if any(pattern.match(prefix) for prefix in prefixes):
            result = not negate
    return result


def context_entries(context: str, patterns: IgnorePatterns) -> List[str]:
    """What of `context` is sent, depth first, sorted, parents first (paths
    relative to it): files and links the patterns do not leave out, and
    directories they do not leave out, or that hold something sent when an
    exception (``!``) may bring something back inside them, as Docker
    decides. Other kinds (sockets, devices) are not sent: the server takes
    none."""
    exceptions = any(negate for negate, _ in patterns)

    def walk(relative: str) -> List[str]:
        found: List[str] = []
        with os.scandir(os.path.join(context, relative) if relative else context) as listing:
            names = sorted(listing, key=lambda entry: entry.name)
        for entry in names:
            path = f"{relative}/{entry.name}" if relative else entry.name
            left_out = ignored(path, patterns)
            if entry.is_dir(follow_symlinks=False):
                if left_out and not exceptions:
                    continue
                inside = walk(path)
                if not left_out or inside:
                    found += [path, *inside]
            elif not left_out and (entry.is_file(follow_symlinks=False) or entry.is_symlink()):
                found.append(path)
        return found

    return walk("")


# -- the build -----------------------------------------------------------------


def build_name(name: Optional[str], alias: Optional[str]) -> str:
    """E2B's ``name`` (or its older ``alias``); a ``name:tag`` is refused."""
    chosen = name or alias
    if not chosen:
        raise InvalidArgumentException("Template.build: name the template (name=)", field="name")
    if ":" in chosen:
        raise InvalidArgumentException(
            f"name {chosen!r}: Airlock's templates have no tags; a build under a name replaces "
            "the template of that name once it succeeds",
            field="name",
        )
    return chosen


def check_build(tags: Optional[Sequence[str]], skip_cache: bool, min_free_disk_mb: Optional[int]) -> None:
    """E2B's build options Airlock does not have, refused with what to do."""
    if tags:
        raise InvalidArgumentException(
            "tags: Airlock's templates have no tags; build under another name instead",
            field="tags",
        )
    if skip_cache:
        raise InvalidArgumentException(_SKIP_CACHE, field="skip_cache")
    if min_free_disk_mb:
        raise InvalidArgumentException(
            "min_free_disk_mb: a template's sandboxes write into memory (their writable layer is "
            "a tmpfs sized by memory_mb); give memory_mb instead",
            field="min_free_disk_mb",
        )


def build_header(
    name: str,
    file: str,
    *,
    cpu_count: Optional[int],
    memory_mb: Optional[int],
    build_args: Optional[Mapping[str, str]],
    allow_net: Optional[Sequence[str]],
    timeout: Optional[int],
) -> templates_pb2.BuildTemplateRequest:
    header = templates_pb2.BuildTemplateHeader(
        name=name,
        file=file,
        build_args=dict(build_args or {}),
        allow_net=list(allow_net or []),
        memory_mib=memory_mb or 0,
        vcpus=cpu_count or 0,
        timeout_secs=int(timeout or 0),
    )
    return templates_pb2.BuildTemplateRequest(header=header)


def context_request(chunk: bytes) -> templates_pb2.BuildTemplateRequest:
    return templates_pb2.BuildTemplateRequest(context=chunk)


def end_request() -> templates_pb2.BuildTemplateRequest:
    return templates_pb2.BuildTemplateRequest(end=templates_pb2.BuildTemplateEnd())


def build_error(error: SandboxException) -> SandboxException:
    """A build's failure: a step that failed (or a ``START`` that did) is
    E2B's :class:`~airlock.exceptions.BuildException`; the rest as mapped."""
    if error.reason == "GUEST_REFUSED" and not isinstance(error, BuildException):
        return BuildException(error.message, reason=error.reason, code=error.code, field=error.field)
    return error


def template_info(info: sandboxes_pb2.TemplateInfo) -> TemplateInfo:
    return TemplateInfo(
        template_id=info.name,
        name=info.name,
        size_bytes=info.size_bytes,
        created_at=from_ms(info.created_at_ms),
        image=info.image,
        owner=info.owner,
        memory_mb=info.memory_mib,
        cpu_count=info.vcpus,
    )


def _now() -> datetime:
    return datetime.now(timezone.utc)


#: A line a step prints past this many bytes without a newline is passed on
#: as it is.
_LONGEST_LINE = 64 * 1024


class BuildLogs:
    """A build's events as E2B's log entries: each step as it begins
    (``[2/3] COPY app.py /srv/``, ``cached`` when it does not run), its
    output in whole lines, the phases after the steps; the last event's
    template as :attr:`done`."""

    def __init__(self) -> None:
        self._pending: Dict[Tuple[int, bool], bytes] = {}
        self.done: Optional[TemplateInfo] = None

    def take(self, event: templates_pb2.BuildTemplateEvent) -> List[LogEntry]:
        kind = event.WhichOneof("event")
        if kind == "log":
            return self._output(event.log.step, event.log.stderr, bytes(event.log.data))
        entries = self.flush()
        if kind == "step":
            step = event.step
            cached = " (cached)" if step.cached else ""
            entries.append(
                LogEntry(
                    _now(), "info", f"[{step.number}/{step.steps}] {step.instruction}{cached}",
                    kind="step", step=step.number, cached=step.cached,
                )
            )
        elif kind == "phase":
            entries.append(LogEntry(_now(), "info", event.phase.phase, kind="phase"))
        elif kind == "done":
            self.done = template_info(event.done)
        return entries

    def _output(self, step: int, stderr: bool, data: bytes) -> List[LogEntry]:
        key = (step, stderr)
        buffered = self._pending.pop(key, b"") + data
        *lines, rest = buffered.split(b"\n")
        if len(rest) > _LONGEST_LINE:
            lines.append(rest)
            rest = b""
        if rest:
            self._pending[key] = rest
        return [self._line(step, stderr, line) for line in lines]

    def _line(self, step: int, stderr: bool, line: bytes) -> LogEntry:
        text = line.decode("utf-8", errors="replace").rstrip("\r")
        return LogEntry(_now(), "info", text, kind="output", step=step, stream="stderr" if stderr else "stdout")

    def flush(self) -> List[LogEntry]:
        """What is left of lines without their newline."""
        entries = [self._line(step, stderr, rest) for (step, stderr), rest in self._pending.items()]
        self._pending.clear()
        return entries
