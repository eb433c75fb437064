"""Checks of what a cluster is given for its ranks, before any rank starts.

``Cluster`` and ``EngineCluster`` hand ``env`` to every rank (``os.environ.update`` there) and
keep ``output_limit`` bytes of each rank's output per call in the notebook. A name the
operating system refuses would crash every rank as it starts; a limit without a ceiling
would let one chatty rank fill the notebook's memory.

Example
-------
>>> check_env({"NCCL_DEBUG": "INFO"})
{'NCCL_DEBUG': 'INFO'}
>>> check_env({"NCCL DEBUG=INFO": "1"})
Traceback (most recent call last):
...
ValueError: env names variables, and 'NCCL DEBUG=INFO' cannot be one (no '=', NUL or spaces, not empty): write it as {'NCCL_DEBUG': 'INFO'}
"""
from __future__ import annotations

from collections.abc import Mapping

from labcore import validate

# Output kept per rank, stream and call: past this the notebook holds more than a person reads.
MAX_OUTPUT_LIMIT = 256 << 20
# The values torch.distributed accepts for TORCH_DISTRIBUTED_DEBUG (c10d's DebugLevel).
_DEBUG_LEVELS = ("OFF", "INFO", "DETAIL")
# The longest timeout a call may have: a week. The system's waits hold it (poll takes milliseconds
# in a C int, 24.8 days) and no lesson needs a call that runs longer.
MAX_TIMEOUT_S = 7 * 24 * 3600
# The ranks' own process group waits longer than any call may, so whatever timeout a call is
# given, the notebook's deadline (and its hang report) ends a hang, never gloo's or NCCL's.
GROUP_TIMEOUT_S = MAX_TIMEOUT_S + 30


def check_env(env) -> dict:
    """``env`` as a dict of variable names to string values, or an error naming the bad entry."""
    if env is None:
        return {}
    if not isinstance(env, Mapping):
        raise TypeError(f"env must map variable names to string values, e.g. {{'NCCL_DEBUG': 'INFO'}}, "
                        f"not {type(env).__name__}")
    for name, value in env.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise TypeError("env must map variable names to string values, e.g. {'NCCL_DEBUG': 'INFO'}; "
                            f"got {name!r}: {value!r}")
        if not name or "=" in name or "\0" in name or any(c.isspace() for c in name):
            raise ValueError(f"env names variables, and {name!r} cannot be one (no '=', NUL or spaces, not "
                             "empty): write it as {'NCCL_DEBUG': 'INFO'}")
        if "\0" in value:
            raise ValueError(f"env[{name!r}] holds a NUL character, which no environment variable can")
        if name == "TORCH_DISTRIBUTED_DEBUG" and value.upper() not in _DEBUG_LEVELS:
            raise ValueError(f"TORCH_DISTRIBUTED_DEBUG is one of {', '.join(_DEBUG_LEVELS)} (torch refuses "
                             f"anything else as the ranks start), not {value!r}")
    return dict(env)


def check_output_limit(limit) -> int:
    """``limit`` if it is a whole number of bytes from 2 to :data:`MAX_OUTPUT_LIMIT`."""
    return validate.whole_number(limit, "output_limit", least=2, most=MAX_OUTPUT_LIMIT,
                                 must=f"a number of bytes (an int from 2 to {MAX_OUTPUT_LIMIT:,}, "
                                      f"{MAX_OUTPUT_LIMIT >> 20} MiB)")
