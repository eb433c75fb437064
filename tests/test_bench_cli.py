"""``python -m labcore bench``: nccl-tests' table from a plain run and from torchrun, and the evidence gate."""
import json
import os
import subprocess
import sys
from pathlib import Path

from labcore.live.bench.cli import main
from labcore.live.bench.table import header_lines

ROOT = Path(__file__).resolve().parents[1]
FAST = ["-b", "64", "-e", "16K", "-f", "16", "-n", "2", "-w", "1"]


def _torchrun(args, timeout=180):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR")}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone",
           "-m", "labcore", "bench", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_plain_run_prints_the_nccl_tests_table(capsys, tmp_path):
    out_file = tmp_path / "sweep.json"
    assert main(["broadcast", *FAST, "-g", "2", "-r", "1", "--json", str(out_file)]) == 0
    lines = capsys.readouterr().out.splitlines()
    start = lines.index(header_lines()[1]) - 1
    assert lines[start:start + 4] == header_lines()
    rows = [line for line in lines if line and not line.startswith("#")]
    assert [int(r.split()[0]) for r in rows] == [64, 1024, 16384]
    assert all(r.split()[3:5] == ["none", "1"] for r in rows)  # redop column, root column
    assert "# Out of bounds values : 0 OK" in lines
    assert any(line.startswith("# Avg bus bandwidth    : ") for line in lines)
    assert len(json.loads(out_file.read_text())["rows"]) == 6


def test_baseline_gate_exits_non_zero_on_a_regression(capsys, tmp_path):
    assert main(["all_reduce", *FAST, "-g", "2", "--json", str(tmp_path / "now.json")]) == 0
    doc = json.loads((tmp_path / "now.json").read_text())
    for name, scale in (("fast.json", 1e-3), ("slow.json", 1e3)):
        # Baselines 1000x faster / slower than this machine: a sure regression / a sure pass.
        rows = [dict(r, time_us=r["time_us"] * scale) for r in doc["rows"]]
        (tmp_path / name).write_text(json.dumps(dict(doc, rows=rows)))
    capsys.readouterr()
    assert main(["all_reduce", *FAST, "-g", "2", "--baseline", str(tmp_path / "fast.json")]) == 1
    assert "# evidence gate: REGRESSION" in capsys.readouterr().out
    assert main(["all_reduce", *FAST, "-g", "2", "--baseline", str(tmp_path / "slow.json")]) == 0
    assert "# evidence gate: pass" in capsys.readouterr().out


def test_bad_arguments_exit_2_with_a_message(capsys):
    assert main(["all_reduce", "-d", "float8"]) == 2
    assert "unknown type" in capsys.readouterr().err
    assert main(["allscatter"]) == 2
    assert main(["all_reduce", "-e", "64T", "-g", "2"]) == 2
    assert "Nothing was allocated" in capsys.readouterr().err
    assert main(["all_reduce", "--baseline", "/nonexistent/base.json"]) == 2
    assert "no baseline at /nonexistent/base.json" in capsys.readouterr().err
    assert main(["broadcast", "-r", "3", "-g", "2"]) == 2
    assert "root (-r) must be a rank between 0 and 1" in capsys.readouterr().err


def test_a_failing_rank_exits_1_with_its_message(capsys):
    assert main(["all_reduce", *FAST, "-g", "2", "-o", "avg", "-d", "int32"]) == 1
    assert "gloo cannot average int32" in capsys.readouterr().err


def test_single_node_torchrun_runs_the_same_entry_point_and_gate(tmp_path):
    done = _torchrun(["reduce_scatter", *FAST, "--json", str(tmp_path / "tr.json")])
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert "# labcore bench reduce_scatter: nranks 2 backend gloo" in lines[0]
    assert header_lines()[2] in lines
    assert "# Out of bounds values : 0 OK" in lines
    doc = json.loads((tmp_path / "tr.json").read_text())
    assert {r["ranks"] for r in doc["rows"]} == {2} and all(r["wrong"] == 0 for r in doc["rows"])
    # Every rank exits with rank 0's verdict, so torchrun itself fails on a regression.
    doc["rows"] = [dict(r, time_us=r["time_us"] * 1e-3) for r in doc["rows"]]
    (tmp_path / "fast.json").write_text(json.dumps(doc))
    done = _torchrun(["reduce_scatter", *FAST, "--baseline", str(tmp_path / "fast.json")])
    assert done.returncode != 0 and "# evidence gate: REGRESSION" in done.stdout
