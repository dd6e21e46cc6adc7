"""``sandbox.files``: the guest's filesystem, asyncio flavour (see
:mod:`airlock.sandbox_sync.files` for what each call does; the requests and
models are :mod:`airlock.sandbox.files`'). Host files and tar streams are
read and written in the loop's executor, so a large transfer never blocks
the event loop."""

from __future__ import annotations

import asyncio
import os
import tempfile
from typing import Any, AsyncIterator, Awaitable, Callable, List, Mapping, Optional, Sequence, Union, overload

import grpc
from typing_extensions import Literal

from .._client import AsyncClient
from .._errors import arpc
from ..api.v1 import files_pb2
from ..exceptions import from_rpc_error
from ..models.files import ChangeList, EntryInfo, FilesystemEvent, WriteData, WriteEntry, WriteInfo
from ..sandbox import files as core
from ..sandbox.limits import WRITE_CHUNK_BYTES
from ..sandbox.tar import Packer, unpack
from .command_handle import call_back

EventCallback = Callable[[FilesystemEvent], Union[object, Awaitable[object]]]
ExitCallback = Callable[[Optional[Exception]], Union[object, Awaitable[object]]]


async def write_chunks(data: WriteData) -> AsyncIterator[bytes]:
    if isinstance(data, (str, bytes, bytearray, memoryview)):
        for chunk in core.memory_chunks(data):
            yield chunk
        return
    loop = asyncio.get_running_loop()
    while True:
        piece: Union[str, bytes] = await loop.run_in_executor(None, data.read, WRITE_CHUNK_BYTES)
        if not piece:
            return
        yield piece.encode() if isinstance(piece, str) else bytes(piece)


async def write_requests(
    sandbox_id: str, path: str, data: WriteData, user: Optional[str], mode: Optional[int], append: bool
) -> AsyncIterator[files_pb2.WriteFileRequest]:
    yield core.write_header(sandbox_id, path, user, mode, append)
    async for chunk in write_chunks(data):
        yield files_pb2.WriteFileRequest(data=chunk)


async def _to_file(chunks: AsyncIterator[bytes]) -> Any:
    """The chunks spooled to a temporary file, rewound."""
    loop = asyncio.get_running_loop()
    spool = tempfile.TemporaryFile()
    async for chunk in chunks:
        await loop.run_in_executor(None, spool.write, chunk)
    spool.seek(0)
    return spool


async def _unpack(client: AsyncClient, call: Any, local_dir: str) -> int:
    async def chunks() -> AsyncIterator[bytes]:
        async with arpc(client.endpoint):
            async for chunk in call:
                yield bytes(chunk.data)

    spool = await _to_file(chunks())
    try:
        return await asyncio.get_running_loop().run_in_executor(None, unpack, spool, local_dir)
    finally:
        spool.close()


class AsyncWatchHandle:
    """A watch whose events are handed to ``on_event`` as they come;
    ``await stop()`` ends it."""

    def __init__(
        self,
        client: AsyncClient,
        call: Any,
        root: str,
        on_event: EventCallback,
        on_exit: Optional[ExitCallback],
    ) -> None:
        self._client = client
        self._call = call
        self._root = root
        self._on_event = on_event
        self._on_exit = on_exit
        self._stopped = False
        self.failure: Optional[Exception] = None
        self._task = asyncio.get_running_loop().create_task(self._pump())

    async def _pump(self) -> None:
        failure: Optional[Exception] = None
        try:
            names = core.WatchNames(self._root)
            async for raw in self._call:
                for event in names.events(raw):
                    await call_back(self._on_event, event)
        except grpc.RpcError as error:
            if not self._stopped:
                failure = from_rpc_error(error, self._client.endpoint)
        except asyncio.CancelledError:
            self._call.cancel()
            return
        except Exception as error:  # noqa: BLE001 - a callback failed
            failure = error
        self.failure = failure
        await call_back(self._on_exit, failure)

    async def stop(self) -> None:
        self._stopped = True
        self._call.cancel()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), 5)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            pass


