"""One message off a worker's connection, read under a deadline the worker cannot stretch.

`Connection.recv_bytes` blocks until the whole message has come: a worker (or the code it runs,
which holds the same socket) that writes a frame's header and then part of its body, or nothing
more, would hold the grading process there for ever, past every time-out, and with it a whole
batch. Here each read waits only until the deadline, and reads only what is there.
"""

from __future__ import annotations

import array
import fcntl
import multiprocessing.connection
import os
import struct
import termios
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

_SIZE, _LONG_SIZE = struct.Struct("!i"), struct.Struct("!Q")  # multiprocessing's frame: -1, then 8 bytes, for 2 GB+
_CHUNK = 1 << 20


class TooLarge(Exception):
    """The frame announces more bytes than the limit (or a size no sender writes)."""


class Late(Exception):
    """The deadline passed before the whole message had come."""


def receive(connection: Connection, limit: int, deadline: float) -> bytes:
    """The next message's bytes, framed as `Connection.send_bytes` frames them. EOFError where the
    other end closed; TooLarge, unread, beyond `limit`; Late at `deadline` (time.monotonic())."""
    (size,) = _SIZE.unpack(_exactly(connection, _SIZE.size, deadline))
    if size == -1:
        (size,) = _LONG_SIZE.unpack(_exactly(connection, _LONG_SIZE.size, deadline))
    if size < 0 or size > limit:
        raise TooLarge(size)
    return _exactly(connection, size, deadline)


def more_waiting(connection: Connection) -> bool:
    """Whether bytes wait to be read on `connection`. Not `Connection.poll`, which is also true once the other end
    has closed: a worker that replies and then exits (one whose wait was given up) has written one message, not two."""
    count = array.array("i", [0])
    try:
        fcntl.ioctl(connection.fileno(), termios.FIONREAD, count, True)
    except OSError:  # not a socket or pipe that says: what poll sees, unread, is taken for more
        return connection.poll(0)
    return count[0] > 0


def _exactly(connection: Connection, size: int, deadline: float) -> bytes:
    data = bytearray()
    while len(data) < size:
        left = deadline - time.monotonic()
        if left <= 0 or not multiprocessing.connection.wait([connection], left):
            raise Late(f"{len(data)} of {size} bytes")
        chunk = os.read(connection.fileno(), min(size - len(data), _CHUNK))  # what is there, at most
        if not chunk:
            raise EOFError
        data += chunk
    return bytes(data)
