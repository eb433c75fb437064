"""Bad input to the benchmark (CLI, sweep, baselines, read_nccl_tests): one line naming the fix,
before any rank starts (the CLI exits 2); nothing here starts a cluster unless it says so."""
import json
from pathlib import Path

import numpy as np
import pytest

from labcore.bench.cli import main as bench_main
from labcore.evidence import cli_gate

pytestmark = pytest.mark.live


def main(argv):
    """The bench's command line as ``python -m labcore bench`` runs it: with the evidence gate."""
    return bench_main(argv, gate=cli_gate)


ROOT = Path(__file__).resolve().parents[1]
RECORDED = ROOT / "tests" / "data" / "bench_gate_recorded_2ranks.json"
RUN = ["all_reduce", "-g", "2", "-b", "1K", "-e", "1M", "-f", "32", "-n", "1", "-w", "0"]


def _status(argv):
    try:
        return main(argv)
    except SystemExit as stop:
        return stop.code


def _refused(argv, message, capfd):
    assert _status(argv) == 2
    out, err = capfd.readouterr()
    assert message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err and out == ""
    return err


def _baseline(tmp_path, name, change=lambda r: r):
    rows = [change(dict(r)) for r in json.loads(RECORDED.read_text())["rows"] if r["run"] == "baseline"]
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"format": "labcore-bench-baseline/2", "params": {}, "rows": rows}))
    return path


def test_a_folder_given_as_baseline_is_named(tmp_path, capfd):
    _refused(RUN + ["--baseline", str(tmp_path)], f"{tmp_path} is a folder, not a baseline", capfd)


def test_a_baseline_that_is_no_regular_file_or_too_large_is_refused_unread(tmp_path, capfd):
    # Small stand-ins for /dev/zero (which would be read until the memory ran out): nothing is read.
    import os

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)                                        # no writer: reading it would wait forever
    _refused(RUN + ["--baseline", str(fifo)], f"{fifo} is a pipe (FIFO), not a baseline", capfd)
    _refused(RUN + ["--baseline", "/dev/null"], "/dev/null is a device, not a baseline", capfd)
    sparse = tmp_path / "sparse.json"
    with open(sparse, "wb") as f:
        f.truncate(65 << 20)                               # 65 MiB on paper, no blocks on disk
    _refused(RUN + ["--baseline", str(sparse)], f"{sparse} is 65.0 MiB, more than the 64 MiB a baseline may have",
             capfd)


def test_a_baseline_read_is_bounded_even_when_the_file_says_it_is_empty(monkeypatch):
    from labcore.bench import baseline

    proc = Path("/proc/self/maps")                         # a regular file whose st_size is 0
    if not proc.exists() or proc.stat().st_size != 0:
        pytest.skip("needs Linux's /proc")
    monkeypatch.setattr(baseline, "MAX_BASELINE_BYTES", 16)
    with pytest.raises(ValueError, match="/proc/self/maps holds more than the 0 MiB a baseline may have"):
        baseline.load_baseline(proc)


def test_running_out_of_memory_or_any_other_failure_reading_a_baseline_is_one_line(tmp_path, capfd, monkeypatch):
    from labcore.bench import baseline

    good = _baseline(tmp_path, "good")

    def no_memory(data):
        raise MemoryError()                                # as under ulimit -v: no message at all

    monkeypatch.setattr(baseline, "_parse", no_memory)
    err = _refused(RUN + ["--baseline", str(good)], f"ran out of memory reading the baseline {good}", capfd)
    assert err.strip() != "labcore bench:"
    monkeypatch.undo()

    def odd(doc, path):
        raise RuntimeError()

    monkeypatch.setattr(baseline, "_from_doc", odd)
    _refused(RUN + ["--baseline", str(good)], f"cannot read the baseline {good} (RuntimeError)", capfd)
    monkeypatch.undo()

    def blank(path):
        raise MemoryError()

    monkeypatch.setattr(baseline, "load_baseline", blank)   # past load_baseline's own handling: still named
    _refused(RUN + ["--baseline", str(good)], f"ran out of memory reading the baseline {good}", capfd)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100000 + "]" * 100000)
    monkeypatch.undo()
    _refused(RUN + ["--baseline", str(deep)], f"{deep} is not a readable baseline (its JSON is nested too deeply)",
             capfd)


