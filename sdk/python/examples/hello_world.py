"""Hello world: a sandbox, a command, its output.

Runs against the local Airlock server (started on demand) or the one named
by AIRLOCK_HOST / AIRLOCK_API_KEY / AIRLOCK_CA_CERT.
"""

from airlock import Sandbox

with Sandbox.create() as sandbox:  # killed when the block ends
    result = sandbox.commands.run("echo hello from $(hostname); uname -sr")
    print(result.stdout, end="")
    print("exit code:", result.exit_code)
