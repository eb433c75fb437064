"""docs/slurm_bench.sbatch on this machine as a 2-node job: two torchrun launchers, one rank each.

SLURM itself is not here, so its two commands the script calls are stand-ins on PATH:
``srun`` starts the script's per-node command once per node with that node's
SLURM_NODEID (what srun --ntasks-per-node=1 does), and ``scontrol show hostnames``
expands the node list. Everything after them is the script's own command line:
real torchrun, real gloo collectives over loopback, the real benchmark.
"""
import os
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path
import pytest

pytestmark = pytest.mark.live

SCRIPT = Path(__file__).resolve().parents[1] / "docs" / "slurm_bench.sbatch"

SRUN = """#!/bin/bash
# srun --ntasks-per-node=1 CMD...: CMD once per node, each with its SLURM_NODEID; fail if any fails.
while [[ "$1" == --* ]]; do shift; done
pids=()
for ((node = 0; node < SLURM_NNODES; node++)); do
  SLURM_NODEID=$node SLURM_PROCID=$node SLURM_LOCALID=0 "$@" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
exit $status
"""

SCONTROL = """#!/bin/bash
# scontrol show hostnames LIST: one host per line
[ "$1 $2" = "show hostnames" ] && tr ',' '\\n' <<< "$3"
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tool(folder: Path, name: str, text: str) -> None:
    path = folder / name
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_the_sbatch_script_runs_two_nodes_of_torchrun(tmp_path):
    _tool(tmp_path, "srun", SRUN)
    _tool(tmp_path, "scontrol", SCONTROL)
    env = dict(os.environ, PATH=f"{tmp_path}:{os.environ['PATH']}", PYTHON=sys.executable,
               SLURM_NNODES="2", SLURM_JOB_NODELIST="127.0.0.1,127.0.0.2", SLURM_JOB_ID="4242",
               MASTER_PORT=str(_free_port()), NPROC_PER_NODE="1", IFNAME="lo", OMP_NUM_THREADS="1")
    proc = subprocess.Popen(["bash", str(SCRIPT), "all_reduce", "-b", "1K", "-e", "16K", "-f", "4", "-n", "2",
                             "-w", "1"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=240)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)    # both launchers and their ranks, whatever happened
        except ProcessLookupError:
            pass
    assert proc.returncode == 0, out
    lines = out.splitlines()
    assert "backend gloo" in lines[0], out                              # nccl-tests 2.19.6's preamble
    ranks = [line.split()[2] for line in lines if line.startswith("#  Rank ")]
    assert ranks == ["0", "1"], out                                     # one rank from each launcher
    assert "# Network" in out and "lo 127.0.0.1" in out and "GLOO_SOCKET_IFNAME=lo" in out
    rows = [line.split() for line in out.splitlines() if line.strip() and line.split()[0] in {"1024", "4096", "16384"}]
    assert len(rows) == 3 and all(row[-1] == "0" for row in rows), out      # #wrong of the in-place run
