"""Bad input to the benchmark (CLI, sweep, baselines, read_nccl_tests): one line naming the fix,
before any rank starts (the CLI exits 2); nothing here starts a cluster unless it says so."""
import json
from pathlib import Path

import pytest

from labcore.live.bench.cli import main

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
