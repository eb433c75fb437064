"""What a rank leaves in its run folder for the notebook's hang report.

Two facts a stack dump cannot give:

- **how many collectives a rank issued in its call**: a rank that returned after 0 collectives never
  entered the one the others wait in (a skipped collective), while one that returned after as many
  as the others entered it with other arguments (gloo lets the rank with the shorter tensor go). The
  count is the difference of the default group's sequence numbers (``_get_sequence_number_for_group``,
  one per collective on each backend) across the call, kept in a 16-byte memory map: no system call
  on the way. A call that runs past half a second has its count so far written there too.
- **which collective the rank queued and has not finished**: NCCL collectives return as soon as
  they are queued, so a rank whose peer never joined waits for its GPU later, at the next
  ``.item()``, ``.tolist()``, synchronize, or in the worker before it replies
  (:func:`finish_gpu_work`), and its Python stack shows no collective. torch's flight recorder knows
  which one is unfinished (NCCL's, :mod:`labcore.live.fr_dumps`); :class:`CallWatch` writes a snapshot
  of its unfinished entries to a file the report reads while a call runs past half a second. gloo's
  ``async_op=True`` with a ``wait()`` elsewhere leaves the same shape on the CPU.

Example
-------
>>> describe_gpu('{"entries": [{"profiling_name": "nccl:all_reduce", "collective_seq_id": 5, '
...              '"pg_id": 0, "is_p2p": false, "state": "started"}], '
...              '"pg_status": {"0": {"last_completed_collective": "4"}}}')
('all_reduce', 'all_reduce #5 of group 0 (started)')
"""
from __future__ import annotations

import json
import mmap
import os
import struct
import threading

_CALLS = struct.Struct("<qq")  # request id, collectives issued in it (-1: not counted)
# A call running this long is worth a count and a flight-recorder snapshot, then again at this period.
_WATCH_AFTER_S = 0.5
_WATCH_EVERY_S = 1.0


# -- on the rank ------------------------------------------------------------------------------
_c10d = None
_counted: tuple = (None, ())  # the default group whose backends were looked up, and those backends


def _issued() -> int | None:
    """Collectives issued so far on the default group, over its backends; None when other groups
    exist (their collectives would go uncounted) or there is no group. A few microseconds: the
    group's backends are looked up once per group."""
    global _counted, _c10d
    if _c10d is None:  # imported here: the notebook reads this module's files without torch
        from torch.distributed import distributed_c10d as _c10d
    world = _c10d.GroupMember.WORLD
    try:
        if world is None or len(_c10d._world.pg_map) != 1:
            return None
        if _counted[0] is not world:
            # gloo alone serves both device types: one backend, registered twice (distributed_c10d.py)
            backends = {id(b): b for b in map(world._get_backend, world._device_types)}
            _counted = (world, tuple(backends.values()))
        return sum(b._get_sequence_number_for_group() for b in _counted[1])
    except (RuntimeError, ValueError, AttributeError):
        return None


class CallCounter:
    """Counts the collectives of each call; the notebook reads the count after a hang."""

    def __init__(self, path: str):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            os.ftruncate(fd, _CALLS.size)
            self._map = mmap.mmap(fd, _CALLS.size)
        finally:
            os.close(fd)
        self._start: int | None = None

    def start(self) -> None:
        self._start = _issued()

    def finish(self, request_id: int) -> None:
        self.tick(request_id)

    def tick(self, request_id: int) -> None:
        """Write how many collectives call ``request_id`` has issued so far."""
        end = _issued()
        count = end - self._start if end is not None and self._start is not None else -1
        _CALLS.pack_into(self._map, 0, request_id, count)


def gpu_snapshot() -> str:
    """The flight recorder's unfinished entries and group status, as torch's JSON dump (NCCL's
    recorder where torch has it, :func:`labcore.live.fr_dumps.read_json`)."""
    from labcore.live import fr_dumps

    return fr_dumps.read_json(only_active=True)


