"""Output as it happens: callbacks see each line when the program writes it,
not when it ends."""

import time

from airlock import Sandbox

began = time.monotonic()


def show(stream: str):
    def print_line(text: str) -> None:
        for line in text.splitlines():
            print(f"[{time.monotonic() - began:5.2f} s] {stream}: {line}")

    return print_line


with Sandbox.create() as sandbox:
    sandbox.commands.run(
        "for i in 1 2 3; do echo step $i; sleep 1; done; echo done >&2",
        on_stdout=show("stdout"),
        on_stderr=show("stderr"),
    )
