"""envd's files through E2B's own Python SDK, changed only by environment
variables (tests/e2b/README.md): `/files` uploads and downloads as text,
bytes and streams, several files in one write, 100 MiB both ways, the
filesystem service (list, exists, rename, remove, make_dir, get_info,
watch_dir), and bad input answered in E2B's shape while the server keeps
serving."""

import hashlib
import io
import os
import time

import httpx
import pytest

from e2b import FileType, FilesystemEventType, Sandbox
from e2b.exceptions import (
    AuthenticationException,
    FileNotFoundException,
    InvalidArgumentException,
    SandboxException,
)
from e2b.sandbox.filesystem.filesystem import WriteEntry

MIB = 1 << 20


@pytest.fixture(scope="module")
def sbx():
    sandbox = Sandbox.create()
    yield sandbox
    sandbox.kill()


def envd(sbx, token):
    """A raw client for the sandbox's envd, as the SDK addresses it."""
    headers = {"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "49983", "X-Access-Token": token}
    return httpx.Client(base_url=os.environ["E2B_SANDBOX_URL"], headers=headers, timeout=30)


def test_text_and_bytes(sbx):
    info = sbx.files.write("/tmp/t/hello.txt", "héllo\n")
    assert info.path == "/tmp/t/hello.txt"
    assert info.name == "hello.txt"
    assert info.type == FileType.FILE
    assert sbx.files.read("/tmp/t/hello.txt") == "héllo\n"
    sbx.files.write("/tmp/t/b.bin", bytes(range(256)))
    assert sbx.files.read("/tmp/t/b.bin", format="bytes") == bytearray(range(256))
    sbx.files.write("/tmp/t/empty", b"")
    assert sbx.files.read("/tmp/t/empty", format="bytes") == bytearray()


def test_gzip_both_ways(sbx):
    data = os.urandom(MIB) + b"z" * (4 * MIB)
    sbx.files.write("/tmp/t/gz.bin", data, gzip=True)
    assert sbx.files.get_info("/tmp/t/gz.bin").size == len(data)
    assert sbx.files.read("/tmp/t/gz.bin", format="bytes", gzip=True) == bytearray(data)


def test_relative_paths_resolve_in_the_home(sbx):
    info = sbx.files.write("rel.txt", "home")
    assert info.path.endswith("/rel.txt")
    assert info.path.startswith("/")
    assert sbx.files.read(info.path) == "home"
    assert sbx.files.read("rel.txt") == "home"


def test_streams(sbx):
    data = os.urandom(3 * MIB + 17)
    sbx.files.write("/tmp/t/stream.bin", io.BytesIO(data))
    got = b"".join(sbx.files.read("/tmp/t/stream.bin", format="stream"))
    assert got == data


def test_a_list_of_files_in_one_write(sbx):
    infos = sbx.files.write_files(
        [
            WriteEntry(path="/tmp/many/a.txt", data="a"),
            WriteEntry(path="/tmp/many/sub/b.txt", data=b"bb"),
            WriteEntry(path="/tmp/many/c.txt", data="ccc"),
        ]
    )
    assert [i.path for i in infos] == ["/tmp/many/a.txt", "/tmp/many/sub/b.txt", "/tmp/many/c.txt"]
    assert sbx.files.read("/tmp/many/sub/b.txt") == "bb"
    assert sbx.files.read("/tmp/many/c.txt") == "ccc"


def test_100_mib_both_ways(sbx):
    block = os.urandom(MIB)
    want = hashlib.sha256(block * 100).hexdigest()

    def chunks():
        for _ in range(100):
            yield block

    sbx.files.write("/tmp/big.bin", chunks())
    assert sbx.files.get_info("/tmp/big.bin").size == 100 * MIB
    got = hashlib.sha256()
    for chunk in sbx.files.read("/tmp/big.bin", format="stream"):
        got.update(chunk)
    assert got.hexdigest() == want
    # The multipart form, from a binary file object.
    sbx.files.remove("/tmp/big.bin")
    sbx.files.write("/tmp/big2.bin", io.BytesIO(block * 100), use_octet_stream=False)
    got = hashlib.sha256()
    for chunk in sbx.files.read("/tmp/big2.bin", format="stream"):
        got.update(chunk)
    assert got.hexdigest() == want
    sbx.files.remove("/tmp/big2.bin")


def test_list_exists_info(sbx):
    sbx.files.write_files(
        [WriteEntry(path="/tmp/ls/one.txt", data="1"), WriteEntry(path="/tmp/ls/d/two.txt", data="22")]
    )
    names = sorted(e.name for e in sbx.files.list("/tmp/ls"))
    assert names == ["d", "one.txt"]
    deep = sorted(e.path for e in sbx.files.list("/tmp/ls", depth=2))
    assert deep == ["/tmp/ls/d", "/tmp/ls/d/two.txt", "/tmp/ls/one.txt"]
    kinds = {e.name: e.type for e in sbx.files.list("/tmp/ls")}
    assert kinds == {"d": FileType.DIR, "one.txt": FileType.FILE}
    assert sbx.files.exists("/tmp/ls/one.txt")
    assert not sbx.files.exists("/tmp/ls/nope")
    info = sbx.files.get_info("/tmp/ls/d/two.txt")
    assert (info.name, info.type, info.size) == ("two.txt", FileType.FILE, 2)
    assert info.permissions.startswith("-")
    assert info.owner
    with pytest.raises(FileNotFoundException):
        sbx.files.get_info("/tmp/ls/nope")
    with pytest.raises(InvalidArgumentException):
        sbx.files.list("/tmp/ls", depth=0)


def test_rename_remove_make_dir(sbx):
    assert sbx.files.make_dir("/tmp/mk/a/b") is True
    assert sbx.files.make_dir("/tmp/mk/a/b") is False
    assert sbx.files.get_info("/tmp/mk/a/b").type == FileType.DIR
    sbx.files.write("/tmp/mk/x.txt", "x")
    # The directory is the default user's, as the file written in it is.
    assert sbx.files.get_info("/tmp/mk/a/b").owner == sbx.files.get_info("/tmp/mk/x.txt").owner
    moved = sbx.files.rename("/tmp/mk/x.txt", "/tmp/mk/a/y.txt")
    assert (moved.path, moved.name) == ("/tmp/mk/a/y.txt", "y.txt")
    assert not sbx.files.exists("/tmp/mk/x.txt")
    assert sbx.files.read("/tmp/mk/a/y.txt") == "x"
    sbx.files.remove("/tmp/mk")
    assert not sbx.files.exists("/tmp/mk")
    with pytest.raises(FileNotFoundException):
        sbx.files.rename("/tmp/mk/none", "/tmp/mk/other")


def test_missing_files_and_directories(sbx):
    with pytest.raises(FileNotFoundException):
        sbx.files.read("/tmp/no/such/file")
    with pytest.raises(InvalidArgumentException):
        sbx.files.read("/tmp")


def test_watch_dir_reports_the_file_written(sbx):
    sbx.files.make_dir("/tmp/w")
    handle = sbx.files.watch_dir("/tmp/w")
    try:
        sbx.files.write("/tmp/w/file.txt", "watched")
        sbx.files.rename("/tmp/w/file.txt", "/tmp/w/moved.txt")
        sbx.files.remove("/tmp/w/moved.txt")
        seen = []
        deadline = time.time() + 20
        while time.time() < deadline:
            seen += [(e.name, e.type) for e in handle.get_new_events()]
            if ("moved.txt", FilesystemEventType.REMOVE) in seen:
                break
            time.sleep(0.2)
        assert ("file.txt", FilesystemEventType.WRITE) in seen, seen
        assert ("file.txt", FilesystemEventType.RENAME) in seen, seen
        assert ("moved.txt", FilesystemEventType.REMOVE) in seen, seen
        # Never the temporary our atomic write goes through.
        assert all(name in ("file.txt", "moved.txt") for name, _ in seen), seen
    finally:
        handle.stop()
    with pytest.raises(FileNotFoundException):
        sbx.files.watch_dir("/tmp/no/such/dir")


def test_watch_dir_with_entries_and_recursive(sbx):
    sbx.files.make_dir("/tmp/we/sub")
    handle = sbx.files.watch_dir("/tmp/we", include_entry=True, recursive=True)
    try:
        sbx.files.write("/tmp/we/sub/deep.txt", "deep")
        events = []
        for _ in range(100):
            events += handle.get_new_events()
            if any(e.type == FilesystemEventType.WRITE for e in events):
                break
            time.sleep(0.2)
        write = next(e for e in events if e.type == FilesystemEventType.WRITE)
        assert write.name == "sub/deep.txt"
        assert write.entry is not None
        assert (write.entry.path, write.entry.size) == ("/tmp/we/sub/deep.txt", 4)
    finally:
        handle.stop()


def test_signed_urls(sbx):
    """download_url / upload_url: the signature stands for the access
    token. The URL names no sandbox with E2B_SANDBOX_URL (only a
    PORT-ID.DOMAIN host would), so the route headers are added here."""
    route = {"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "49983"}
    upload = sbx.upload_url("/tmp/signed/up.txt", use_signature_expiration=60)
    r = httpx.post(upload, files={"file": ("up.txt", b"signed upload")}, headers=route)
    assert r.status_code == 200, r.text
    assert r.json()[0]["path"] == "/tmp/signed/up.txt"
    download = sbx.download_url("/tmp/signed/up.txt")
    r = httpx.get(download, headers=route)
    assert (r.status_code, r.content) == (200, b"signed upload")


def test_bad_input_in_e2b_shape(sbx):
    # Failed authentications count against the client's address (the
    # front's throttle, shared by every suite on the server,
    # tests/e2b/README.md): this file makes one, in the next test.
    token = sbx._envd_access_token
    with envd(sbx, token=token) as raw:
        # A part cut short.
        r = raw.post(
            "/files",
            content=b'--xx\r\nContent-Disposition: form-data; name="file"; filename="/tmp/cut"\r\n\r\nabc',
            headers={"Content-Type": "multipart/form-data; boundary=xx"},
        )
        assert r.status_code == 400, r.text
        assert r.json()["code"] == 400
        # No boundary; no file part.
        r = raw.post("/files", content=b"x", headers={"Content-Type": "multipart/form-data"})
        assert r.status_code == 400
        r = raw.post(
            "/files",
            content=b'--xx\r\nContent-Disposition: form-data; name="other"\r\n\r\nabc\r\n--xx--\r\n',
            headers={"Content-Type": "multipart/form-data; boundary=xx"},
        )
        assert r.status_code == 400
        assert r.json()["code"] == 400
        # A path with NUL, and a download without a path.
        r = raw.get("/files", params={"path": "/tmp/a\0b"})
        assert r.status_code == 400
        r = raw.get("/files")
        assert r.status_code == 400
    assert not sbx.files.exists("/tmp/cut")
    with pytest.raises((InvalidArgumentException, SandboxException)):
        sbx.files.write("/tmp/a\0b", "x")
    # `..` is the guest's to resolve: it stays a path in the sandbox.
    sbx.files.write("/tmp/t/../dots.txt", "dots")
    assert sbx.files.read("/tmp/dots.txt") == "dots"
    # File metadata is refused by name, not dropped.
    with pytest.raises(SandboxException, match="metadata"):
        sbx.files.write("/tmp/meta.txt", "x", metadata={"owner": "me"})
    assert not sbx.files.exists("/tmp/meta.txt")
    # The guest's root is not removed, however it is spelled.
    with pytest.raises(InvalidArgumentException):
        sbx.files.remove("/tmp/..")
    assert sbx.files.exists("/etc")
    # The server keeps serving.
    assert sbx.files.read("/tmp/t/hello.txt") == "héllo\n"


def test_a_wrong_token_through_the_sdk(sbx):
    """The one failed authentication of this file: E2B's 401, which the
    SDK raises as AuthenticationException."""
    other = Sandbox(
        sandbox_id=sbx.sandbox_id,
        envd_version=sbx._envd_version,
        envd_access_token="wrong",
        sandbox_domain=sbx.sandbox_domain,
        connection_config=type(sbx.connection_config)(
            extra_sandbox_headers={
                "E2b-Sandbox-Id": sbx.sandbox_id,
                "E2b-Sandbox-Port": "49983",
                "X-Access-Token": "wrong",
            }
        ),
    )
    with pytest.raises(AuthenticationException):
        other.files.read("/tmp/t/hello.txt")


def test_the_async_sdk():
    """AsyncSandbox: the same calls, and watch_dir as WatchDir's stream."""
    import asyncio

    from e2b import AsyncSandbox

    async def run():
        sandbox = await AsyncSandbox.create()
        try:
            files = sandbox.files
            await files.write("/tmp/as/a.txt", "async")
            assert await files.read("/tmp/as/a.txt") == "async"
            assert [e.name for e in await files.list("/tmp/as")] == ["a.txt"]
            assert await files.exists("/tmp/as/a.txt")
            assert await files.make_dir("/tmp/as/d")
            seen = []
            handle = await files.watch_dir("/tmp/as", lambda event: seen.append((event.name, event.type)))
            try:
                await files.write("/tmp/as/w.txt", "w")
                await files.remove("/tmp/as/a.txt")
                for _ in range(100):
                    if ("a.txt", FilesystemEventType.REMOVE) in seen:
                        break
                    await asyncio.sleep(0.2)
            finally:
                await handle.stop()
            assert ("w.txt", FilesystemEventType.WRITE) in seen, seen
            assert ("a.txt", FilesystemEventType.REMOVE) in seen, seen
            with pytest.raises(FileNotFoundException):
                await files.read("/tmp/as/none")
        finally:
            await sandbox.kill()

    asyncio.run(run())
