"""Guest files (the ``Files`` service): entries, watch events and changes
as models, the header and chunks of a write, the header of a tar upload,
and a read's bytes in the format asked for."""

from __future__ import annotations

import os.path
import re
import stat
from typing import Dict, Iterator, List, Mapping, Optional, Union

from typing_extensions import Literal

from ..api.v1 import files_pb2
from ..exceptions import SandboxException
from ..models.files import (
    ChangeKind,
    ChangeList,
    EntryInfo,
    FileChange,
    FilesystemEvent,
    FilesystemEventType,
    FileType,
    WriteData,
    WriteEntry,
    WriteInfo,
)
from .clock import from_ms
from .limits import WRITE_CHUNK_BYTES

#: What ``files.read`` gives back.
ReadFormat = Literal["text", "bytes", "stream"]

_FILE_TYPES: Dict[int, FileType] = {
    files_pb2.FILE_TYPE_FILE: FileType.FILE,
    files_pb2.FILE_TYPE_DIRECTORY: FileType.DIR,
    files_pb2.FILE_TYPE_SYMLINK: FileType.SYMLINK,
    files_pb2.FILE_TYPE_OTHER: FileType.OTHER,
}

_TYPE_CHARS = {FileType.FILE: "-", FileType.DIR: "d", FileType.SYMLINK: "l", FileType.OTHER: "?"}


def file_type(value: int) -> FileType:
    return _FILE_TYPES.get(value, FileType.OTHER)


def entry_info(info: files_pb2.FileInfo) -> EntryInfo:
    kind = file_type(info.type)
    return EntryInfo(
        name=info.name,
        type=kind,
        path=info.path,
        size=info.size,
        mode=info.mode,
        permissions=_TYPE_CHARS[kind] + stat.filemode(info.mode)[1:],
        owner=str(info.uid),
        group=str(info.gid),
        modified_time=from_ms(info.modified_at_ms),
        symlink_target=info.symlink_target or None,
        uid=info.uid,
        gid=info.gid,
    )


_WATCH_TYPES: Dict[int, FilesystemEventType] = {
    files_pb2.WATCH_EVENT_TYPE_CREATE: FilesystemEventType.CREATE,
    files_pb2.WATCH_EVENT_TYPE_WRITE: FilesystemEventType.WRITE,
    files_pb2.WATCH_EVENT_TYPE_REMOVE: FilesystemEventType.REMOVE,
    files_pb2.WATCH_EVENT_TYPE_RENAME_FROM: FilesystemEventType.RENAME,
    files_pb2.WATCH_EVENT_TYPE_RENAME_TO: FilesystemEventType.RENAME,
}


def watch_event(event: files_pb2.WatchEvent, root: str) -> FilesystemEvent:
    kind = _WATCH_TYPES.get(event.type, FilesystemEventType.CHMOD)
    try:
        name = os.path.relpath(event.path, root)
    except ValueError:
        name = event.path
    return FilesystemEvent(
        name=name, type=kind, path=event.path, is_dir=event.is_dir, cookie=event.cookie
    )


def guest_path(path: str, user: Optional[str] = None) -> str:
    """A guest path as E2B resolves one: a relative path is taken from the
    user's home (``/root`` for root, the default user; ``/home/USER`` for
    another)."""
    if not path or path.startswith("/"):
        return path
    home = "/root" if user in (None, "", "root", "0") else f"/home/{user}"
    return os.path.normpath(os.path.join(home, path))


#: The guest's temporary file of an atomic write: ``.NAME.airlock-N-M.tmp``
#: beside ``NAME``, renamed over it once whole.
_TEMPORARY = re.compile(r"^\.(.+)\.airlock-\d+-\d+\.tmp$")


