"""Starting the local server on demand, as the ``airlock`` CLI does: when
nobody answers on the socket, run ``airlock --verbose serve --socket SOCKET
--ingress local`` in the background (a session of its own, its output
appended to ``daemon.log`` beside the socket) and wait, 10 s at most, until
it listens. ``--ingress local`` serves the HTTP ingress into sandboxes
(``sandbox.get_host``) on a loopback port of its own."""

from __future__ import annotations

import os
import shutil
import socket as _socket
import subprocess
import threading
import time
from typing import List, Optional

from .exceptions import SandboxException

LOG_NAME = "daemon.log"
START_TIMEOUT = 10.0

_lock = threading.Lock()
# Servers this process started: kept so that they are not reaped as
# garbage while they run.
_started: List["subprocess.Popen[bytes]"] = []


def _answers(path: str) -> bool:
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(1.0)
        sock.connect(path)
        return True
    except OSError:
        return False
    finally:
        sock.close()


def _binary(configured: Optional[str]) -> str:
    found = configured or shutil.which("airlock")
    if not found:
        raise SandboxException(
            "no Airlock server answers on the local socket and the `airlock` binary "
            "was not found to start one: put it on PATH or set AIRLOCK_BIN, or set "
            "AIRLOCK_HOST to use a remote server"
        )
    return found


def _tail(path: str, lines: int = 20) -> str:
    try:
        with open(path, "rb") as log:
            return b"\n".join(log.read().splitlines()[-lines:]).decode(errors="replace")
    except OSError:
        return ""


def ensure_local_server(socket_path: str, airlock_bin: Optional[str]) -> None:
    """Returns once a server listens on `socket_path`, starting one if
    needed."""
    if _answers(socket_path):
        return
    with _lock:
        if _answers(socket_path):
            return
        program = _binary(airlock_bin)
        directory = os.path.dirname(socket_path)
        os.makedirs(directory, exist_ok=True)
        log_path = os.path.join(directory, LOG_NAME)
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            child = subprocess.Popen(
                [program, "--verbose", "serve", "--socket", socket_path, "--ingress", "local"],
                stdin=subprocess.DEVNULL,
                stdout=fd,
                stderr=fd,
                start_new_session=True,
            )
        except OSError as error:
            raise SandboxException(f"cannot start the local server with {program}: {error}") from None
        finally:
            os.close(fd)
        _started.append(child)
        began = time.monotonic()
        pause = 0.01
        while True:
            if _answers(socket_path):
                return
            exited = child.poll() is not None
            if exited or time.monotonic() - began >= START_TIMEOUT:
                time.sleep(pause)
                if _answers(socket_path):
                    return
                raise SandboxException(
                    f"the local server did not start within {time.monotonic() - began:.1f} s "
                    f"on {socket_path}; its log ({log_path}) ends:\n{_tail(log_path)}"
                )
            time.sleep(pause)
            pause = min(pause * 2, 0.2)
