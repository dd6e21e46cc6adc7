"""Times as the API carries them (milliseconds since the epoch) and as the
models hold them (aware UTC datetimes), and the clock that stamps output
messages."""

from __future__ import annotations

import time
from datetime import datetime, timezone


def from_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def now_ns() -> int:
    return time.time_ns()
