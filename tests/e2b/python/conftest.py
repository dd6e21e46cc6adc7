"""What every E2B SDK test shares: nothing but environment variables.

``scripts/e2b-sdks test`` sets them (tests/e2b/README.md): E2B_API_KEY,
E2B_API_URL, E2B_SANDBOX_URL, E2B_DOMAIN, and E2B_TEST_OTHER_KEY, a second
key of the same server. The SDKs read the first four themselves; the tests
use the official packages as any program would.
"""

import os
from typing import Iterator

import pytest
from e2b import Sandbox


def _need(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.exit(f"{name} is not set: run these tests with scripts/e2b-sdks test", 2)
    return value


@pytest.fixture(scope="session", autouse=True)
def e2b_env() -> None:
    for name in ("E2B_API_KEY", "E2B_API_URL", "E2B_SANDBOX_URL"):
        _need(name)


@pytest.fixture(scope="session")
def other_key() -> str:
    """A second API key: its sandboxes are not the first key's."""
    return _need("E2B_TEST_OTHER_KEY")


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    """A fresh sandbox of the default template, killed after the test."""
    sbx = Sandbox.create(timeout=120)
    try:
        yield sbx
    finally:
        sbx.kill()
