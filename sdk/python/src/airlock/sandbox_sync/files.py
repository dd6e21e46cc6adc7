"""``sandbox.files``: the guest's filesystem, blocking flavour.

Reads and writes stream in chunks whatever a file's size (``read(...,
format="stream")`` yields them; ``write`` takes a file object and never
holds it whole). A write is atomic: the file appears whole or not at all.
Airlock adds whole directories as tar streams (``upload_dir``,
``download_dir``) and change tracking (``track_changes``). The requests
and models are :mod:`airlock.sandbox.files`'.
"""

from __future__ import annotations

import os
import threading
from typing import Callable, Iterator, List, Mapping, Optional, Sequence, Union, overload

import grpc
from typing_extensions import Literal

from .._client import Client
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
from ..sandbox import files as core

# Defined here before the core was shared; still importable from here.
from ..sandbox.files import entry as entry
from ..sandbox.limits import WRITE_CHUNK_BYTES
from ..sandbox.tar import ChunkReader, Packer, unpack


def write_chunks(data: WriteData) -> Iterator[bytes]:
    """`data` in chunks: text as UTF-8, bytes as they are, a file object
    read piece by piece."""
    if isinstance(data, (str, bytes, bytearray, memoryview)):
        yield from core.memory_chunks(data)
        return
    while True:
        piece = data.read(WRITE_CHUNK_BYTES)
        if not piece:
            return
        yield piece.encode() if isinstance(piece, str) else piece


def write_requests(
    sandbox_id: str, path: str, data: WriteData, user: Optional[str], mode: Optional[int], append: bool
) -> Iterator[files_pb2.WriteFileRequest]:
    yield core.write_header(sandbox_id, path, user, mode, append)
    for chunk in write_chunks(data):
        yield files_pb2.WriteFileRequest(data=chunk)


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
            names = core.WatchNames(self._root)
            for raw in self._call:  # type: ignore[attr-defined]
                for event in names.events(raw):
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
        request = files_pb2.ListChangesRequest(sandbox_id=self._sandbox_id, tracker_id=self.tracker_id)
        return core.changes(self._client.call(self._client.files.ListChanges, request, request_timeout))

    def download(self, local_dir: str) -> int:
        """The created and modified files into `local_dir`, each under its
        guest path; returns the number of tar entries."""
        call = self._client.open(
            self._client.files.DownloadChanges,
            files_pb2.DownloadChangesRequest(sandbox_id=self._sandbox_id, tracker_id=self.tracker_id),
        )
        with rpc(self._client.endpoint):
            return unpack(ChunkReader(bytes(c.data) for c in call), local_dir)

    def stop(self, request_timeout: Optional[float] = None) -> None:
        """Ends the tracker and frees its snapshot in the guest."""
        request = files_pb2.StopTrackingRequest(sandbox_id=self._sandbox_id, tracker_id=self.tracker_id)
        self._client.call(self._client.files.StopTracking, request, request_timeout)


