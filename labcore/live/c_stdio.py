"""C's stdio on a rank: what C code prints (NCCL's log) reaches the notebook whole, in its own call.

NCCL writes each INFO and WARN line with one ``vfprintf`` to ``ncclDebugFile``, which is C's
``stdout`` unless ``NCCL_DEBUG_FILE`` names a file (NCCL 2.30.7, src/debug.cc: ``FILE*
ncclDebugFile = stdout;`` and the ``vfprintf`` closing ``ncclDebugLogV``). For a file of its
own NCCL turns block buffering off (``setlinebuf``, same file); ``stdout`` it leaves as C set
it up, and on a pipe that is block-buffered. The rank's fd 1 is a pipe to the notebook, so a
call's lines stayed in the rank's buffer until it filled (arriving in some later call) or were
lost when the rank ended by ``os._exit`` or a kill, which flush nothing. CPython unbuffers C's
streams only under ``-u``/``PYTHONUNBUFFERED`` (``config_init_stdio`` in Python/initconfig.c),
so a CI machine saw the lines and a learner's notebook did not.

Each rank therefore makes C's stdout line-buffered, as NCCL does for its own file, and flushes
all C streams at the end of every call and before it exits. The alternative, ``NCCL_DEBUG_FILE``
per rank, would catch NCCL alone (not gloo's or the learner's C output), lose the order of C
and Python lines, and leave files for the lab to read and remove.

Example
-------
>>> flush()   # anywhere: a no-op where nothing is buffered
"""
from __future__ import annotations

import ctypes

_IOLBF = 1  # glibc's and the BSDs' <stdio.h>
_BUFFER_BYTES = 1 << 16
_buffer = None  # the line buffer C's stdout writes into: it must live as long as the process

try:
    _libc = ctypes.CDLL(None)
    _libc.fflush.argtypes = [ctypes.c_void_p]
    _libc.setvbuf.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_size_t]
except (OSError, AttributeError):  # no C library to speak of (not a POSIX system)
    _libc = None


def _stdout():
    """C's ``FILE *stdout`` (glibc and musl export ``stdout``, macOS ``__stdoutp``)."""
    for name in ("stdout", "__stdoutp"):
        try:
            return ctypes.c_void_p.in_dll(_libc, name)
        except ValueError:
            continue
    return None


def line_buffer_stdout() -> None:
    """Make C's stdout line-buffered, dropping bytes a parent left in its buffer before the fork.

    Called once, as a rank starts: what the forkserver had buffered is the forkserver's, and
    flushing it from every rank would print it once per rank. The buffer is the lab's own: glibc
    ignores the size when given none, and a stream CPython unbuffered (``PYTHONUNBUFFERED``) keeps
    its one-byte buffer, a system call per character of a line.
    """
    global _buffer
    stream = _stdout() if _libc is not None else None
    if stream is None or not stream.value:
        return
    purge = getattr(_libc, "__fpurge", None)  # glibc and musl (<stdio_ext.h>)
    if purge is not None:
        purge.argtypes = [ctypes.c_void_p]
        purge(stream)
    _buffer = _buffer or ctypes.create_string_buffer(_BUFFER_BYTES)
    _libc.setvbuf(stream, _buffer, _IOLBF, _BUFFER_BYTES)


def flush() -> None:
    """Write out whatever every C stream holds (``fflush(NULL)``)."""
    if _libc is not None:
        _libc.fflush(None)
