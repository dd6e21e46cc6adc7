"""A server in the background, fed through its stdin.

The program keeps running whatever this script does; ``commands.connect``
attaches to it again later and replays what it wrote (the guest keeps its
newest 1 MiB of output), which E2B cannot do once a detached command has
been left for a while.
"""

import time

from airlock import Sandbox

SERVER = r"""
import sys
print("calculator ready", flush=True)
for line in sys.stdin:
    try:
        print(line.strip(), "=", eval(line, {"__builtins__": {"sum": sum, "range": range}}), flush=True)
    except Exception as error:
        print(line.strip(), "->", type(error).__name__, flush=True)
"""

with Sandbox.create() as sandbox:
    sandbox.files.write("/root/calc.py", SERVER)
    server = sandbox.commands.run(
        "python3 -u /root/calc.py",
        background=True,
        on_stdout=lambda text: print(text, end=""),
    )
    for question in ("6 * 7", "2 ** 10", "1 / 0"):
        server.send_stdin(question + "\n")
    while server.stdout.count("\n") < 4:
        time.sleep(0.1)

    # Walk away; the program runs on. Attach again and replay its output.
    server.disconnect()
    print("running:", [p.pid for p in sandbox.commands.list() if p.running])
    again = sandbox.commands.connect(server.pid)
    again.send_stdin("sum(range(101))\n")
    again.close_stdin()
    result = again.wait()
    print("replayed and finished:")
    print(result.stdout, end="")