class Filesystem:
    """The files of one sandbox."""

    def __init__(self, client: Client, sandbox_id: str) -> None:
        self._client = client
        self._sandbox_id = sandbox_id

    def _stream(self, path: str) -> Iterator[bytes]:
        call = self._client.open(
            self._client.files.Read, files_pb2.ReadFileRequest(sandbox_id=self._sandbox_id, path=path)
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
            return self._stream(core.guest_path(path, user))
        data = bytearray()
        for chunk in self._stream(core.guest_path(path, user)):
            data += chunk
        return core.content(data, format)

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
        requests = write_requests(self._sandbox_id, core.guest_path(path, user), core.write_data(data), user, mode, append)
        return core.written(self._client.call(self._client.files.Write, requests, request_timeout))

    def write_files(
        self,
        files: Sequence[Union[WriteEntry, Mapping[str, WriteData]]],
        user: Optional[str] = None,
        request_timeout: Optional[float] = None,
    ) -> List[WriteInfo]:
        """Writes several files, each as ``write`` does."""
        return [
            self.write(e.path, e.data, user=user, request_timeout=request_timeout)
            for e in map(core.entry, files)
        ]

    def list(
        self, path: str, depth: Optional[int] = 1, user: Optional[str] = None,
        request_timeout: Optional[float] = None,
    ) -> List[EntryInfo]:
        """The entries below a directory, ``depth`` levels down (1: its
        children)."""
        request = files_pb2.ListFilesRequest(sandbox_id=self._sandbox_id, path=core.guest_path(path, user), depth=depth or 1)
        return core.entries(self._client.call(self._client.files.List, request, request_timeout))

    def exists(self, path: str, user: Optional[str] = None, request_timeout: Optional[float] = None) -> bool:
        request = files_pb2.ExistsRequest(sandbox_id=self._sandbox_id, path=core.guest_path(path, user))
        return self._client.call(self._client.files.Exists, request, request_timeout).exists

    def get_info(
        self, path: str, user: Optional[str] = None, request_timeout: Optional[float] = None
    ) -> EntryInfo:
        """One entry's metadata (a symlink is not followed)."""
        request = files_pb2.StatRequest(sandbox_id=self._sandbox_id, path=core.guest_path(path, user))
        return core.entry_info(self._client.call(self._client.files.Stat, request, request_timeout))

    def make_dir(self, path: str, user: Optional[str] = None, request_timeout: Optional[float] = None) -> bool:
        """Makes a directory and its parents; ``False`` when it existed."""
        request = files_pb2.MakeDirRequest(sandbox_id=self._sandbox_id, path=core.guest_path(path, user))
        return self._client.call(self._client.files.MakeDir, request, request_timeout).created

    def rename(
        self, old_path: str, new_path: str, user: Optional[str] = None,
        request_timeout: Optional[float] = None,
    ) -> EntryInfo:
        """Moves an entry; returns its new metadata."""
        request = files_pb2.RenameRequest(sandbox_id=self._sandbox_id, to=core.guest_path(new_path, user), **{"from": core.guest_path(old_path, user)})
        return core.entry_info(self._client.call(self._client.files.Rename, request, request_timeout))

    def remove(self, path: str, user: Optional[str] = None, request_timeout: Optional[float] = None) -> None:
        """Removes a file, or a directory with everything in it."""
        request = files_pb2.RemoveRequest(sandbox_id=self._sandbox_id, path=core.guest_path(path, user))
        self._client.call(self._client.files.Remove, request, request_timeout)

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
        call = self._client.open(
            self._client.files.Watch,
            files_pb2.WatchRequest(sandbox_id=self._sandbox_id, path=core.guest_path(path, user), recursive=recursive),
        )
        with rpc(self._client.endpoint):
            call.initial_metadata()
        return WatchHandle(self._client, call, core.guest_path(path, user), on_event, on_exit)

    def upload_dir(self, local_path: str, remote_path: str, request_timeout: Optional[float] = None) -> int:
        """Airlock: a host directory into the guest (made if missing), as a
        tar stream, modes and symlinks kept; returns the tar's bytes."""
        packer = Packer(os.fspath(local_path), WRITE_CHUNK_BYTES)

        def requests() -> Iterator[files_pb2.UploadTarRequest]:
            yield core.upload_header(self._sandbox_id, remote_path)
            for chunk in packer:
                yield files_pb2.UploadTarRequest(data=chunk)

        sent = self._client.call(self._client.files.UploadTar, requests(), request_timeout)
        packer.check()
        return sent.bytes

    def download_dir(self, remote_path: str, local_path: str) -> int:
        """Airlock: a guest directory into a host one (made if missing), as
        a tar stream; entries that would land outside it are refused.
        Returns the number of entries."""
        call = self._client.open(
            self._client.files.DownloadTar,
            files_pb2.DownloadTarRequest(sandbox_id=self._sandbox_id, path=remote_path),
        )
        with rpc(self._client.endpoint):
            return unpack(ChunkReader(bytes(c.data) for c in call), os.fspath(local_path))

    def track_changes(
        self, roots: Optional[Sequence[str]] = None, request_timeout: Optional[float] = None
    ) -> ChangeTracker:
        """Airlock: starts tracking changes below ``roots`` (default
        ``/root`` and ``/tmp``); the tracker's ``changes()`` says what was
        created, modified and deleted since."""
        request = files_pb2.TrackChangesRequest(sandbox_id=self._sandbox_id, roots=list(roots or []))
        started = self._client.call(self._client.files.TrackChanges, request, request_timeout)
        return ChangeTracker(self._client, self._sandbox_id, started.tracker_id)
