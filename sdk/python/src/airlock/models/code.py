"""Running code as data, as E2B's code interpreter names it: an
:class:`Execution` with its :class:`Result` values, :class:`Logs` and
:class:`ExecutionError`; :class:`OutputMessage` for streamed output; a
:class:`Context` to run code in."""

from __future__ import annotations

import json as _json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


@dataclass
class OutputMessage:
    """A piece of a cell's output as it arrived."""

    line: str
    #: When it arrived, in nanoseconds since the Unix epoch.
    timestamp: int
    error: bool = False

    def __str__(self) -> str:
        return self.line


@dataclass
class ExecutionError:
    """The exception a cell raised: its class name, message and
    traceback."""

    name: str
    value: str
    traceback: str

    def to_json(self) -> str:
        return _json.dumps({"name": self.name, "value": self.value, "traceback": self.traceback})


@dataclass
class Result:
    """A value or display of a cell. ``png``, ``jpeg`` and ``pdf`` are
    base64 text (as E2B gives them: ``base64.b64decode(result.png)`` is the
    image); ``json`` is parsed; MIME types without a field of their own are
    in ``extra``."""

    text: Optional[str] = None
    html: Optional[str] = None
    markdown: Optional[str] = None
    svg: Optional[str] = None
    png: Optional[str] = None
    jpeg: Optional[str] = None
    pdf: Optional[str] = None
    latex: Optional[str] = None
    json: Optional[Any] = None
    javascript: Optional[str] = None
    data: Optional[Dict[str, Any]] = None
    #: The value of the cell's last expression (``True``), or something it
    #: displayed (a plot, ``display()``).
    is_main_result: bool = False
    extra: Optional[Dict[str, str]] = None

    def __getitem__(self, item: str) -> Any:
        return getattr(self, item)

    def formats(self) -> List[str]:
        """The formats this result has."""
        names = [
            "text", "html", "markdown", "svg", "png", "jpeg", "pdf", "latex",
            "json", "javascript", "data",
        ]
        found = [name for name in names if getattr(self, name) is not None]
        return found + list(self.extra or {})

    def __repr__(self) -> str:
        if self.text is not None:
            return f"Result({self.text})"
        return "Result(Formats: " + ", ".join(self.formats()) + ")"

    def _repr_html_(self) -> Optional[str]:
        return self.html

    def _repr_markdown_(self) -> Optional[str]:
        return self.markdown

    def _repr_svg_(self) -> Optional[str]:
        return self.svg

    def _repr_png_(self) -> Optional[str]:
        return self.png

    def _repr_jpeg_(self) -> Optional[str]:
        return self.jpeg

    def _repr_latex_(self) -> Optional[str]:
        return self.latex

    def _repr_json_(self) -> Optional[Any]:
        return self.json


@dataclass
class Logs:
    """What a cell printed, in the pieces it arrived in."""

    stdout: List[str] = field(default_factory=list)
    stderr: List[str] = field(default_factory=list)

    def to_json(self) -> str:
        return _json.dumps({"stdout": self.stdout, "stderr": self.stderr})


@dataclass
class Execution:
    """A finished cell."""

    results: List[Result] = field(default_factory=list)
    logs: Logs = field(default_factory=Logs)
    error: Optional[ExecutionError] = None
    execution_count: Optional[int] = None
    #: Airlock: whether it was interrupted, and whether its interpreter
    #: had died (its variables are gone).
    interrupted: bool = False
    context_restarted: bool = False
    duration_ms: int = 0

    @property
    def text(self) -> Optional[str]:
        """The text of the cell's value, if it had one."""
        for result in self.results:
            if result.is_main_result:
                return result.text
        return None

    def to_json(self) -> str:
        return _json.dumps(
            {
                "results": [
                    {name: result[name] for name in result.formats() if name not in (result.extra or {})}
                    for result in self.results
                ],
                "logs": {"stdout": self.logs.stdout, "stderr": self.logs.stderr},
                "error": None if self.error is None else {
                    "name": self.error.name, "value": self.error.value, "traceback": self.error.traceback,
                },
            }
        )


@dataclass
class Context:
    """An interpreter that keeps its variables between cells."""

    id: str
    language: str
    #: Its working directory when this SDK made it (``None`` when unknown).
    cwd: Optional[str] = None
    #: The interpreter's version ("3.11.2"), whether a cell runs in it now,
    #: and its cells since it (re)started.
    language_version: str = ""
    busy: bool = False
    execution_count: int = 0