class WatchNames:
    """A watch's events as E2B reports a write: the guest writes each file
    to a temporary beside it and renames that over it, so the temporary's
    events are dropped and its rename onto the file becomes a ``CREATE``
    and a ``WRITE`` of the file written (the name a program waits for)."""

    def __init__(self, root: str) -> None:
        self._root = root
        self._cookies: List[int] = []

    def events(self, raw: files_pb2.WatchEvent) -> List[FilesystemEvent]:
        event = watch_event(raw, self._root)
        if _TEMPORARY.match(os.path.basename(event.path)):
            if raw.type == files_pb2.WATCH_EVENT_TYPE_RENAME_FROM and raw.cookie:
                self._cookies = (self._cookies + [event.cookie])[-64:]
            return []
        if raw.type == files_pb2.WATCH_EVENT_TYPE_RENAME_TO and raw.cookie in self._cookies:
            self._cookies.remove(event.cookie)
            return [
                FilesystemEvent(event.name, FilesystemEventType.CREATE, event.path, event.is_dir),
                FilesystemEvent(event.name, FilesystemEventType.WRITE, event.path, event.is_dir),
            ]
        return [event]


_CHANGE_KINDS: Dict[int, ChangeKind] = {
    files_pb2.CHANGE_KIND_CREATED: ChangeKind.CREATED,
    files_pb2.CHANGE_KIND_MODIFIED: ChangeKind.MODIFIED,
    files_pb2.CHANGE_KIND_DELETED: ChangeKind.DELETED,
}


def file_change(change: files_pb2.FileChange) -> FileChange:
    return FileChange(
        kind=_CHANGE_KINDS.get(change.kind, ChangeKind.MODIFIED),
        path=change.path,
        type=file_type(change.type),
        size=change.size,
        previous_size=change.previous_size,
        modified_time=from_ms(change.modified_at_ms) if change.modified_at_ms else None,
    )


def text_bytes(data: "str | bytes | bytearray | memoryview") -> bytes:
    return data.encode() if isinstance(data, str) else bytes(data)


def entries(listed: files_pb2.ListFilesResponse) -> List[EntryInfo]:
    return [entry_info(info) for info in listed.entries]


def changes(listed: files_pb2.ListChangesResponse) -> ChangeList:
    return ChangeList([file_change(c) for c in listed.changes], listed.truncated)


def content(data: bytearray, format: ReadFormat) -> Union[str, bytearray]:
    """A whole file read as ``"bytes"``, else as UTF-8 text."""
    if format == "bytes":
        return data
    return data.decode("utf-8", errors="replace")


# -- writes -----------------------------------------------------------------


def entry(item: Union[WriteEntry, Mapping[str, WriteData]]) -> WriteEntry:
    if isinstance(item, WriteEntry):
        return item
    return WriteEntry(path=str(item["path"]), data=item["data"])


def write_data(data: Optional[WriteData]) -> WriteData:
    """``write``'s data, which it cannot do without."""
    if data is None:
        raise SandboxException("write needs data (text, bytes or a file object)")
    return data


def memory_chunks(data: "str | bytes | bytearray | memoryview") -> Iterator[bytes]:
    """Text (as UTF-8) or bytes to write, in chunks (a file object is read
    piece by piece by the client)."""
    payload = text_bytes(data)
    for start in range(0, len(payload), WRITE_CHUNK_BYTES):
        yield payload[start : start + WRITE_CHUNK_BYTES]


def write_header(
    sandbox_id: str, path: str, user: Optional[str], mode: Optional[int], append: bool
) -> files_pb2.WriteFileRequest:
    return files_pb2.WriteFileRequest(
        header=files_pb2.WriteHeader(
            sandbox_id=sandbox_id, path=path, mode=mode or 0, user=user or "", append=append
        )
    )


def written(answer: files_pb2.WriteFileResponse) -> WriteInfo:
    info = entry_info(answer.file)
    return WriteInfo(name=info.name, type=info.type, path=info.path, size=answer.bytes_written)


def upload_header(sandbox_id: str, path: str) -> files_pb2.UploadTarRequest:
    return files_pb2.UploadTarRequest(header=files_pb2.UploadTarHeader(sandbox_id=sandbox_id, path=path))
