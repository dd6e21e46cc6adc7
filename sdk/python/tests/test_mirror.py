"""The blocking and the asyncio suites mirror each other: the same tests,
by the same names, in the same order, so that a check made of one client
is made of the other. Read from the files: nothing runs a server."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import List

HERE = Path(__file__).parent


def names_in(name: str) -> List[str]:
    tree = ast.parse((HERE / name).read_text())
    return [node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")]


def test_the_sync_and_async_suites_have_the_same_tests() -> None:
    sync, asyncio = names_in("test_sync.py"), names_in("test_async.py")
    assert sync, "no tests found in test_sync.py"
    assert sync == asyncio, (
        f"only in test_sync.py: {sorted(set(sync) - set(asyncio))}; "
        f"only in test_async.py: {sorted(set(asyncio) - set(sync))}; or the order differs"
    )
