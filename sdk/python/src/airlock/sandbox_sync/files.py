"""``sandbox.files``: the guest's filesystem, blocking flavour.

Reads and writes stream in chunks whatever a file's size (``read(...,
format="stream")`` yields them; ``write`` takes a file object and never
holds it whole). A write is atomic: the file appears whole or not at all.
Airlock adds whole directories as tar streams (``upload_dir``,
``download_dir``) and change tracking (``track_changes``).
"""

from __future__ import annotations

import os
import threading
from typing import Callable, Iterator, List, Mapping, Optional, Sequence, Union, overload

import grpc
from typing_extensions import Literal

from .. import _convert, _tar
from .._client import WRITE_CHUNK_BYTES, Client
from .._errors import rpc
from ..api.v1 import files_pb2
from ..exceptions import SandboxException, from_rpc_error
from ..models.files import (
    ChangeList,
    EntryInfo,
    FilesystemEvent,
    WriteData,
    WriteEntry,
    WriteInfo,
)


def write_chunks(data: WriteData) -> Iterator[bytes]:
    """`data` in chunks: text as UTF-8, bytes as they are, a file object
    read piece by piece."""
    if isinstance(data, (str, bytes, bytearray, memoryview)):
        payload = _convert.text_bytes(data)
        for start in range(0, len(payload), WRITE_CHUNK_BYTES):
            yield payload[start : start + WRITE_CHUNK_BYTES]
        return
    while True:
        piece = data.read(WRITE_CHUNK_BYTES)
        if not piece:
            return
        yield piece.encode() if isinstance(piece, str) else piece


def write_requests(
    sandbox_id: str, path: str, data: WriteData, user: Optional[str], mode: Optional[int], append: bool
) -> Iterator[files_pb2.WriteFileRequest]:
    yield files_pb2.WriteFileRequest(
        header=files_pb2.WriteHeader(
            sandbox_id=sandbox_id, path=path, mode=mode or 0, user=user or "", append=append
        )
    )
    for chunk in write_chunks(data):
        yield files_pb2.WriteFileRequest(data=chunk)


def entry(item: Union[WriteEntry, Mapping[str, WriteData]]) -> WriteEntry:
    if isinstance(item, WriteEntry):
        return item
    return WriteEntry(path=str(item["path"]), data=item["data"])


