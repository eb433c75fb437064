"""Reading the files a learner hands the lab: bounded, regular files only, named in every error.

Every reader (nccl-tests output, NCCL logs, ``nvidia-smi topo -m``, baselines, flight
recorder dumps) reads through here, so none of them can be made to read a device
(``/dev/zero`` never ends), wait on a FIFO with no writer, fill the memory with a huge
(or sparse) file, or read a bundled file from outside its folder.

- :func:`read_bytes_limited` / :func:`read_text_limited`: the file is looked at before it
  is opened (opening a device can act on it), opened without blocking, checked again on
  the open descriptor, and read up to one byte past ``limit``, so a file that grows, or a
  /proc file that says it is empty, is never read whole. Text is decoded as UTF-8 with
  undecodable bytes (a log cut mid-character) as U+FFFD.
- :func:`check_text_limited`: the same bound for text given as a string.
- :func:`bundled`: a file of the lab's own, by name, inside its folder only.

Each failure is one ``ValueError`` (``FileNotFoundError`` for a missing file) that names
the path and says what to give instead.

Example
-------
>>> import tempfile, pathlib
>>> from labcore.files import read_text_limited
>>> path = pathlib.Path(tempfile.mkdtemp()) / "out.txt"
>>> _ = path.write_text("# nThread 1 nGpus 1")
>>> read_text_limited(path, what="nccl-tests output")
'# nThread 1 nGpus 1'
>>> read_text_limited("/dev/zero", what="nccl-tests output")
Traceback (most recent call last):
...
ValueError: /dev/zero is a device, not nccl-tests output: give a regular file
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

# The most any reader of the lab reads: real nccl-tests outputs, NCCL logs and topology
# matrices are KiB to a few MiB; a baseline of 4096 sizes x 2 placements x repeats a few MiB.
MAX_TEXT_BYTES = 64 << 20


def read_bytes_limited(path, limit: int = MAX_TEXT_BYTES, what: str = "a file", *,
                       fix: str = "give a regular file", missing: str | None = None,
                       too_large: str | None = None, follow_links: bool = True) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``limit`` bytes.

    Parameters
    ----------
    path : str or Path.
    limit : the most bytes read; a larger file is refused unread.
    what : what the file should be, for the messages ("a baseline", "an NCCL log").
    fix : what to give instead, ending every message.
    missing : the end of the message for a missing file (default ``fix``).
    too_large : the end of the message for a file over ``limit`` (default ``fix``).
    follow_links : False refuses a symbolic link (its last part), read or opened.
    """
    path = Path(path)
    if "\0" in str(path):
        raise ValueError(f"{str(path)!r} is not a file name (it holds a NUL character): {fix}")
    try:
        if not follow_links and os.path.islink(path):
            raise ValueError(f"{path} is a link, not {what}: {fix}")
        _check_kind(path, os.stat(path), limit, what, fix, too_large)
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | (0 if follow_links else getattr(os, "O_NOFOLLOW", 0))
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise FileNotFoundError(f"no {_bare(what)} at {path}: {missing or fix}") from None
    except IsADirectoryError:
        raise ValueError(f"{path} is a folder, not {what}: {fix}") from None
    except OSError as exc:
        raise ValueError(f"cannot read {_the(what)} {path} ({exc.strerror or type(exc).__name__}): check the "
                         "path and its permissions") from None
    try:
        _check_kind(path, os.fstat(fd), limit, what, fix, too_large)
        os.set_blocking(fd, True)
        return _read_up_to(fd, path, limit, what, fix, too_large)
    except OSError as exc:
        raise ValueError(f"cannot read {_the(what)} {path} ({exc.strerror or type(exc).__name__}): check the "
                         "path and its permissions") from None
    except MemoryError:
        raise ValueError(f"ran out of memory reading {_the(what)} {path}; free some memory, or {fix}") from None
    finally:
        os.close(fd)


def read_text_limited(path, limit: int = MAX_TEXT_BYTES, what: str = "a file", **messages) -> str:
    """The text of ``path`` (see :func:`read_bytes_limited`), undecodable bytes as U+FFFD."""
    return read_bytes_limited(path, limit, what, **messages).decode("utf-8", errors="replace")


def check_text_limited(text: str, limit: int = MAX_TEXT_BYTES, what: str = "the text",
                       fix: str = "pass a shorter text") -> str:
    """``text`` itself if it holds at most ``limit`` characters, else ValueError (nothing is parsed)."""
    if len(text) > limit:
        raise ValueError(f"{what} holds {len(text) / (1 << 20):.1f} M characters, more than the "
                         f"{limit >> 20} MiB the lab reads: {fix}")
    return text


def bundled(folder, name: str, suffix: str = "", what: str = "file") -> Path:
    """The path of the bundled file ``name`` (+ ``suffix``) inside ``folder``, never outside it.

    A name with a path separator, ``..``, a NUL or a leading dot is refused, and so is a
    name that resolves (through a link) outside ``folder``; an unknown name lists the
    names there are.
    """
    folder = Path(folder)
    names = sorted(p.name.removesuffix(suffix) for p in folder.glob(f"*{suffix}") if p.is_file())
    text = str(name)
    listed = ", ".join(names) or "none"
    if (not text or "/" in text or "\\" in text or "\0" in text or text.startswith(".")
            or os.sep in text or (os.altsep and os.altsep in text)):
        raise ValueError(f"{text!r} is not the name of a bundled {what}: give one of {listed} "
                         "(a name, not a path)")
    path = folder / f"{text}{suffix}"
    if text not in names or folder.resolve() not in path.resolve().parents:
        raise ValueError(f"no bundled {what} named {text!r}: choose one of {listed}")
    return path


def _check_kind(path: Path, info: os.stat_result, limit: int, what: str, fix: str, too_large) -> None:
    if stat.S_ISDIR(info.st_mode):
        raise ValueError(f"{path} is a folder, not {what}: {fix}")
    if not stat.S_ISREG(info.st_mode):
        kind = ("a pipe (FIFO)" if stat.S_ISFIFO(info.st_mode) else
                "a device" if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode) else
                "a socket" if stat.S_ISSOCK(info.st_mode) else "not a regular file")
        raise ValueError(f"{path} is {kind}, not {what}: {fix}")
    if info.st_size > limit:
        raise ValueError(_too_large(path, info.st_size, limit, what, too_large or fix))


def _read_up_to(fd: int, path: Path, limit: int, what: str, fix: str, too_large) -> bytes:
    chunks, total = [], 0
    while total <= limit:
        chunk = os.read(fd, min(1 << 20, limit + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    if total > limit:
        raise ValueError(_too_large(path, None, limit, what, too_large or fix))
    return b"".join(chunks)


def _too_large(path: Path, size: int | None, limit: int, what: str, fix: str) -> str:
    how_big = f"is {size / (1 << 20):.1f} MiB," if size is not None else "holds"
    return f"{path} {how_big} more than the {limit >> 20} MiB {what} may have: {fix}"


def _bare(what: str) -> str:
    """'a baseline' -> 'baseline' (for 'no baseline at ...')."""
    for article in ("a ", "an ", "the "):
        if what.startswith(article):
            return what[len(article):]
    return what


def _the(what: str) -> str:
    """'a baseline' -> 'the baseline' (for 'cannot read the baseline ...')."""
    return f"the {_bare(what)}"


__all__ = ["MAX_TEXT_BYTES", "read_bytes_limited", "read_text_limited", "check_text_limited", "bundled"]