@pytest.mark.parametrize("name,change,message", [
    ("negative", lambda r: dict(r, time_us=-5.0, median_us=-5.0), "has a time_us of -5.0, not a positive number"),
    ("words", lambda r: dict(r, median_us="fast"), "has a median_us of 'fast'"),
    ("size", lambda r: dict(r, size="1K"), "has a size of '1K', not a whole number of bytes"),
])
def test_a_baseline_with_values_no_gate_can_read_names_the_file(tmp_path, capfd, name, change, message):
    path = _baseline(tmp_path, name, change)
    err = _refused(RUN + ["--baseline", str(path)], message, capfd)
    assert str(path) in err


def test_a_baseline_of_other_placements_or_sizes_below_compare_from_is_refused(tmp_path, capfd):
    sideways = _baseline(tmp_path, "sideways", lambda r: dict(r, placement="sideways"))
    _refused(RUN + ["--baseline", str(sideways)], "shares no size and placement with this run", capfd)
    good = _baseline(tmp_path, "good")
    _refused(RUN + ["--baseline", str(good), "--compare-from", "1G"],
             "comparing only from 1073741824 bytes up (--compare-from, min_bytes) leaves no size", capfd)


@pytest.mark.parametrize("args,message", [
    (["-b", "8", "-e", "1G", "-i", "1"], "would measure 1073741817 sizes, more than the 4096"),
    (["-b", "1G", "-e", "2G", "-f", "1.000000001"], "would measure over 4096 sizes"),
    (["-i", "0", "-e", "64"], "step (-i) must be a positive number of bytes, not 0"),
    (["-f", "2", "-i", "8", "-e", "32"], "give -f (sizes multiply) or -i (sizes add), not both"),
    (["-d", "int8", "-o", "avg"], "gloo cannot average int8 tensors"),
    (["-e", "1e15"], "can be used (host RAM shared by 2 ranks)"),   # (1e30 is over 2**63: refused as a size)
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_sizes_and_what_gloo_cannot_run_are_refused_before_ranks_start(args, message, capfd):
    err = _refused(["all_reduce", "-g", "2", "--backend", "gloo", *args], message, capfd)
    assert "4398046511104 MiB" not in err   # the free memory is this machine's, not a placeholder


class _NoCluster:
    """Fails a test that would start ranks: every check below must come first."""

    def __init__(self, *args, **kwargs):
        raise AssertionError("a cluster was started")


@pytest.mark.parametrize("kwargs,error,message", [
    (dict(cluster=2.0), TypeError, "sweep runs on a cluster"),
    (dict(cluster="2"), TypeError, "not str"),
    (dict(op="broadcast", root="0"), ValueError, "root (-r) must be a whole rank number, not '0'"),
    (dict(op="broadcast", root=0.5), ValueError, "not 0.5"),
    (dict(placements="in-place"), ValueError, "a tuple of placement names such as ('in-place',)"),
    (dict(placements=("in-place", "in-place")), ValueError, "at most once"),
    (dict(check="no"), ValueError, "check must be True or False"),
    (dict(corrupt=-1), ValueError, "corrupt must be a whole number >= 0, not -1"),
    (dict(corrupt=1.5), ValueError, "not 1.5"),
    (dict(timeout=float("nan")), ValueError, "timeout must be a finite, positive number"),
    (dict(timeout=0), ValueError, "not 0"),
    (dict(dtype="int32", redop="avg"), ValueError, "gloo cannot average int32"),
    (dict(step=0, max_bytes=64), ValueError, "step (-i) must be a positive number of bytes"),
    (dict(op="barrier", min_bytes=-5), ValueError, "size -5 must be a finite, non-negative number"),
    (dict(env={"NCCL_DEBUG=INFO": "1"}), ValueError, "cannot be one"),
    (dict(env=["NCCL_DEBUG=INFO"]), TypeError, "env must map variable names to string values"),
    (dict(factor=1e308, max_bytes="1M"), ValueError, "factor (-f) must be at most 1073741824"),
    (dict(factor=np.float64("inf")), ValueError, "factor (-f) must be a finite number above 1"),
    (dict(factor="2"), ValueError, "factor (-f) must be a finite number above 1, not '2'"),
    (dict(max_bytes=10 ** 400), ValueError, "-e (max_bytes): size 1000000000000000000"),
    (dict(step=10 ** 19, max_bytes=64), ValueError, "-i (step): size 10000000000000000000 is more than 2**63"),
    (dict(iters=True), ValueError, "iters (-n) must be a whole number >= 1, not True"),
    (dict(iters=np.bool_(True)), ValueError, "iters (-n) must be a whole number >= 1"),
    (dict(iters=10 ** 20), ValueError, "iters (-n) must be at most 1000000"),
    (dict(warmup=2.5), ValueError, "warmup (-w) must be a whole number >= 0, not 2.5"),
    (dict(repeats=np.int64(10 ** 6)), ValueError, "repeats (-N) must be at most 10000"),
    (dict(slowdown=np.int64(0)), ValueError, "slowdown must be a whole number >= 1"),
])
def test_sweep_checks_every_argument_before_a_rank_starts(monkeypatch, kwargs, error, message):
    import labcore.live.cluster
    from labcore.bench.sweep import sweep

    monkeypatch.setattr(labcore.live.cluster, "Cluster", _NoCluster)
    monkeypatch.setattr("labcore.live.sysinfo.has_gpus", lambda n=1: False)
    kwargs = dict(kwargs)
    with pytest.raises(error) as caught:
        sweep(kwargs.pop("cluster", 2), **kwargs)
    assert message in str(caught.value)


class _StandInRanks:
    """A cluster that measures nothing: it answers sweep's calls and keeps the specs sent to the ranks."""

    world_size, backend, timeout = 2, "gloo", 60.0

    def __init__(self):
        self.specs, self.last_output = [], [("", "")] * 2

    def call(self, fn, args=(), kwargs=None, timeout=None):
        if fn.__name__ == "_free_memory":
            return [("cpu", 1 << 30)] * 2
        if fn.__name__ == "_recorder_entries":
            return [0, 0]
        spec = args[0]
        self.specs.append(spec)
        row = dict(op=spec["op"], size=spec["nbytes"], placement="in-place", time_us=1.0, busbw=1.0, wrong=0)
        return [[row], [row]]


def test_sweep_takes_numpy_integers_wherever_a_whole_number_is_asked():
    from labcore.bench.sweep import sweep

    ranks = _StandInRanks()
    df = sweep(ranks, "broadcast", min_bytes=np.int64(64), max_bytes=np.int32(256), factor=np.int64(2),
               root=np.int64(1), warmup=np.int32(1), iters=np.int64(5), repeats=np.int64(2),
               slowdown=np.uint8(1), corrupt=np.int16(0), placements=("in-place",), progress=False)
    assert sorted(set(df["size"])) == [64, 128, 256] and len(df) == 6
    spec = ranks.specs[0]
    assert all(type(spec[k]) is int for k in ("root", "warmup", "iters", "slowdown", "corrupt", "nbytes"))
    assert (spec["root"], spec["warmup"], spec["iters"]) == (1, 1, 5)
    assert type(df.attrs["params"]["repeats"]) is int and type(df.attrs["params"]["factor"]) is float
    sweep(ranks, "all_reduce", max_bytes=64, factor=np.float32(4), iters=np.int8(1), progress=False)


def test_the_shared_checks_take_numpy_integers_and_refuse_bools():
    from labcore.bench import checks

    assert checks.check_counts(np.int64(0), np.int32(3), np.uint16(2)) == (0, 3, 2)
    assert all(type(n) is int for n in checks.check_counts(np.int64(0), np.int32(3), np.uint16(2)))
    assert type(checks.check_ranks(np.int64(2))) is int
    for bad in (True, np.bool_(True), 2.0, "2", np.float64(2)):
        with pytest.raises(ValueError, match="must be a whole number"):
            checks.check_counts(0, bad)
    assert checks.check_factor(np.float32(1.5)) == 1.5 and checks.check_factor(np.int64(4)) == 4.0
    import fractions

    with pytest.raises(ValueError, match="finite number above 1"):
        checks.check_factor(fractions.Fraction(10 ** 400, 3))   # too large for a float


NCCL_TESTS = ROOT / "tests" / "data" / "nccl_tests_nccl-tests-167_max_then_min.txt"


def test_read_nccl_tests_names_what_it_was_given_instead_of_crashing(tmp_path):
    from labcore.readers import read_nccl_tests

    good = read_nccl_tests(NCCL_TESTS)
    cut = tmp_path / "cut.txt"               # a log whose last bytes split a UTF-8 character
    cut.write_bytes(NCCL_TESTS.read_bytes() + "\u00e9".encode()[:1])
    assert read_nccl_tests(cut).equals(good)
    assert read_nccl_tests(NCCL_TESTS.read_bytes()).equals(good)
    binary = tmp_path / "core"
    binary.write_bytes(bytes(range(256)) * 16)
    for source, error, message in ((binary, ValueError, "found no nccl-tests result lines"),
                                   (tmp_path, ValueError, "is a folder"),
                                   (str(tmp_path), ValueError, "is a folder"),
                                   (tmp_path / "nope.txt", FileNotFoundError, "no file"),
                                   ("", ValueError, "the text is empty"),
                                   (None, TypeError, "not NoneType"),
                                   (NCCL_TESTS.read_text().splitlines(), TypeError, "not list")):
        with pytest.raises(error, match=message):
            read_nccl_tests(source)
    for ranks in (0, -3, "x", 2.5):
        with pytest.raises(ValueError, match="ranks must be the whole number of ranks"):
            read_nccl_tests(NCCL_TESTS, ranks=ranks)


def test_json_onto_its_own_baseline_is_refused(tmp_path, capfd):
    good = _baseline(tmp_path, "good")
    _refused(RUN + ["--baseline", str(good), "--json", str(good)], "would overwrite its own baseline", capfd)


def test_a_sweep_that_cannot_be_saved_after_measuring_says_so_in_one_line(tmp_path, capfd, monkeypatch):
    def disk_full(df, path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("labcore.bench.baseline.save_baseline", disk_full)
    assert _status(["all_reduce", "-g", "2", "-b", "8", "-e", "8", "-n", "1", "-w", "0",
                    "--json", str(tmp_path / "sweep.json")]) == 2
    out, err = capfd.readouterr()
    assert "could not save the sweep to" in err and "No space left on device" in err and "Traceback" not in err
    assert "# Out of bounds values" in out      # the table was printed before


def test_a_torchrun_world_size_that_is_not_a_number_is_named(capfd, monkeypatch):
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "1")
    monkeypatch.setenv("WORLD_SIZE", "abc")
    _refused(["all_reduce"], "WORLD_SIZE is 'abc', not a number of ranks", capfd)


def _recorded(run):
    import pandas as pd

    rows = json.loads(RECORDED.read_text())["rows"]
    return pd.DataFrame([r for r in rows if (r["run"] == "baseline") == (run == "baseline")])


def test_the_gate_functions_name_what_they_cannot_compare(tmp_path):
    from labcore import evidence

    base, now = _recorded("baseline"), _recorded("rerun")
    assert evidence.compare(base, now, min_bytes="32K").attrs["verdict"] == \
        evidence.compare(base, now, min_bytes=32768).attrs["verdict"]
    for call, error, message in (
            (lambda: evidence.compare(base, now.iloc[:0]), ValueError, "this run has no rows"),
            (lambda: evidence.compare(None, now), TypeError, "must be a sweep DataFrame"),
            (lambda: evidence.compare(base, now[["size", "time_us"]]), ValueError, r"lacks the columns \['busbw'\]"),
            (lambda: evidence.compare(base, now, time="mean_us"), ValueError, "time is the column of times"),
            (lambda: evidence.compare(base, now, min_bytes=float("nan")), ValueError, "finite, non-negative"),
            (lambda: evidence.summarize(base, time="foo"), ValueError, "time is the column of times"),
            (lambda: evidence.summarize(base, level=1.5), ValueError, "level is a confidence level"),
            (lambda: evidence.summarize([1, 2]), TypeError, "must be a sweep DataFrame"),
            (lambda: evidence.save_baseline(base, tmp_path), ValueError, "it is a folder")):
        with pytest.raises(error, match=message):
            call()
