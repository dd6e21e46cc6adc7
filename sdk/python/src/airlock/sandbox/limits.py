"""What the server accepts in one message, and the pieces the SDK sends."""

from __future__ import annotations

#: The server's bound on one message either way, with room for framing.
MAX_MESSAGE_BYTES = 4 * 1024 * 1024 + 64 * 1024
#: A data chunk (file, tar, stdin) the server accepts.
CHUNK_BYTES = 1024 * 1024
#: Files are sent in chunks of this size.
WRITE_CHUNK_BYTES = 256 * 1024
#: Stdin on a program's own stream goes in pieces of this size.
STDIN_PIECE_BYTES = CHUNK_BYTES // 4
