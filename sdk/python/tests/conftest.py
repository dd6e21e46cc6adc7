"""What the SDK's suites share: a private ``airlock serve`` (real QEMU
sandboxes), a TLS one with a throwaway CA, an event loop in a thread for
the asyncio checks, and helpers.

The session's server runs ``target/debug/airlock`` (or ``$AIRLOCK_BIN``)
with state, saved and server directories of its own; ``AIRLOCK_STATE_DIR``
points the SDK's default socket at it, so the tests connect as a user with
no arguments would. Every test has a time limit (``AIRLOCK_TEST_LIMIT``
seconds, default 300) past which it fails rather than hangs. A missing
binary or artifact is a failure naming the set-up command, never a skip.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Coroutine, Dict, Iterator, List, Optional, Set, Tuple, TypeVar

import pytest

REPO = Path(__file__).resolve().parents[3]
LIMIT = int(os.environ.get("AIRLOCK_TEST_LIMIT", "300"))
MIB = 1024 * 1024

#: A cell whose value is a 1x1 PNG (``_repr_png_``).
TINY_PNG = (
    "class Chart:\n"
    "    def _repr_png_(self):\n"
    "        import base64\n"
    "        return base64.b64decode("
    "'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==')\n"
    "Chart()\n"
)

#: A template file: its context copied, and a START program whose READY
#: check needs a file of it.
TEMPLATE_FILE = (
    "FROM default\n"
    "COPY . /srv/\n"
    "START sh -c 'cp /srv/hello.txt /tmp/started; exec sleep infinity'\n"
    "READY file /tmp/started\n"
)

T = TypeVar("T")


def airlock_bin() -> str:
    path = os.environ.get("AIRLOCK_BIN") or str(REPO / "target" / "debug" / "airlock")
    if not os.access(path, os.X_OK):
        pytest.fail(
            f"{path} is missing: run `cargo build --workspace --bins` (scripts/test does), "
            "or set AIRLOCK_BIN"
        )
    return path


def _answers(path: str) -> bool:
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.connect(path)
        return True
    except OSError:
        return False
    finally:
        sock.close()


def _processes_mentioning(text: str) -> List[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


#: What ``airlock serve`` prints on stderr once a listener is bound.
LISTENING = "airlock: listening on "
INGRESS = "airlock: ingress on "


class Server:
    """A private ``airlock serve`` in `root`; with `tls`, also on
    127.0.0.1 over TLS with a certificate from a CA made here; with
    `ingress`, serving the HTTP ingress on a free loopback port
    (``ingress`` holds its address)."""

    def __init__(
        self, root: Path, tls: bool = False, extra: Tuple[str, ...] = (), ingress: bool = False
    ) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.socket = str(root / "daemon.sock")
        self.log = root / "daemon.log"
        self.env = dict(os.environ)
        self.env.update(
            AIRLOCK_STATE_DIR=str(root),
            AIRLOCK_SAVED_DIR=str(root / "saved"),
            AIRLOCK_SERVER_DIR=str(root / "server"),
        )
        for name in ("AIRLOCK_HOST", "AIRLOCK_API_KEY", "AIRLOCK_CA_CERT"):
            self.env.pop(name, None)
        args = [airlock_bin(), "--verbose", "serve", "--socket", self.socket, *extra]
        self.port: Optional[int] = None
        self.ca: Optional[str] = None
        self.ingress: Optional[str] = None
        wanted: Set[str] = set()
        if tls:
            self.ca, cert, key = make_tls_files(root)
            args += ["--listen", "127.0.0.1:0", "--tls-cert", cert, "--tls-key", key]
            wanted.add(LISTENING)
        if ingress:
            args += ["--ingress", "127.0.0.1:0"]
            wanted.add(INGRESS)
        log = open(self.log, "ab")
        self.child = subprocess.Popen(
            args,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.PIPE if wanted else log,
            start_new_session=True,
        )
        if wanted:
            # The bound addresses, read from stderr (the rest is copied to
            # the log).
            assert self.child.stderr is not None
            for raw in self.child.stderr:
                line = raw.decode(errors="replace").strip()
                log.write(raw)
                if line.startswith(LISTENING):
                    self.port = int(line.rsplit(":", 1)[1])
                    wanted.discard(LISTENING)
                elif line.startswith(INGRESS):
                    self.ingress = line[len(INGRESS):]
                    wanted.discard(INGRESS)
                if not wanted:
                    break
            else:
                log.flush()
                raise AssertionError(f"airlock serve said no address:\n{self.daemon_log()}")
            threading.Thread(target=self._copy_stderr, args=(log,), daemon=True).start()
        deadline = time.monotonic() + 30
        while not _answers(self.socket):
            if self.child.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"airlock serve did not start:\n{self.daemon_log()}")
            time.sleep(0.05)

    def _copy_stderr(self, log: Any) -> None:
        assert self.child.stderr is not None
        for raw in self.child.stderr:
            log.write(raw)
            log.flush()

    @property
    def host(self) -> str:
        return f"https://localhost:{self.port}"

    def daemon_log(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-8000:]
        except OSError:
            return ""

    def airlock(self, *args: str) -> str:
        """``airlock ARGS`` against this server; its stdout."""
        out = subprocess.run(
            [airlock_bin(), *args], env=self.env, capture_output=True, timeout=120
        )
        assert out.returncode == 0, f"airlock {args}: {out.stderr.decode()}"
        return out.stdout.decode()

    def key(self, name: str, *options: str) -> str:
        """A new API key (``airlock key create``, shown on its last line)."""
        return self.airlock("key", "create", name, *options).strip().splitlines()[-1].strip()

    def stop(self) -> None:
        if self.child.poll() is None:
            self.child.send_signal(signal.SIGTERM)
            try:
                self.child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.child.kill()
                self.child.wait()
        for pid in _processes_mentioning(str(self.root)):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def make_tls_files(root: Path) -> Tuple[str, str, str]:
    """A throwaway CA and a certificate for localhost signed by it:
    (ca, cert, key) PEM paths."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "airlock test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = (root / "ca.pem", root / "server.pem", root / "server.key")
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(paths[0]), str(paths[1]), str(paths[2])


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The session's private server, with HTTP ingress on a loopback port;
    the SDK's default socket points at it."""
    running = Server(tmp_path_factory.mktemp("airlock"), ingress=True)
    saved: Dict[str, Optional[str]] = {}
    for name in ("AIRLOCK_HOST", "AIRLOCK_API_KEY", "AIRLOCK_CA_CERT", "AIRLOCK_STATE_DIR"):
        saved[name] = os.environ.pop(name, None)
    os.environ["AIRLOCK_STATE_DIR"] = str(running.root)
    try:
        yield running
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        running.stop()


