"""An MCP-style toolkit over E2B's asyncio client, as tool servers write
one: a sandbox per session created at once, tools that run code, run shell
commands and write files, sessions listed through the paginator, and every
sandbox killed at the end.

Written against E2B's SDK; the suite runs it with the import changed only."""

import asyncio

from e2b_code_interpreter import AsyncSandbox


class Toolkit:
    def __init__(self, sandbox):
        self.sandbox = sandbox

    async def run_python(self, code):
        execution = await self.sandbox.run_code(code)
        if execution.error:
            return f"error: {execution.error.name}: {execution.error.value}"
        return execution.text or "".join(execution.logs.stdout)

    async def run_shell(self, command):
        result = await self.sandbox.commands.run(command)
        return result.stdout

    async def write_file(self, path, content):
        info = await self.sandbox.files.write(path, content)
        return info.path


async def main():
    sandboxes = await asyncio.gather(*(AsyncSandbox.create(metadata={"toolkit": "ported"}) for _ in range(2)))
    try:
        kits = [Toolkit(s) for s in sandboxes]
        answers = await asyncio.gather(*(kit.run_python(f"{n} * 21") for n, kit in enumerate(kits, 1)))
        assert answers == ["21", "42"], answers
        path = await kits[0].write_file("report.txt", "written by a tool\n")
        assert path.startswith("/") and path.endswith("/report.txt"), path
        assert await kits[0].run_shell("cat ~/report.txt") == "written by a tool\n"
        assert (await kits[1].run_python("1/0")).startswith("error: ZeroDivisionError"), "error"
        paginator = AsyncSandbox.list()
        listed = []
        while paginator.has_next:
            listed += [info.sandbox_id for info in await paginator.next_items()]
        assert all(s.sandbox_id in listed for s in sandboxes), listed
    finally:
        await asyncio.gather(*(s.kill() for s in sandboxes))


asyncio.run(main())
print("ok")
