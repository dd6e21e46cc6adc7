"""An agent's code executor as smolagents' E2B executor writes one: a code
interpreter sandbox, packages installed with IPython's `!pip install`, then
the model's code run step by step, each step's value (the first
representation present, in smolagents' order) or its error fed back.

Written against E2B's SDK; the suite runs it with the import changed only.
The "model" is a list of canned steps; the package is a wheel made here
and uploaded, since the sandbox has no network."""

import base64
import io
import zipfile

from e2b_code_interpreter import Sandbox

PACKAGE = "agent_helpers"
SOURCE = "def double(x):\n    return 2 * x\n"


def wheel() -> bytes:
    """A pure-Python wheel of PACKAGE (a zip with its metadata)."""
    dist = f"{PACKAGE}-1.0.dist-info"
    files = {
        f"{PACKAGE}/__init__.py": SOURCE,
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: 1.0\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{dist}/RECORD"] = "".join(f"{name},,\n" for name in files) + f"{dist}/RECORD,,\n"
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return out.getvalue()


class E2BExecutor:
    """Runs a model's code in a sandbox, as an agent framework's executor does."""

    ORDER = ["jpeg", "png", "chart", "html", "javascript", "json", "latex", "markdown", "pdf", "svg", "text"]

    def __init__(self, additional_packages):
        self.sandbox = Sandbox.create()
        for name, data in additional_packages.items():
            self.sandbox.files.write(f"/tmp/{name}", data)
        wheels = " ".join(f"/tmp/{name}" for name in additional_packages)
        installed = self.sandbox.run_code(f"!pip install --no-index --target /tmp/agent-site {wheels}")
        if installed.error:
            raise RuntimeError(f"installing packages failed: {installed.error.value}")
        self.install_log = "".join(installed.logs.stdout)
        self.sandbox.run_code("import sys\nsys.path.insert(0, '/tmp/agent-site')")

    def __call__(self, code):
        execution = self.sandbox.run_code(code)
        logs = "".join(execution.logs.stdout)
        if execution.error:
            raise ValueError(f"{execution.error.name}: {execution.error.value}\n{logs}")
        for result in execution.results:
            if not result.is_main_result:
                continue
            for name in self.ORDER:
                value = getattr(result, name, None)
                if value is not None:
                    if name in ("png", "jpeg"):
                        return base64.b64decode(value), logs
                    return value, logs
        return None, logs

    def cleanup(self):
        self.sandbox.kill()


STEPS = [
    f"import {PACKAGE}\nprint('imported')\n{PACKAGE}.double(21)",
    "undefined_name + 1",
    "total = sum(range(10))\nprint(f'total is {total}')\ntotal",
]

executor = E2BExecutor({f"{PACKAGE}-1.0-py3-none-any.whl": wheel()})
try:
    assert "Successfully installed" in executor.install_log, executor.install_log
    memory = []
    for step in STEPS:
        try:
            value, logs = executor(step)
            memory.append(("observation", value, logs))
        except ValueError as error:
            memory.append(("error", str(error).splitlines()[0], ""))
    assert memory[0] == ("observation", "42", "imported\n"), memory[0]
    assert memory[1] == ("error", "NameError: name 'undefined_name' is not defined", ""), memory[1]
    assert memory[2] == ("observation", "45", "total is 45\n"), memory[2]
finally:
    executor.cleanup()
print("ok")
