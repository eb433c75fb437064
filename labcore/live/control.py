"""The control pipes to the ranks, written and read a chunk at a time against the call's deadline.

``Connection.send`` blocks until a rank has taken the whole request and ``Connection.recv``
until a whole reply is in, so a rank that is stopped (SIGSTOP, a debugger) or that stops
half-way through a large result would hold the notebook past any timeout. The notebook's ends
of the pipes are non-blocking instead: a request is written as far as each pipe takes it
whenever it is ready, and replies are cut out of whatever the pipe holds (multiprocessing's
framing, which the ranks' ``Connection`` reads and writes: a 4-byte signed length, or -1 and an
8-byte length, then the pickle). A reply larger than the cluster's ``reply_limit`` is refused
as soon as its length is known, before the bytes pile up in memory.
"""
from __future__ import annotations

import math
import os
import select
import struct
from multiprocessing.reduction import ForkingPickler

_CHUNK = 1 << 20
_SHORT = 0x7FFFFFFF  # longest message with a 4-byte length


def frame(message) -> bytes:
    """``message`` pickled and framed as ``Connection.send`` writes it."""
    body = ForkingPickler.dumps(message)
    head = struct.pack("!i", len(body)) if len(body) <= _SHORT else struct.pack("!iQ", -1, len(body))
    return head + body


class Outbox:
    """One request on its way to every rank, written as far as each pipe takes it."""

    def __init__(self, data: bytes, fds: list[int]):
        self.data = memoryview(data)
        self.sent = {fd: 0 for fd in fds}

    def write(self, fd: int) -> None:
        """Write what the pipe takes now; a pipe whose rank is gone counts as written (its
        process sentinel reports the death)."""
        start = self.sent[fd]
        try:
            self.sent[fd] += os.write(fd, self.data[start:start + _CHUNK])
        except BlockingIOError:
            pass
        except OSError:
            self.sent[fd] = len(self.data)

    def unsent(self) -> list[int]:
        """The pipes that have not yet taken the whole request."""
        return [fd for fd, n in self.sent.items() if n < len(self.data)]


def wait(readers: list, writers: list[int], timeout: float) -> tuple[list, list[int]]:
    """Like ``multiprocessing.connection.wait``, also for pipes ready to take more bytes.

    ``readers`` are connections or file descriptors; returns the readers ready to read and
    the descriptors of ``writers`` ready to write. One poll(2), as selectors' PollSelector would
    make it, without building a selector on every wait of every call.
    """
    by_fd: dict[int, object] = {}
    masks: dict[int, int] = {}
    for obj in readers:
        fd = obj if isinstance(obj, int) else obj.fileno()
        by_fd[fd], masks[fd] = obj, select.POLLIN
    for fd in writers:
        masks[fd] = masks.get(fd, 0) | select.POLLOUT
    poller = select.poll()
    for fd, mask in masks.items():
        poller.register(fd, mask)
    ready = poller.poll(max(0, math.ceil(timeout * 1000)))
    # a hang-up or an error wakes both sides, as selectors counts it
    return ([by_fd[fd] for fd, event in ready if event & ~select.POLLOUT and fd in by_fd],
            [fd for fd, event in ready if event & ~select.POLLIN and masks[fd] & select.POLLOUT])


class ReplyTooLarge(Exception):
    """A rank announced a reply larger than the limit (``nbytes``)."""

    def __init__(self, nbytes: int):
        super().__init__(nbytes)
        self.nbytes = nbytes


class ReplyGarbled(Exception):
    """The pipe held bytes that are not a framed pickle (something else wrote to it)."""


class ReplyStream:
    """The bytes a rank has sent on its control pipe, cut into messages."""

    def __init__(self, fd: int, limit: int):
        self.fd, self.limit = fd, limit
        self.buffer = bytearray()

    def read(self) -> list | None:
        """Read what the pipe holds; the messages now complete, or None at end of file."""
        try:
            data = os.read(self.fd, _CHUNK)
        except BlockingIOError:
            return []
        if not data:
            return None
        self.buffer += data
        messages = []
        while len(self.buffer) >= 4:
            size, head = struct.unpack("!i", self.buffer[:4])[0], 4
            if size == -1:
                if len(self.buffer) < 12:
                    break
                size, head = struct.unpack("!Q", self.buffer[4:12])[0], 12
            if size < 0:
                raise ReplyGarbled(f"a message length of {size}")
            if size > self.limit:
                raise ReplyTooLarge(size)
            if len(self.buffer) < head + size:
                break
            try:
                messages.append(ForkingPickler.loads(bytes(self.buffer[head:head + size])))
            except Exception as exc:  # a rank's replies always load: their bodies stay cloudpickled
                raise ReplyGarbled(f"{type(exc).__name__}: {exc}") from None
            del self.buffer[:head + size]
        return messages

    @property
    def partial(self) -> bool:
        """Whether part of a message is still on its way."""
        return bool(self.buffer)
