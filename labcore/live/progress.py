"""What a rank leaves in its run folder for the notebook's hang report.

Two facts a stack dump cannot give:

- **how many collectives a finished rank issued in its call**: a rank that returned after 0
  collectives never entered the one the others wait in (a skipped collective), while one that
  returned after as many as the others entered it with other arguments (gloo lets the rank with
  the shorter tensor go). The count is the difference of the default group's sequence numbers
  (``_get_sequence_number_for_group``, one per collective on each backend) across the call,
  kept in a 16-byte memory map: no system call on the way.
- **what the GPU is still running**: NCCL collectives return as soon as they are queued, so the
  worker waits for the device before it replies (:func:`finish_gpu_work`). A rank stuck there
  shows no collective in its Python stack; torch's flight recorder knows which one its GPU is in
  (``TORCH_FR_BUFFER_SIZE``), and a snapshot of its unfinished entries goes to a file the
  report reads.

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
# Waiting this long for the GPU is worth a flight-recorder snapshot, then again at this period.
_GPU_SNAPSHOT_AFTER_S = 0.5
_GPU_SNAPSHOT_EVERY_S = 1.0


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
        end = _issued()
        count = end - self._start if end is not None and self._start is not None else -1
        _CALLS.pack_into(self._map, 0, request_id, count)


def gpu_snapshot() -> str:
    """The flight recorder's unfinished entries and group status, as torch's JSON dump."""
    import torch

    return torch._C._distributed_c10d._dump_fr_trace_json(includeCollectives=True, onlyActive=True).decode()


def _write_atomically(path: str, text: str) -> None:
    partial = f"{path}.partial"
    with open(partial, "w") as f:
        f.write(text)
    os.replace(partial, path)


def _snapshot_while_waiting(path: str, done: threading.Event) -> None:
    last = None
    wait = _GPU_SNAPSHOT_AFTER_S
    while not done.wait(wait):
        try:
            text = gpu_snapshot()
        except Exception:  # a recorder that is off or broken: the stack dump still tells something
            return
        if text != last:
            _write_atomically(path, text)
            last = text
        wait = _GPU_SNAPSHOT_EVERY_S


def finish_gpu_work(device, path: str) -> None:
    """Return once the GPU has run what this call queued; nothing to do on a CPU rank.

    ``torch.cuda.synchronize`` waits for every stream of the device (NCCL's own included) and
    releases the GIL while it waits (torch/cuda/__init__.py ``synchronize``), so the snapshot
    thread runs beside it; a wait that outlasts the call's deadline ends in the hang report.
    """
    if getattr(device, "type", "cpu") != "cuda":
        return
    import torch

    done = threading.Event()
    watcher = threading.Thread(target=_snapshot_while_waiting, args=(path, done), name="labcore-gpu-wait",
                               daemon=True)
    watcher.start()
    try:
        torch.cuda.synchronize(device)
    finally:
        done.set()
        watcher.join()
    try:
        os.remove(path)  # what the GPU was in is over
    except FileNotFoundError:
        pass


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
