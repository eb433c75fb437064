"""The readers on hostile input, before (commit 76cf9b2) and now, side by side.

Side by side in one run, each measurement in a fresh child process (so a runaway one can be
stopped at the time limit and its peak memory read):

  * ``nccl_log.parse`` on one line of 10,000, 20,000 and 200,000 characters (a line without
    spaces, as a long base64 blob or path in a captured log makes one), and on the lab's real
    logs (tests/data/nccl_*.log) joined into one text;
  * ``read_nccl_tests`` on the same long lines (under a ``*_perf`` table's header);
  * ``read_nccl_tests`` on a sparse file of 1 GiB and on /dev/zero: now refused before reading;
    the parser before read the whole file (a 128 MiB one is measured, /dev/zero never ends).

Targets: a 200,000-character line well under a second; files over 64 MiB refused in well under
a second, with nothing read. (On ordinary logs the parser now does more, three more tables and
the line kinds the one before skipped: its time there is shown too.)
Run:  PYTHONPATH=. .venv/bin/python benchmarks/bench_readers.py
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "76cf9b2"              # the parsers before they were made linear and bounded
LIMIT_S = 60                    # a child still running after this long is stopped
LENGTHS = (10_000, 20_000, 200_000)

CHILD = r"""
import importlib.util, json, resource, sys, time
from pathlib import Path
kind, which, module_file, arg = sys.argv[1:5]
if which == "before":
    spec = importlib.util.spec_from_file_location("before_" + kind, module_file)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
elif kind == "log":
    from labcore.readers import nccl_log as mod
else:
    from labcore.bench import reader as mod
if arg.startswith("line:"):
    n = int(arg[5:])
    line = "a" * n
    source = line if kind == "log" else "#  size count type redop root time algbw busbw #wrong\n" + line + "\n"
elif arg == "logs":
    source = "\n".join(p.read_text() for p in sorted(Path("tests/data").glob("nccl_*.log")))
else:
    source = Path(arg)
start = time.perf_counter()
try:
    (mod.parse if kind == "log" else mod.read_nccl_tests)(source)
    outcome = "read"
except (ValueError, FileNotFoundError) as exc:
    outcome = "refused: " + str(exc)[:90]
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(dict(seconds=seconds, peak_mib=peak, outcome=outcome)))
"""


def _before(path: str, folder: Path) -> Path | None:
    """The module at ``path`` as it was at :data:`BEFORE`, written to ``folder``; None without git."""
    try:
        text = subprocess.run(["git", "show", f"{BEFORE}:{path}"], cwd=ROOT, capture_output=True, text=True,
                              check=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    out = folder / Path(path).name
    out.write_text(text)
    return out


def _measure(kind: str, which: str, module: Path | None, arg: str) -> str:
    if which == "before" and module is None:
        return "(no git history here)"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    try:
        done = subprocess.run([sys.executable, "-c", CHILD, kind, which, str(module or ""), arg], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        return f"over {LIMIT_S} s (stopped)"
    if done.returncode != 0:
        return f"failed: {done.stderr.strip().splitlines()[-1][:80] if done.stderr.strip() else done.returncode}"
    r = json.loads(done.stdout.strip().splitlines()[-1])
    return f"{r['seconds'] * 1e3:9.1f} ms  {r['peak_mib']:7.0f} MiB  {r['outcome'][:60]}"


def _seconds(cell: str) -> float | None:
    try:
        return float(cell.split()[0]) / 1e3
    except (ValueError, IndexError):
        return LIMIT_S if cell.startswith("over") else None


def _row(label: str, kind: str, arg: str, modules: dict) -> None:
    before = _measure(kind, "before", modules[kind], arg)
    now = _measure(kind, "now", None, arg)
    old_s, new_s = _seconds(before), _seconds(now)
    if not (old_s and new_s):
        ratio = "-"
    elif old_s >= new_s:
        ratio = f"{'>' if before.startswith('over') else ''}{old_s / new_s:,.0f}x faster"
    else:
        ratio = f"{new_s / old_s:.1f}x slower"

    print(f"{label:<44} | before: {before:<62} | now: {now:<62} | {ratio}")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        modules = {"log": _before("labcore/live/nccl_log.py", folder),
                   "tests": _before("labcore/bench/reader.py", folder)}
        print(f"before = commit {BEFORE}; each cell: time, peak memory of its process, outcome; "
              f"a child over {LIMIT_S} s is stopped")
        for n in LENGTHS:
            _row(f"nccl_log.parse, one line of {n:,} chars", "log", f"line:{n}", modules)
        _row("nccl_log.parse, the lab's real logs joined", "log", "logs", modules)
        for n in LENGTHS:
            _row(f"read_nccl_tests, one line of {n:,} chars", "tests", f"line:{n}", modules)
        sparse = folder / "sparse_1g.txt"
        with open(sparse, "wb") as f:
            f.truncate(1 << 30)                          # 1 GiB on paper, no blocks on disk
        print(f"{'read_nccl_tests, a 1 GiB sparse file':<44} | now: {_measure('tests', 'now', None, str(sparse))}")
        print(f"{'read_nccl_tests, /dev/zero':<44} | now: {_measure('tests', 'now', None, '/dev/zero')}")
        smaller = folder / "sparse_128m.txt"
        with open(smaller, "wb") as f:
            f.truncate(128 << 20)
        print(f"{'read_nccl_tests, a 128 MiB sparse file':<44} | before: "
              f"{_measure('tests', 'before', modules['tests'], str(smaller))}"
              f" | now: {_measure('tests', 'now', None, str(smaller))}")
        print("(before, /dev/zero is read until the memory runs out: not run)")


if __name__ == "__main__":
    main()