def _write_atomically(path: str, text: str) -> None:
    partial = f"{path}.partial"
    with open(partial, "w") as f:
        f.write(text)
    os.replace(partial, path)


class CallWatch:
    """Keeps, while a call runs past half a second, its collective count so far and a snapshot of the
    collectives the rank queued and has not finished, for the hang report.

    One thread per rank, woken by :meth:`begin` and sent back to sleep by :meth:`end`: a call
    pays for two events, not for a thread.
    """

    def __init__(self, counter: CallCounter, path: str):
        self.counter, self.path = counter, path
        self._request = 0
        self._running, self._ended = threading.Event(), threading.Event()
        self._lock = threading.Lock()   # a snapshot is written whole, or not after the call ended
        threading.Thread(target=self._watch, name="labcore-call-watch", daemon=True).start()

    def begin(self, request_id: int) -> None:
        self.counter.start()
        self._request = request_id
        self._ended.clear()
        self._running.set()

    def end(self, request_id: int) -> None:
        self._ended.set()
        self._running.clear()
        with self._lock:
            self.counter.finish(request_id)
            try:
                os.remove(self.path)  # what the call was in is over
            except FileNotFoundError:
                pass

    def _watch(self) -> None:
        while True:
            self._running.wait()
            if self._ended.wait(_WATCH_AFTER_S):
                continue
            last = None
            while True:
                with self._lock:
                    if self._ended.is_set():
                        break
                    self.counter.tick(self._request)
                    last = self._snapshot(last)
                if self._ended.wait(_WATCH_EVERY_S):
                    break

    def _snapshot(self, last: str | None) -> str | None:
        try:
            text = gpu_snapshot()
        except Exception:  # a recorder that is off or broken: the count and the stack dump still tell something
            return last
        if text != last:
            _write_atomically(self.path, text)
        return text


def finish_gpu_work(device) -> None:
    """Return once the GPU has run what this call queued; nothing to do on a CPU rank.

    ``torch.cuda.synchronize`` waits for every stream of the device (NCCL's own included) and
    releases the GIL while it waits (torch/cuda/__init__.py ``synchronize``), so the rank's
    :class:`CallWatch` runs beside it; a wait that outlasts the call's deadline ends in the hang report.
    """
    if getattr(device, "type", "cpu") != "cuda":
        return
    import torch

    torch.cuda.synchronize(device)


# -- in the notebook --------------------------------------------------------------------------
def read_calls(path: str, request_id: int) -> int | None:
    """Collectives a rank issued in call ``request_id`` (None: not counted, or another call's)."""
    try:
        with open(path, "rb") as f:
            got, count = _CALLS.unpack(f.read(_CALLS.size))
    except (OSError, struct.error):
        return None
    return count if got == request_id and count >= 0 else None


def describe_gpu(text: str | None) -> tuple[str, str] | None:
    """(op, description) of the first collective a rank's GPU has not finished, from a snapshot."""
    try:
        trace = json.loads(text) if text else None
        entries, status = trace["entries"], trace.get("pg_status", {})
    except (ValueError, TypeError, KeyError):
        return None
    for entry in entries:
        try:
            seq = int(entry["p2p_seq_id"] if entry.get("is_p2p") else entry["collective_seq_id"])
            done = int(status.get(str(entry["pg_id"]), {}).get("last_completed_collective", -1))
            name = str(entry["profiling_name"]).split(":", 1)[-1]
        except (KeyError, ValueError, TypeError):
            continue
        if entry.get("is_p2p") or seq > done:
            return name.split()[0], f"{name} #{seq} of group {entry['pg_id']} ({entry.get('state', '?')})"
    return None


def read_gpu(path: str) -> tuple[str, str] | None:
    """:func:`describe_gpu` of the snapshot a rank left at ``path``, if any."""
    try:
        with open(path, errors="replace") as f:
            return describe_gpu(f.read(1 << 22))
    except OSError:
        return None
