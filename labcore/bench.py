"""``labcore.bench``: the nccl-tests-style harness, which lives in :mod:`labcore.live.bench`.

This name makes ``import labcore.bench`` and ``from labcore.bench import sweep`` work
and give the very same module as ``labcore.live.bench``.
"""
import sys

from labcore.live import bench as _bench

sys.modules[__name__] = _bench