class WatchHandle:
    """Events below a watched directory, collected by a thread as they
    come: ``get_new_events()`` takes those not taken yet; ``on_event``, if
    given, is called with each; ``stop()`` ends the watch."""

    def __init__(
        self,
        client: Client,
        call: "grpc.Call",
        root: str,
        on_event: Optional[Callable[[FilesystemEvent], object]],
        on_exit: Optional[Callable[[Optional[Exception]], object]],
    ) -> None:
        self._client = client
        self._call = call
        self._root = root
        self._on_event = on_event
        self._on_exit = on_exit
        self._events: List[FilesystemEvent] = []
        self._lock = threading.Lock()
        self._stopped = False
        self.failure: Optional[Exception] = None
        self._thread = threading.Thread(target=self._pump, name="airlock-watch", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        failure: Optional[Exception] = None
        try:
            for raw in self._call:  # type: ignore[attr-defined]
                event = _convert.watch_event(raw, self._root)
                with self._lock:
                    self._events.append(event)
                if self._on_event is not None:
                    self._on_event(event)
        except grpc.RpcError as error:
            if not self._stopped:
                failure = from_rpc_error(error, self._client.endpoint)
        except Exception as error:  # noqa: BLE001 - a callback failed
            failure = error
        self.failure = failure
        if self._on_exit is not None:
            self._on_exit(failure)

    def get_new_events(self) -> List[FilesystemEvent]:
        """The events since the last call."""
        with self._lock:
            events, self._events = self._events, []
        if not events and self.failure is not None:
            raise SandboxException(f"the watch of {self._root} ended: {self.failure}")
        return events

    def stop(self) -> None:
        """Ends the watch."""
        self._stopped = True
        self._call.cancel()
        self._thread.join(timeout=5)


class ChangeTracker:
    """What changed below some guest directories since it started."""

    def __init__(self, client: Client, sandbox_id: str, tracker_id: str) -> None:
        self._client = client
        self._sandbox_id = sandbox_id
        self.tracker_id = tracker_id

    def changes(self, request_timeout: Optional[float] = None) -> ChangeList:
        """Entries created, modified and deleted since the tracker started."""
        with rpc(self._client.endpoint):
            listed = self._client.files.ListChanges(
                files_pb2.ListChangesRequest(sandbox_id=self._sandbox_id, tracker_id=self.tracker_id),
                metadata=self._client.metadata,
                timeout=self._client.timeout(request_timeout),
            )
        return ChangeList([_convert.file_change(c) for c in listed.changes], listed.truncated)

    def download(self, local_dir: str) -> int:
        """The created and modified files into `local_dir`, each under its
        guest path; returns the number of tar entries."""
        call = self._client.files.DownloadChanges(
            files_pb2.DownloadChangesRequest(sandbox_id=self._sandbox_id, tracker_id=self.tracker_id),
            metadata=self._client.metadata,
        )
        with rpc(self._client.endpoint):
            return _tar.unpack(
                _tar.ChunkReader(bytes(c.data) for c in call),
                local_dir,
            )

    def stop(self, request_timeout: Optional[float] = None) -> None:
        """Ends the tracker and frees its snapshot in the guest."""
        with rpc(self._client.endpoint):
            self._client.files.StopTracking(
                files_pb2.StopTrackingRequest(sandbox_id=self._sandbox_id, tracker_id=self.tracker_id),
                metadata=self._client.metadata,
                timeout=self._client.timeout(request_timeout),
            )


class Filesystem:
    """The files of one sandbox."""

    def __init__(self, client: Client, sandbox_id: str) -> None:
        self._client = client
        self._sandbox_id = sandbox_id

    def _timeout(self, request_timeout: Optional[float]) -> Optional[float]:
        return self._client.timeout(request_timeout)

    def _stream(self, path: str) -> Iterator[bytes]:
        call = self._client.files.Read(
            files_pb2.ReadFileRequest(sandbox_id=self._sandbox_id, path=path),
            metadata=self._client.metadata,
        )
        with rpc(self._client.endpoint):
            for chunk in call:
                yield bytes(chunk.data)

    @overload
    def read(
        self, path: str, format: Literal["text"] = "text", user: Optional[str] = None,
        request_timeout: Optional[float] = None,
    ) -> str: ...

    @overload
    def read(
        self, path: str, format: Literal["bytes"], user: Optional[str] = None,
        request_timeout: Optional[float] = None,
    ) -> bytearray: ...

    @overload
    def read(
        self, path: str, format: Literal["stream"], user: Optional[str] = None,
        request_timeout: Optional[float] = None,
    ) -> Iterator[bytes]: ...

    def read(
        self,
        path: str,
        format: Literal["text", "bytes", "stream"] = "text",
        user: Optional[str] = None,
        request_timeout: Optional[float] = None,
    ) -> Union[str, bytearray, Iterator[bytes]]:
        """A file's content: ``"text"`` (UTF-8), ``"bytes"``, or ``"stream"``
        (an iterator of chunks: nothing is held whole)."""
        if format == "stream":
            return self._stream(path)
        data = bytearray()
        for chunk in self._stream(path):
            data += chunk
        if format == "bytes":
            return data
        return data.decode("utf-8", errors="replace")

    @overload
    def write(
        self, path: str, data: WriteData, user: Optional[str] = None,
        request_timeout: Optional[float] = None, *, mode: Optional[int] = None, append: bool = False,
    ) -> WriteInfo: ...

    @overload
    def write(
        self, path: Sequence[Union[WriteEntry, Mapping[str, WriteData]]], data: None = None,
        user: Optional[str] = None, request_timeout: Optional[float] = None,
        *, mode: Optional[int] = None, append: bool = False,
    ) -> List[WriteInfo]: ...

    def write(
        self,
        path: Union[str, Sequence[Union[WriteEntry, Mapping[str, WriteData]]]],
        data: Optional[WriteData] = None,
        user: Optional[str] = None,
        request_timeout: Optional[float] = None,
        *,
        mode: Optional[int] = None,
        append: bool = False,
    ) -> Union[WriteInfo, List[WriteInfo]]:
        """Writes a file (missing parent directories are made): ``data`` is
        text, bytes or a file object (streamed). It appears whole or not at
        all; ``append`` (Airlock) adds to its end instead. ``user`` owns a
        new file; ``mode`` its permission bits (default 0644). A list of
        entries (E2B's older form) writes each."""
        if not isinstance(path, str):
            return self.write_files(path, user=user, request_timeout=request_timeout)
        if data is None:
            raise SandboxException("write needs data (text, bytes or a file object)")
        with rpc(self._client.endpoint):
            written = self._client.files.Write(
                write_requests(self._sandbox_id, path, data, user, mode, append),
                metadata=self._client.metadata,
                timeout=self._timeout(request_timeout),
            )
        info = _convert.entry_info(written.file)
        return WriteInfo(name=info.name, type=info.type, path=info.path, size=written.bytes_written)

    def write_files(
        self,
        files: Sequence[Union[WriteEntry, Mapping[str, WriteData]]],
        user: Optional[str] = None,
        request_timeout: Optional[float] = None,
    ) -> List[WriteInfo]:
        """Writes several files, each as ``write`` does."""
        return [
            self.write(e.path, e.data, user=user, request_timeout=request_timeout)
            for e in map(entry, files)
        ]

    def list(
        self, path: str, depth: Optional[int] = 1, user: Optional[str] = None,
        request_timeout: Optional[float] = None,
    ) -> List[EntryInfo]:
        """The entries below a directory, ``depth`` levels down (1: its
        children)."""
        with rpc(self._client.endpoint):
            listed = self._client.files.List(
                files_pb2.ListFilesRequest(sandbox_id=self._sandbox_id, path=path, depth=depth or 1),
                metadata=self._client.metadata,
                timeout=self._timeout(request_timeout),
            )
        return [_convert.entry_info(info) for info in listed.entries]

    def exists(self, path: str, user: Optional[str] = None, request_timeout: Optional[float] = None) -> bool:
        with rpc(self._client.endpoint):
            answer = self._client.files.Exists(
                files_pb2.ExistsRequest(sandbox_id=self._sandbox_id, path=path),
                metadata=self._client.metadata,
                timeout=self._timeout(request_timeout),
            )
        return answer.exists

    def get_info(
        self, path: str, user: Optional[str] = None, request_timeout: Optional[float] = None
    ) -> EntryInfo:
        """One entry's metadata (a symlink is not followed)."""
        with rpc(self._client.endpoint):
            info = self._client.files.Stat(
                files_pb2.StatRequest(sandbox_id=self._sandbox_id, path=path),
                metadata=self._client.metadata,
                timeout=self._timeout(request_timeout),
            )
        return _convert.entry_info(info)

    def make_dir(self, path: str, user: Optional[str] = None, request_timeout: Optional[float] = None) -> bool:
        """Makes a directory and its parents; ``False`` when it existed."""
        with rpc(self._client.endpoint):
            made = self._client.files.MakeDir(
                files_pb2.MakeDirRequest(sandbox_id=self._sandbox_id, path=path),
                metadata=self._client.metadata,
                timeout=self._timeout(request_timeout),
            )
        return made.created

    def rename(
        self, old_path: str, new_path: str, user: Optional[str] = None,
        request_timeout: Optional[float] = None,
    ) -> EntryInfo:
        """Moves an entry; returns its new metadata."""
        with rpc(self._client.endpoint):
            info = self._client.files.Rename(
                files_pb2.RenameRequest(sandbox_id=self._sandbox_id, to=new_path, **{"from": old_path}),
                metadata=self._client.metadata,
                timeout=self._timeout(request_timeout),
            )
        return _convert.entry_info(info)

    def remove(self, path: str, user: Optional[str] = None, request_timeout: Optional[float] = None) -> None:
        """Removes a file, or a directory with everything in it."""
        with rpc(self._client.endpoint):
            self._client.files.Remove(
                files_pb2.RemoveRequest(sandbox_id=self._sandbox_id, path=path),
                metadata=self._client.metadata,
                timeout=self._timeout(request_timeout),
            )

    def watch_dir(
        self,
        path: str,
        on_event: Optional[Callable[[FilesystemEvent], object]] = None,
        recursive: bool = False,
        on_exit: Optional[Callable[[Optional[Exception]], object]] = None,
        user: Optional[str] = None,
        request_timeout: Optional[float] = None,
    ) -> WatchHandle:
        """Watches a directory (and, with ``recursive``, everything below
        it); returns once the guest watches, so a change made after the call
        is seen."""
        call = self._client.files.Watch(
            files_pb2.WatchRequest(sandbox_id=self._sandbox_id, path=path, recursive=recursive),
            metadata=self._client.metadata,
        )
        with rpc(self._client.endpoint):
            call.initial_metadata()
        return WatchHandle(self._client, call, path, on_event, on_exit)

    def upload_dir(self, local_path: str, remote_path: str, request_timeout: Optional[float] = None) -> int:
        """Airlock: a host directory into the guest (made if missing), as a
        tar stream, modes and symlinks kept; returns the tar's bytes."""
        packer = _tar.Packer(os.fspath(local_path), WRITE_CHUNK_BYTES)

        def requests() -> Iterator[files_pb2.UploadTarRequest]:
            yield files_pb2.UploadTarRequest(
                header=files_pb2.UploadTarHeader(sandbox_id=self._sandbox_id, path=remote_path)
            )
            for chunk in packer:
                yield files_pb2.UploadTarRequest(data=chunk)

        with rpc(self._client.endpoint):
            sent = self._client.files.UploadTar(
                requests(), metadata=self._client.metadata, timeout=self._timeout(request_timeout)
            )
        if packer.failure is not None:
            raise SandboxException(f"cannot pack {local_path}: {packer.failure}")
        return sent.bytes

    def download_dir(self, remote_path: str, local_path: str) -> int:
        """Airlock: a guest directory into a host one (made if missing), as
        a tar stream; entries that would land outside it are refused.
        Returns the number of entries."""
        call = self._client.files.DownloadTar(
            files_pb2.DownloadTarRequest(sandbox_id=self._sandbox_id, path=remote_path),
            metadata=self._client.metadata,
        )
        with rpc(self._client.endpoint):
            return _tar.unpack(
                _tar.ChunkReader(bytes(c.data) for c in call),
                os.fspath(local_path),
            )

    def track_changes(
        self, roots: Optional[Sequence[str]] = None, request_timeout: Optional[float] = None
    ) -> ChangeTracker:
        """Airlock: starts tracking changes below ``roots`` (default
        ``/root`` and ``/tmp``); the tracker's ``changes()`` says what was
        created, modified and deleted since."""
        with rpc(self._client.endpoint):
            started = self._client.files.TrackChanges(
                files_pb2.TrackChangesRequest(sandbox_id=self._sandbox_id, roots=list(roots or [])),
                metadata=self._client.metadata,
                timeout=self._timeout(request_timeout),
            )
        return ChangeTracker(self._client, self._sandbox_id, started.tracker_id)
