"""The Python SDK's figures for ``cargo bench --bench api`` (tests/benches/api.rs),
which runs this against its own server, in the same run as the library's
and the API's figures, and prints them side by side.

Measured on the server's Unix socket, with one connection kept across takes
as a program using the SDK would:

- ``create``: ``Sandbox.create()`` from the warm pool to the first stdout
  chunk of ``echo ready`` (started by argv, ``commands.start``, so that the
  guest does what the Rust rows' ``Processes.Start`` of ``echo`` does), each
  take once the pool holds a frozen member; the sandbox is killed after.
  Blocking and asyncio clients alternate.
- ``exec``: ``commands.run("true")`` (``/bin/sh -c true``) to its result, in
  one running sandbox (``--sandbox``), blocking and asyncio alternating.

Prints one JSON object: the times in milliseconds of each.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import threading
import time
from typing import Dict, List

from airlock import AsyncSandbox, Sandbox


def frozen_member(state_dir: str, limit: float = 180.0) -> None:
    """Waits until a QEMU of the server's (its command line names the state
    directory) is stopped: the pool has refilled."""
    deadline = time.monotonic() + limit
    needle = state_dir.encode()
    while True:
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/comm") as comm:
                    if not comm.read().startswith("qemu-system"):
                        continue
                with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                    if needle not in cmdline.read():
                        continue
                with open(f"/proc/{pid}/stat") as stat:
                    if stat.read().rsplit(")", 1)[1].split()[0] == "T":
                        time.sleep(0.2)  # settled, as the Rust rows wait
                        return
            except OSError:
                continue
        if time.monotonic() > deadline:
            raise SystemExit("the pool did not refill within 180 s")
        time.sleep(0.02)


def create_sync(socket: str) -> float:
    first = threading.Event()
    began = time.perf_counter()
    sandbox = Sandbox.create(socket=socket)
    handle = sandbox.commands.start(["echo", "ready"], on_stdout=lambda _: first.set())
    first.wait()
    took = time.perf_counter() - began
    handle.wait()
    assert sandbox.get_info().origin == "pool", "not from the pool"
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
    assert (await sandbox.get_info()).origin == "pool", "not from the pool"
    await sandbox.kill()
    return took


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--socket", required=True)
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--takes", type=int, default=10)
    parser.add_argument("--sandbox", required=True, help="a running sandbox for the exec rows")
    parser.add_argument("--execs", type=int, default=50)
    args = parser.parse_args()

    loop = asyncio.new_event_loop()
    times: Dict[str, List[float]] = {"create_sync": [], "create_async": [], "exec_sync": [], "exec_async": []}
    for take in range(args.takes * 2):
        frozen_member(args.state_dir)
        if take % 2 == 0:
            times["create_sync"].append(create_sync(args.socket))
        else:
            times["create_async"].append(loop.run_until_complete(create_async(args.socket)))

    sandbox = Sandbox.connect(args.sandbox, socket=args.socket)
    asandbox = loop.run_until_complete(AsyncSandbox.connect(args.sandbox, socket=args.socket))
    for _ in range(3):  # warm both connections
        sandbox.commands.run("true")
        loop.run_until_complete(asandbox.commands.run("true"))
    for _ in range(args.execs):
        began = time.perf_counter()
        sandbox.commands.run("true")
        times["exec_sync"].append(time.perf_counter() - began)
        began = time.perf_counter()
        loop.run_until_complete(asandbox.commands.run("true"))
        times["exec_async"].append(time.perf_counter() - began)
    print(json.dumps({name: [t * 1000 for t in values] for name, values in times.items()}))


if __name__ == "__main__":
    main()