class AsyncChangeTracker:
    """What changed below some guest directories since it started."""

    def __init__(self, client: AsyncClient, sandbox_id: str, tracker_id: str) -> None:
        self._client = client
        self._sandbox_id = sandbox_id
        self.tracker_id = tracker_id

    async def changes(self, request_timeout: Optional[float] = None) -> ChangeList:
        request = files_pb2.ListChangesRequest(sandbox_id=self._sandbox_id, tracker_id=self.tracker_id)
        return core.changes(await self._client.call(self._client.files.ListChanges, request, request_timeout))

    async def download(self, local_dir: str) -> int:
        call = self._client.open(
            self._client.files.DownloadChanges,
            files_pb2.DownloadChangesRequest(sandbox_id=self._sandbox_id, tracker_id=self.tracker_id),
        )
        return await _unpack(self._client, call, local_dir)

    async def stop(self, request_timeout: Optional[float] = None) -> None:
        request = files_pb2.StopTrackingRequest(sandbox_id=self._sandbox_id, tracker_id=self.tracker_id)
        await self._client.call(self._client.files.StopTracking, request, request_timeout)


class AsyncFilesystem:
    """The files of one sandbox."""

    def __init__(self, client: AsyncClient, sandbox_id: str) -> None:
        self._client = client
        self._sandbox_id = sandbox_id

    async def _stream(self, path: str) -> AsyncIterator[bytes]:
        call = self._client.open(
            self._client.files.Read, files_pb2.ReadFileRequest(sandbox_id=self._sandbox_id, path=path)
        )
        async with arpc(self._client.endpoint):
            async for chunk in call:
                yield bytes(chunk.data)

    @overload
    async def read(
        self, path: str, format: Literal["text"] = "text", user: Optional[str] = None,
        request_timeout: Optional[float] = None,
    ) -> str: ...

    @overload
    async def read(
        self, path: str, format: Literal["bytes"], user: Optional[str] = None,
        request_timeout: Optional[float] = None,
    ) -> bytearray: ...

    @overload
    async def read(
        self, path: str, format: Literal["stream"], user: Optional[str] = None,
        request_timeout: Optional[float] = None,
    ) -> AsyncIterator[bytes]: ...

    async def read(
        self,
        path: str,
        format: Literal["text", "bytes", "stream"] = "text",
        user: Optional[str] = None,
        request_timeout: Optional[float] = None,
    ) -> Union[str, bytearray, AsyncIterator[bytes]]:
        if format == "stream":
            return self._stream(core.guest_path(path, user))
        data = bytearray()
        async for chunk in self._stream(core.guest_path(path, user)):
            data += chunk
        return core.content(data, format)

    @overload
    async def write(
        self, path: str, data: WriteData, user: Optional[str] = None,
        request_timeout: Optional[float] = None, *, mode: Optional[int] = None, append: bool = False,
    ) -> WriteInfo: ...

    @overload
    async def write(
        self, path: Sequence[Union[WriteEntry, Mapping[str, WriteData]]], data: None = None,
        user: Optional[str] = None, request_timeout: Optional[float] = None,
        *, mode: Optional[int] = None, append: bool = False,
    ) -> List[WriteInfo]: ...

    async def write(
        self,
        path: Union[str, Sequence[Union[WriteEntry, Mapping[str, WriteData]]]],
        data: Optional[WriteData] = None,
        user: Optional[str] = None,
        request_timeout: Optional[float] = None,
        *,
        mode: Optional[int] = None,
        append: bool = False,
    ) -> Union[WriteInfo, List[WriteInfo]]:
        if not isinstance(path, str):
            return await self.write_files(path, user=user, request_timeout=request_timeout)
        requests = write_requests(self._sandbox_id, core.guest_path(path, user), core.write_data(data), user, mode, append)
        return core.written(await self._client.call(self._client.files.Write, requests, request_timeout))

    async def write_files(
        self,
        files: Sequence[Union[WriteEntry, Mapping[str, WriteData]]],
        user: Optional[str] = None,
        request_timeout: Optional[float] = None,
    ) -> List[WriteInfo]:
        return [
            await self.write(e.path, e.data, user=user, request_timeout=request_timeout)
            for e in map(core.entry, files)
        ]

    async def list(
        self, path: str, depth: Optional[int] = 1, user: Optional[str] = None,
        request_timeout: Optional[float] = None,
    ) -> List[EntryInfo]:
        request = files_pb2.ListFilesRequest(sandbox_id=self._sandbox_id, path=core.guest_path(path, user), depth=depth or 1)
        return core.entries(await self._client.call(self._client.files.List, request, request_timeout))

    async def exists(self, path: str, user: Optional[str] = None, request_timeout: Optional[float] = None) -> bool:
        request = files_pb2.ExistsRequest(sandbox_id=self._sandbox_id, path=core.guest_path(path, user))
        return (await self._client.call(self._client.files.Exists, request, request_timeout)).exists

    async def get_info(
        self, path: str, user: Optional[str] = None, request_timeout: Optional[float] = None
    ) -> EntryInfo:
        request = files_pb2.StatRequest(sandbox_id=self._sandbox_id, path=core.guest_path(path, user))
        return core.entry_info(await self._client.call(self._client.files.Stat, request, request_timeout))

    async def make_dir(self, path: str, user: Optional[str] = None, request_timeout: Optional[float] = None) -> bool:
        request = files_pb2.MakeDirRequest(sandbox_id=self._sandbox_id, path=core.guest_path(path, user))
        return (await self._client.call(self._client.files.MakeDir, request, request_timeout)).created

    async def rename(
        self, old_path: str, new_path: str, user: Optional[str] = None,
        request_timeout: Optional[float] = None,
    ) -> EntryInfo:
        request = files_pb2.RenameRequest(sandbox_id=self._sandbox_id, to=core.guest_path(new_path, user), **{"from": core.guest_path(old_path, user)})
        return core.entry_info(await self._client.call(self._client.files.Rename, request, request_timeout))

    async def remove(self, path: str, user: Optional[str] = None, request_timeout: Optional[float] = None) -> None:
        request = files_pb2.RemoveRequest(sandbox_id=self._sandbox_id, path=core.guest_path(path, user))
        await self._client.call(self._client.files.Remove, request, request_timeout)

    async def watch_dir(
        self,
        path: str,
        on_event: EventCallback,
        on_exit: Optional[ExitCallback] = None,
        user: Optional[str] = None,
        request_timeout: Optional[float] = None,
        recursive: bool = False,
    ) -> AsyncWatchHandle:
        """Watches a directory; ``on_event`` gets each change. Returns once
        the guest watches."""
        call = self._client.open(
            self._client.files.Watch,
            files_pb2.WatchRequest(sandbox_id=self._sandbox_id, path=core.guest_path(path, user), recursive=recursive),
        )
        async with arpc(self._client.endpoint):
            await call.initial_metadata()
        return AsyncWatchHandle(self._client, call, core.guest_path(path, user), on_event, on_exit)

    async def upload_dir(self, local_path: str, remote_path: str, request_timeout: Optional[float] = None) -> int:
        packer = Packer(os.fspath(local_path), WRITE_CHUNK_BYTES)
        chunks = iter(packer)
        loop = asyncio.get_running_loop()

        async def requests() -> AsyncIterator[files_pb2.UploadTarRequest]:
            yield core.upload_header(self._sandbox_id, remote_path)
            while True:
                chunk = await loop.run_in_executor(None, next, chunks, None)
                if chunk is None:
                    return
                yield files_pb2.UploadTarRequest(data=chunk)

        sent = await self._client.call(self._client.files.UploadTar, requests(), request_timeout)
        packer.check()
        return sent.bytes

    async def download_dir(self, remote_path: str, local_path: str) -> int:
        call = self._client.open(
            self._client.files.DownloadTar,
            files_pb2.DownloadTarRequest(sandbox_id=self._sandbox_id, path=remote_path),
        )
        return await _unpack(self._client, call, os.fspath(local_path))

    async def track_changes(
        self, roots: Optional[Sequence[str]] = None, request_timeout: Optional[float] = None
    ) -> AsyncChangeTracker:
        request = files_pb2.TrackChangesRequest(sandbox_id=self._sandbox_id, roots=list(roots or []))
        started = await self._client.call(self._client.files.TrackChanges, request, request_timeout)
        return AsyncChangeTracker(self._client, self._sandbox_id, started.tracker_id)
