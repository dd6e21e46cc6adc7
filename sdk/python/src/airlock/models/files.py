"""Guest files as data: :class:`EntryInfo` and :class:`FileType`,
:class:`WriteInfo`/:class:`WriteEntry`, :class:`FilesystemEvent` from a
watch, and :class:`FileChange` from a change tracker."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Iterator, List, Optional, Union


class FileType(str, enum.Enum):
    """An entry's kind. ``FILE`` and ``DIR`` are E2B's; Airlock also says
    ``SYMLINK`` (not followed) and ``OTHER`` (devices, sockets, fifos)."""

    FILE = "file"
    DIR = "dir"
    SYMLINK = "symlink"
    OTHER = "other"


@dataclass
class EntryInfo:
    """One guest file or directory."""

    name: str
    type: FileType
    path: str
    size: int
    #: Permission bits (0o7777), and as ``ls`` writes them ("rwxr-xr-x").
    mode: int
    permissions: str
    #: The owner's uid and group's gid, as text (Airlock does not look the
    #: names up); ``uid``/``gid`` as numbers.
    owner: str
    group: str
    modified_time: datetime
    symlink_target: Optional[str] = None
    uid: int = 0
    gid: int = 0


@dataclass
class WriteInfo:
    """A file written."""

    name: str
    type: Optional[FileType]
    path: str
    #: Bytes written.
    size: int = 0


#: What ``files.write`` takes: text (written as UTF-8), bytes, or a binary
#: file object (read and sent in chunks, never whole).
WriteData = Union[str, bytes, bytearray, memoryview, IO[bytes], IO[str]]


@dataclass
class WriteEntry:
    """One file for ``files.write_files``."""

    path: str
    data: WriteData


class FilesystemEventType(str, enum.Enum):
    """What happened to a watched entry."""

    CHMOD = "chmod"
    CREATE = "create"
    REMOVE = "remove"
    RENAME = "rename"
    WRITE = "write"


@dataclass
class FilesystemEvent:
    """A change below a watched directory. ``name`` is the path relative to
    the watched directory (E2B's), ``path`` the absolute guest path."""

    name: str
    type: FilesystemEventType
    path: str = ""
    is_dir: bool = False
    #: Pairs the two halves of a rename (``RENAME`` from, then to).
    cookie: int = 0


class ChangeKind(str, enum.Enum):
    CREATED = "created"
    MODIFIED = "modified"
    DELETED = "deleted"


@dataclass
class FileChange:
    """One entry created, modified or deleted since a tracker started."""

    kind: ChangeKind
    path: str
    type: FileType
    size: int
    previous_size: int
    modified_time: Optional[datetime]


@dataclass
class ChangeList:
    """What changed since a tracker started; ``truncated`` when the guest
    left some out (too many entries)."""

    changes: List[FileChange] = field(default_factory=list)
    truncated: bool = False

    def __iter__(self) -> Iterator[FileChange]:
        return iter(self.changes)

    def __len__(self) -> int:
        return len(self.changes)
