"""Directory trees as tar streams, both ways, with bounded memory: a host
directory is packed by a thread into a pipe that the upload reads in
chunks; a download is unpacked from chunks into a directory, refusing
entries that would land outside it (the guest's tar is untrusted)."""

from __future__ import annotations

import os
import tarfile
import threading
from typing import IO, Callable, Iterator, List, Optional, cast

from ..exceptions import InvalidArgumentException, SandboxException


class Packer:
    """Packs `directory` (paths relative to it, symlinks kept) in a thread;
    iterate it for the tar's chunks. With `entries` (paths relative to it,
    parents first) only those are packed, owned by root; `field` names the
    argument that gave the directory."""

    def __init__(
        self,
        directory: str,
        chunk: int,
        *,
        field: str = "local_path",
        entries: Optional[Callable[[], List[str]]] = None,
    ) -> None:
        if not os.path.isdir(directory):
            raise InvalidArgumentException(f"{field}: {directory} is not a directory", field=field)
        self._directory = directory
        self._chunk = chunk
        self._entries = entries
        read, write = os.pipe()
        self._reader = os.fdopen(read, "rb")
        self._writer = os.fdopen(write, "wb")
        self.failure: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._pack, name="airlock-tar", daemon=True)
        self._thread.start()

    def _pack(self) -> None:
        try:
            with tarfile.open(fileobj=self._writer, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                if self._entries is None:
                    tar.add(self._directory, arcname=".", recursive=True)
                else:
                    for name in self._entries():
                        path = os.path.join(self._directory, name)
                        tar.add(path, arcname=name, recursive=False, filter=_as_root)
        except BaseException as error:  # noqa: BLE001 - reported by the reader
            self.failure = error
        finally:
            try:
                self._writer.close()
            except OSError:
                pass

    def __iter__(self) -> Iterator[bytes]:
        try:
            while True:
                data = self._reader.read(self._chunk)
                if not data:
                    break
                yield data
        finally:
            self._reader.close()
            self._thread.join()
        self.check()

    def check(self) -> None:
        """Raises what stopped the packing, if anything did (the upload's
        call may end without saying)."""
        if self.failure is not None:
            raise SandboxException(f"cannot pack {self._directory}: {self.failure}")


def _as_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _inside(root: str, name: str) -> bool:
    target = os.path.realpath(os.path.join(root, name))
    return target == root or target.startswith(root + os.sep)


def unpack(source: "IO[bytes] | ChunkReader", directory: str) -> int:
    """Extracts the tar stream `source` into `directory` (made if missing);
    returns the number of entries."""
    os.makedirs(directory, exist_ok=True)
    root = os.path.realpath(directory)
    count = 0
    with tarfile.open(fileobj=cast(IO[bytes], source), mode="r|") as tar:
        for member in tar:
            name = member.name.lstrip("/")
            if not _inside(root, name) or (
                member.islnk() and not _inside(root, member.linkname.lstrip("/"))
            ):
                raise SandboxException(
                    f"the guest's tar has an entry that escapes {directory}: {member.name}"
                )
            if hasattr(tarfile, "tar_filter"):
                tar.extract(member, root, filter="tar")
            else:  # Python before the extraction filters
                tar.extract(member, root)
            count += 1
    return count


class ChunkReader:
    """A file object over an iterator of byte chunks (a download)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._buffer = b""

    def read(self, size: int = -1) -> bytes:
        pieces: List[bytes] = [self._buffer]
        have = len(self._buffer)
        while size < 0 or have < size:
            piece = next(self._chunks, None)
            if piece is None:
                break
            pieces.append(piece)
            have += len(piece)
        data = b"".join(pieces)
        if size < 0:
            self._buffer = b""
            return data
        self._buffer = data[size:]
        return data[:size]
