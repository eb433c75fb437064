"""Replies read from a rank's control pipe a chunk at a time, against the call's deadline.

``Connection.recv`` blocks until a whole message is in, so a rank that stops half-way through
sending a large result would hold the notebook past any timeout. The notebook instead reads
whatever the pipe holds each time it is ready and cuts messages out of the stream itself
(multiprocessing's framing: a 4-byte signed length, or -1 and an 8-byte length, then the
pickle), refusing a reply larger than the cluster's ``reply_limit`` as soon as its length is
known, before the bytes pile up in memory.
"""
from __future__ import annotations

import os
import struct
from multiprocessing.reduction import ForkingPickler

_CHUNK = 1 << 20


class ReplyTooLarge(Exception):
    """A rank announced a reply larger than the limit (``nbytes``)."""

    def __init__(self, nbytes: int):
        super().__init__(nbytes)
        self.nbytes = nbytes


class ReplyStream:
    """The bytes a rank has sent on its control pipe, cut into messages."""

    def __init__(self, fd: int, limit: int):
        self.fd, self.limit = fd, limit
        self.buffer = bytearray()

    def read(self) -> list | None:
        """Read once (the pipe must be ready); the messages now complete, or None at end of file."""
        data = os.read(self.fd, _CHUNK)
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
            if size > self.limit:
                raise ReplyTooLarge(size)
            if len(self.buffer) < head + size:
                break
            messages.append(ForkingPickler.loads(bytes(self.buffer[head:head + size])))
            del self.buffer[:head + size]
        return messages

    @property
    def partial(self) -> bool:
        """Whether part of a message is still on its way."""
        return bool(self.buffer)
