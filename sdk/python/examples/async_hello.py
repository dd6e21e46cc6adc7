"""The asyncio client: the same calls, awaited; several sandboxes at once."""

import asyncio

from airlock import AsyncSandbox


async def run_one(n: int) -> str:
    async with await AsyncSandbox.create(metadata={"example": "async"}) as sandbox:
        result = await sandbox.commands.run(f"echo sandbox {n}: $(hostname)")
        return result.stdout.strip()


async def main() -> None:
    for line in await asyncio.gather(*(run_one(n) for n in range(3))):
        print(line)


asyncio.run(main())
