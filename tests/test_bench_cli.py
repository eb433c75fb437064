"""``python -m labcore bench``: nccl-tests' table from a plain run and from torchrun, input checks, the gate."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from labcore.bench.cli import main as bench_main
from labcore.evidence import cli_gate


def main(argv):
    """The bench's command line as ``python -m labcore bench`` runs it: with the evidence gate."""
    return bench_main(argv, gate=cli_gate)

from labcore.bench.table import header_lines

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parents[1]
FAST = ["-b", "64", "-e", "16K", "-f", "16", "-n", "2", "-w", "1"]


def _torchrun(args, timeout=180):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR")}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone",
           "-m", "labcore", "bench", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_plain_run_prints_the_nccl_tests_table(capsys, tmp_path):
    out_file = tmp_path / "sweep.json"
    assert main(["broadcast", *FAST, "-g", "2", "-r", "1", "-N", "2", "--json", str(out_file)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "# Collective test starting: broadcast_perf"
    start = lines.index(header_lines()[1]) - 1
    assert lines[start:start + 4] == header_lines()
    rows = [line for line in lines if line and not line.startswith("#")]
    assert [int(r.split()[0]) for r in rows] == [64, 1024, 16384] * 2  # -N 2: the sweep twice
    assert all(r.split()[3:5] == ["none", "1"] for r in rows)  # redop column, root column
    end = lines.index("# Out of bounds values : 0 OK")
    assert lines[end + 1].startswith("# Avg bus bandwidth    : ") and lines[end + 1].endswith(" ")
    assert lines[end + 2:end + 5] == ["#", "# Collective test concluded: broadcast_perf", "#"]
    doc = json.loads(out_file.read_text())
    assert len(doc["rows"]) == 12 and {r["repeat"] for r in doc["rows"]} == {0, 1}


def test_sendrecv_prints_its_reduction_and_alltoall_in_place_is_not_checked(capsys):
    assert main(["sendrecv", *FAST, "-g", "2", "-o", "max"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line and line[0] == " "]
    assert {r[3] for r in rows} == {"max"} and {r[12] for r in rows} == {"N/A"} and {r[8] for r in rows} == {"0"}
    assert main(["all_to_all", *FAST, "-g", "2"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line and line[0] == " "]
    assert all(r.endswith("    N/A") for r in rows) and "# Out of bounds values : 0 OK" in out
    assert "# Collective test concluded: alltoall_perf" in out


def test_the_gate_uses_repeats_and_says_inconclusive_rather_than_guess(capsys, tmp_path):
    assert main(["all_reduce", *FAST, "-g", "2", "-N", "7", "--json", str(tmp_path / "now.json")]) == 0
    doc = json.loads((tmp_path / "now.json").read_text())
    for name, scale in (("fast.json", 1e-3), ("slow.json", 1e3)):
        # Baselines 1000x faster / slower than this machine: a sure regression / a sure pass.
        rows = [dict(r, time_us=r["time_us"] * scale, median_us=r["median_us"] * scale) for r in doc["rows"]]
        (tmp_path / name).write_text(json.dumps(dict(doc, rows=rows)))
    capsys.readouterr()
    assert main(["all_reduce", *FAST, "-g", "2", "-N", "7", "--baseline", str(tmp_path / "fast.json")]) == 1
    out = capsys.readouterr().out
    assert "# evidence gate: regression" in out and "false-alarm rate 0.05" in out
    assert main(["all_reduce", *FAST, "-g", "2", "-N", "7", "--baseline", str(tmp_path / "slow.json")]) == 0
    assert "# evidence gate: pass" in capsys.readouterr().out
    # One repeat cannot reach the 5% level, whatever it measures.
    assert main(["all_reduce", *FAST, "-g", "2", "--baseline", str(tmp_path / "fast.json")]) == 3
    assert "inconclusive, measure more" in capsys.readouterr().out


def _baselines(tmp_path):
    """Valid sweeps saved as baselines, and broken files, for the checks below."""
    done = {}
    for name, args in (("gather", ["all_gather", "-g", "2"]), ("half", ["all_reduce", "-g", "2", "-d", "half"]),
                       ("three", ["all_reduce", "-g", "3"]), ("big", ["all_reduce", "-g", "2", "-b", "1M",
                                                                         "-e", "1M"])):
        path = tmp_path / f"{name}.json"
        assert main([*args, "-n", "1", "-w", "0", *([] if name == "big" else ["-b", "64", "-e", "64"]),
                     "--json", str(path)]) == 0
        done[name] = path
    (tmp_path / "corrupt.json").write_text('{"format": "labcore-bench-baseline/2", "rows": [')
    return done


BAD = [
    (["-g", "0"], "-g must be a whole number of ranks >= 1"),
    (["-g", "100000"], "more ranks than this machine can hold"),
    (["-n", "0"], "iters (-n) must be a whole number >= 1"),
    (["-w", "-1"], "warmup (-w) must be"),
    (["-N", "0"], "repeats (-N) must be"),
    (["-o", "mulsum"], "premultiplied sum"),
    (["-o", "mean"], "unknown reduction"),
    (["-d", "float8"], "unknown type"),
    (["-f", "nan"], "factor (-f) must be a finite number"),
    (["-f", "1.01"], "repeats the size 8"),
    (["-b", "1T"], "cannot read size '1T'"),
    (["-b", "0"], "cannot start at 0"),
    (["-e", "64T"], "cannot read size"),
    (["-e", "1024G", "-g", "2"], "Nothing was allocated"),
    (["-g", "x"], "invalid int value"),
    (["-c", "2"], "invalid choice"),
    (["--json", "/nonexistent/folder/sweep.json"], "cannot write /nonexistent/folder/sweep.json"),
    (["--baseline", "/nonexistent/base.json"], "no baseline at /nonexistent/base.json"),
    (["--tolerance", "-1"], "--tolerance"),
    (["--timeout", "0"], "timeout must be a finite, positive number"),
    (["--timeout", "1e7"], "timeout must be at most a week"),
    # numbers so large they used to overflow (or to run without end) are refused up front
    (["-f", "1e308"], "factor (-f) must be at most 1073741824"),
    (["-f", "1.7976931348623157e308", "-e", "64"], "factor (-f) must be at most 1073741824"),
    (["-f", "inf"], "factor (-f) must be a finite number"),
    (["-e", "1e30"], "-e (max_bytes): size '1e30' is more than 2**63 bytes"),
    (["-b", "1e300", "-e", "1.7e308"], "-b (min_bytes): size '1e300' is more than 2**63 bytes"),
    (["-e", "64", "-i", "1e30"], "-i (step): size '1e30' is more than 2**63 bytes"),
    (["-n", "100000000000000000000"], "iters (-n) must be at most 1000000 calls per size"),
    (["-w", "10000001"], "warmup (-w) must be at most 1000000 calls per size"),
    (["-N", "1000000"], "repeats (-N) must be at most 10000 sweeps"),
]


def _status(argv):
    """main's exit status; argparse's own errors leave through SystemExit."""
    try:
        return main(argv)
    except SystemExit as stop:
        return stop.code


@pytest.mark.parametrize("args,message", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_gets_one_line_and_exit_2_before_anything_runs(args, message, capfd):
    assert _status(["all_reduce", *args]) == 2
    out, err = capfd.readouterr()
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert out == ""  # nothing measured, no rank started


def test_collective_specific_inputs_are_checked_before_ranks_start(capfd):
    for args, message in ((["all_gather", "-b", "8", "-e", "32", "-g", "4"], "at least 64 bytes"),
                          (["hypercube", "-g", "3"], "power-of-two"),
                          (["broadcast", "-r", "3", "-g", "2"], "root (-r) must be a rank between 0 and 1"),
                          (["sendrecv", "-g", "1"], "at least 2 ranks")):
        assert main(args) == 2
        out, err = capfd.readouterr()
        assert message in err and out == "" and err.count("\n") == 1


def test_a_baseline_that_does_not_fit_the_run_is_an_error_naming_it(tmp_path, capfd):
    files = _baselines(tmp_path)
    capfd.readouterr()
    run = ["all_reduce", "-g", "2", "-b", "64", "-e", "64", "-n", "1", "--baseline"]
    for path, message in ((files["gather"], "collective all_gather but this run has all_reduce"),
                          (files["half"], "dtype (-d) half but this run has float"),
                          (files["three"], "rank count (-g) 3 but this run has 2"),
                          (files["big"], "shares no size with this run"),
                          (tmp_path / "corrupt.json", "is not a readable baseline (corrupt JSON")):
        assert main(run[:-1] + ["--baseline", str(path)]) == 2
        out, err = capfd.readouterr()
        assert message in err and str(path) in err and out == ""


def test_a_failing_rank_exits_1_with_its_message(capsys):
    # a million calls cannot finish within a second: the ranks are reported stuck
    assert main(["all_reduce", "-g", "2", "-b", "8", "-e", "8", "-n", "1000000", "-w", "0",
                 "--timeout", "1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("labcore bench: the ranks failed:") and "after 1 s" in err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_cli_and_leaves_nothing_on_disk(sig, tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path))
    env.pop("RANK", None)
    proc = subprocess.Popen([sys.executable, "-m", "labcore", "bench", "all_reduce", "-g", "2", "-b", "8",
                             "-e", "8", "-f", "2", "-n", "20000", "-w", "0"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    for line in proc.stdout:  # the ranks are up once the devices are listed
        if line.startswith("#  Rank  1") or time.monotonic() > deadline:
            break
    assert any(p.name.startswith("labcore-") for p in tmp_path.iterdir())  # a run folder exists now
    proc.send_signal(sig)
    try:
        proc.wait(timeout=60)
    finally:
        proc.kill()
    err = proc.stderr.read()
    assert proc.returncode == 128 + sig, err
    assert f"stopped by {signal.Signals(sig).name}" in err and "Traceback" not in err
    left = [p.name for p in tmp_path.iterdir() if p.name.startswith(("labcore-", "pymp-"))]
    assert left == []


def test_single_node_torchrun_runs_the_same_entry_point_and_gate(tmp_path):
    done = _torchrun(["reduce_scatter", *FAST, "-N", "7", "--json", str(tmp_path / "tr.json")])
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("# labcore bench (nccl-tests 2.19.6 layout) backend gloo")
    assert header_lines()[2] in lines
    assert "# Out of bounds values : 0 OK" in lines
    doc = json.loads((tmp_path / "tr.json").read_text())
    assert {r["ranks"] for r in doc["rows"]} == {2} and all(r["wrong"] == 0 for r in doc["rows"])
    # Every rank exits with rank 0's verdict, so torchrun itself fails on a regression.
    doc["rows"] = [dict(r, time_us=r["time_us"] * 1e-3, median_us=r["median_us"] * 1e-3) for r in doc["rows"]]
    (tmp_path / "fast.json").write_text(json.dumps(doc))
    done = _torchrun(["reduce_scatter", *FAST, "-N", "7", "--baseline", str(tmp_path / "fast.json")])
    assert done.returncode != 0 and "# evidence gate: regression" in done.stdout
    # A bad baseline stops every rank with exit 2, before measuring.
    (tmp_path / "bad.json").write_text("{")
    done = _torchrun(["reduce_scatter", *FAST, "--baseline", str(tmp_path / "bad.json")])
    assert done.returncode != 0 and "corrupt JSON" in done.stderr and "out-of-place" not in done.stdout


def _saved_sweep(path):
    path.write_text(json.dumps({"format": "labcore-bench-baseline/2", "params": {}, "rows": []}))
    return path


@pytest.mark.parametrize("make,message", [
    (lambda d: "", "--json needs a file name, not '': give one, e.g. --json sweep.json"),
    (lambda d: "   ", "--json needs a file name"),
    (lambda d: str(d / ("x" * 5000)), "--json is a name of"),
    (lambda d: str(d / "sub" / ("y" * 300)), "longer than a file system takes (255 bytes a name"),
])
def test_empty_and_over_long_json_names_are_refused_before_measuring(make, message, tmp_path, capfd):
    assert main(["all_reduce", *FAST, "-g", "2", "--json", make(tmp_path)]) == 2
    out, err = capfd.readouterr()
    assert message in err and err.count("\n") == 1 and out == ""      # nothing measured, nothing printed


def test_json_never_overwrites_a_file_that_is_not_a_lab_sweep(tmp_path, capfd):
    notebook = tmp_path / "lab.ipynb"
    notebook.write_text('{"cells": [], "nbformat": 4}')
    assert main(["all_reduce", *FAST, "-g", "2", "--json", str(notebook)]) == 2
    out, err = capfd.readouterr()
    assert f"--json {notebook} exists and is not a sweep the lab saved" in err and "--force" in err and out == ""
    assert notebook.read_text() == '{"cells": [], "nbformat": 4}'
    # A link is refused even with --force: the lab would write through it to its target.
    link = tmp_path / "result.json"
    link.symlink_to(notebook)
    assert main(["all_reduce", *FAST, "-g", "2", "--force", "--json", str(link)]) == 2
    assert "is a symbolic link" in capfd.readouterr().err and notebook.read_text().startswith('{"cells"')
    # A sweep the lab saved is replaced; --force replaces anything else that is a regular file.
    old = _saved_sweep(tmp_path / "old.json")
    assert main(["all_reduce", *FAST, "-g", "2", "--json", str(old)]) == 0
    assert main(["all_reduce", *FAST, "-g", "2", "--force", "--json", str(notebook)]) == 0
    capfd.readouterr()
    for path in (old, notebook):
        assert json.loads(path.read_text())["format"] == "labcore-bench-baseline/2" and json.loads(
            path.read_text())["rows"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lab.ipynb", "old.json", "result.json"]   # no partials


def test_a_json_path_that_changes_while_measuring_is_checked_again(tmp_path, capfd, monkeypatch):
    from labcore.bench import cli

    target = tmp_path / "sweep.json"
    keep = tmp_path / "precious.txt"
    keep.write_text("mine")
    real = cli._run_sizes

    def then_a_link_appears(*args, **kwargs):
        df = real(*args, **kwargs)
        target.symlink_to(keep)                        # made while the sweep ran
        return df

    monkeypatch.setattr(cli, "_run_sizes", then_a_link_appears)
    assert main(["all_reduce", *FAST, "-g", "2", "--json", str(target)]) == 2
    assert "is a symbolic link" in capfd.readouterr().err and keep.read_text() == "mine"


# A wrapper that runs `python -m labcore ...` as -m does, and says when torch starts importing: the test
# interrupts at that event rather than after a sleep.
_ANNOUNCE_TORCH = """
import importlib.abc, runpy, sys
class Announce(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "torch":
            sys.meta_path.remove(self)
            print("importing torch", flush=True)
        return None
sys.meta_path.insert(0, Announce())
sys.argv = ["labcore", *sys.argv[1:]]
runpy.run_module("labcore", run_name="__main__", alter_sys=True)
"""


def _interrupt_at(cmd, event, tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path), PYTHONUNBUFFERED="1")
    env.pop("RANK", None)
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            if event(line):
                proc.send_signal(signal.SIGINT)
                break
        else:
            pytest.fail(f"the child ended before the event: {proc.stderr.read()[-2000:]}")
        proc.wait(timeout=120)
    finally:
        proc.kill()
    return proc.returncode, proc.stderr.read()


def test_ctrl_c_while_torch_imports_exits_130_with_one_line(tmp_path):
    code, err = _interrupt_at([sys.executable, "-c", _ANNOUNCE_TORCH, "bench", "all_reduce", "-g", "2", *FAST],
                              lambda line: line.startswith("importing torch"), tmp_path)
    assert code == 130, err
    assert err == "labcore bench: stopped by SIGINT (Ctrl-C)\n"


def test_ctrl_c_during_a_simulated_sweep_exits_130_with_one_line(tmp_path):
    cmd = [sys.executable, "-m", "labcore", "sim", "all_reduce", "--algo", "ring", "-n", "512", "-b", "8",
           "-e", "1T", "-f", "2"]
    code, err = _interrupt_at(cmd, lambda line: line.split()[:1] == ["8"], tmp_path)   # the first size's row
    assert code == 130, err
    assert err == "labcore sim: stopped by SIGINT (Ctrl-C)\n"