@pytest.fixture(scope="session")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A second server, also listening on TCP with TLS (and serving no
    ingress)."""
    running = Server(tmp_path_factory.mktemp("airlock-tls"), tls=True)
    try:
        yield running
    finally:
        running.stop()


class Loop:
    """An event loop in a thread; ``run`` waits for a coroutine on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()


@pytest.fixture(scope="module")
def aio(server: Server) -> Iterator[Loop]:
    """A module's event loop: the asyncio checks run on it, so that
    sandboxes made in one serve the next."""
    loop = Loop()
    yield loop
    loop.close()


class Pattern:
    """Deterministic bytes read in chunks, hashed as they are read: a
    file object for streaming uploads of any size."""

    def __init__(self, size: int, seed: bytes = b"airlock") -> None:
        self.size = size
        self.left = size
        self.seed = seed
        self.counter = 0
        self.digest = hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        out = bytearray()
        while len(out) < n:
            block = hashlib.sha512(self.seed + self.counter.to_bytes(8, "little")).digest() * 64
            self.counter += 1
            out += block[: n - len(out)]
        self.left -= n
        data = bytes(out)
        self.digest.update(data)
        return data


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Fails a test that runs past LIMIT seconds instead of hanging."""

    def expired(signum: int, frame: Any) -> None:
        raise TimeoutError(f"{item.name} ran past {LIMIT} s (AIRLOCK_TEST_LIMIT)")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(LIMIT)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
