"""The Python SDK's side of ``cargo bench --bench api`` (tests/benches/api.rs).

The benchmark starts this once with its server's socket and sends one
command a line; each is timed here, in this process, and answered with the
milliseconds it took, so that the benchmark can alternate SDK calls with its
own (the library's, the Rust client's, the CLI's) take by take, on the same
server in the same minutes. One connection is kept across calls, as a
program using the SDK would.

    create sync | create async
        ``Sandbox.create()`` (or ``AsyncSandbox.create()``) to the first
        stdout chunk of ``echo ready``, started by argv (``commands.start``)
        so that the guest does what the Rust rows' ``Processes.Start`` of
        ``echo`` does; the sandbox is killed after, untimed.
    exec sync ID | exec async ID
        ``commands.run("true")`` (``/bin/sh -c true``) to its result in the
        running sandbox ``ID``.
    get sync ID | get async ID
        ``get_info()`` of ``ID``: a call the server answers without the
        guest, so that the client's own cost is not lost in the guest's.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time
from typing import Dict

from airlock import AsyncSandbox, Sandbox


def create_sync(socket: str) -> float:
    first = threading.Event()
    began = time.perf_counter()
    sandbox = Sandbox.create(socket=socket)
    handle = sandbox.commands.start(["echo", "ready"], on_stdout=lambda _: first.set())
    first.wait()
    took = time.perf_counter() - began
    handle.wait()
    if sandbox.get_info().origin != "pool":
        raise SystemExit("the SDK's sandbox did not come from the pool")
    sandbox.kill()
    return took


async def create_async(socket: str) -> float:
    first = asyncio.Event()
    began = time.perf_counter()
    sandbox = await AsyncSandbox.create(socket=socket)
    handle = await sandbox.commands.start(["echo", "ready"], on_stdout=lambda _: first.set())
    await first.wait()
    took = time.perf_counter() - began
    await handle.wait()
    if (await sandbox.get_info()).origin != "pool":
        raise SystemExit("the SDK's sandbox did not come from the pool")
    await sandbox.kill()
    return took


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--socket", required=True)
    args = parser.parse_args()
    loop = asyncio.new_event_loop()
    sync_sandboxes: Dict[str, Sandbox] = {}
    async_sandboxes: Dict[str, AsyncSandbox] = {}
    for line in sys.stdin:
        words = line.split()
        if words == ["create", "sync"]:
            took = create_sync(args.socket)
        elif words == ["create", "async"]:
            took = loop.run_until_complete(create_async(args.socket))
        elif len(words) == 3 and words[:2] == ["exec", "sync"]:
            sandbox = sync_sandboxes.get(words[2])
            if sandbox is None:
                sandbox = sync_sandboxes[words[2]] = Sandbox.connect(words[2], socket=args.socket)
            began = time.perf_counter()
            sandbox.commands.run("true")
            took = time.perf_counter() - began
        elif len(words) == 3 and words[:2] == ["exec", "async"]:
            asandbox = async_sandboxes.get(words[2])
            if asandbox is None:
                asandbox = loop.run_until_complete(AsyncSandbox.connect(words[2], socket=args.socket))
                async_sandboxes[words[2]] = asandbox
            began = time.perf_counter()
            loop.run_until_complete(asandbox.commands.run("true"))
            took = time.perf_counter() - began
        elif len(words) == 3 and words[:2] == ["get", "sync"]:
            sandbox = sync_sandboxes.get(words[2])
            if sandbox is None:
                sandbox = sync_sandboxes[words[2]] = Sandbox.connect(words[2], socket=args.socket)
            began = time.perf_counter()
            sandbox.get_info()
            took = time.perf_counter() - began
        elif len(words) == 3 and words[:2] == ["get", "async"]:
            asandbox = async_sandboxes.get(words[2])
            if asandbox is None:
                asandbox = loop.run_until_complete(AsyncSandbox.connect(words[2], socket=args.socket))
                async_sandboxes[words[2]] = asandbox
            began = time.perf_counter()
            loop.run_until_complete(asandbox.get_info())
            took = time.perf_counter() - began
        else:
            raise SystemExit(f"bench_sdk: unknown command {line!r}")
        print(f"{took * 1000:.4f}", flush=True)


if __name__ == "__main__":
    main()
