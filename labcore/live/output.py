"""What the ranks print, carried to the notebook through pipes and capped per call.

Each rank's fds 1 and 2 are the write ends of two pipes whose read ends only the
notebook holds. Pipes rather than files: a rank that prints without end blocks
once the pipe is full instead of filling the disk, the notebook drains them while
it waits for replies (so a call's timeout still fires on time), and whatever a
rank wrote just before it crashed is still in the pipe to be read.

Per call and stream the notebook keeps the first and the last ``limit / 2``
bytes and counts what it dropped in between.
"""
from __future__ import annotations

import fcntl
import os
from multiprocessing.connection import Connection

_F_SETPIPE_SZ = 1031  # Linux: a 1 MiB pipe lets a chatty rank run on between drains
_READ_CHUNK = 1 << 20


class CappedStream:
    """The head and tail of one stream's bytes since the last :meth:`take`."""

    def __init__(self, limit: int):
        self.half = max(1, limit // 2)
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def add(self, data: bytes) -> None:
        room = self.half - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if not data:
            return
        self.tail += data
        excess = len(self.tail) - self.half
        if excess > 0:
            self.dropped += excess
            del self.tail[:excess]

    def take(self) -> str:
        """The text kept since the last call, with a line saying how much was dropped; then reset."""
        text = self.head.decode(errors="replace")
        if self.dropped:
            if not text.endswith("\n"):
                text += "\n"
            text += (f"[labcore: {self.dropped:,} bytes of output dropped here; the first and last "
                     f"{self.half:,} bytes are kept]\n")
        text += self.tail.decode(errors="replace")
        self.head, self.tail, self.dropped = bytearray(), bytearray(), 0
        return text


class RankOutput:
    """The read ends of one rank's stdout and stderr pipes, and what they have delivered."""

    def __init__(self, limit: int):
        self.fds: dict[str, int] = {}
        self.writers: dict[str, Connection] = {}  # a Connection travels to a forkserver child
        for kind in ("out", "err"):
            read_fd, write_fd = os.pipe()
            try:
                fcntl.fcntl(read_fd, _F_SETPIPE_SZ, _READ_CHUNK)
            except OSError:
                pass  # not Linux, or above the system's pipe-max-size: the default size works
            os.set_blocking(read_fd, False)
            self.fds[kind], self.writers[kind] = read_fd, Connection(write_fd, readable=False)
        self.streams = {kind: CappedStream(limit) for kind in self.fds}

    def close_writers(self) -> None:
        """Drop the notebook's copies of the write ends once the rank holds its own."""
        for conn in self.writers.values():
            conn.close()
        self.writers = {}

    def drain(self, fd: int | None = None) -> None:
        """Read what is waiting in one pipe (or both) without blocking."""
        for kind, own in list(self.fds.items()):
            if fd is not None and own != fd:
                continue
            while True:
                try:
                    data = os.read(own, _READ_CHUNK)
                except BlockingIOError:
                    break
                if not data:  # every writer is gone: nothing more will come
                    os.close(own)
                    del self.fds[kind]
                    break
                self.streams[kind].add(data)
                if fd is not None:
                    break  # one chunk per wake-up keeps the caller's deadline checks frequent

    def take(self) -> tuple[str, str]:
        self.drain()
        return self.streams["out"].take(), self.streams["err"].take()

    def close(self) -> None:
        self.close_writers()
        for fd in self.fds.values():
            os.close(fd)
        self.fds = {}
