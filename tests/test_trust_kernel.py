"""The cluster inside a real Jupyter kernel (jupyter_client, as nbval drives it).

A kernel killed mid-cell, interrupted, shut down or restarted leaves no rank,
no forkserver and no scratch folder behind.
"""
import os
import signal
import sys
import time

import psutil
import pytest
from jupyter_client import KernelManager

pytestmark = [pytest.mark.live, pytest.mark.slow]

START = "import labcore as lc, psutil, os\ncl = lc.Cluster(4, backend='gloo', timeout=120)\ncl.run(lambda: None)\n"


def _ours(folder):
    return sorted(n for n in os.listdir(folder) if n.startswith(("labcore-", "pymp-")))


def _alive(pids):
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


# How long cleanup may take: a bound, not a speed goal (a busy 2-core machine takes seconds to reap
# a kernel's ranks); the waits return as soon as the predicate holds.
GRACE = 60.0


def _wait_until(predicate, within=GRACE):
    deadline = time.monotonic() + within
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.05)
    return predicate()


@pytest.fixture
def kernel(tmp_path):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    # Jupyter kills a kernel 5 s after asking it to shut down; on a busy 2-core machine the exit alone
    # can take longer, and a kernel killed inside its clusters' close leaves its folder to the next
    # cluster's sweep: these tests give the shutdown time to finish
    km = KernelManager(kernel_name="python3", shutdown_wait_time=60.0)
    km.kernel_cmd = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    km.start_kernel(env=dict(os.environ, TMPDIR=str(scratch)), cwd=str(tmp_path))
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=120)
    try:
        yield km, kc, scratch
    finally:
        kc.stop_channels()
        if km.is_alive():
            km.shutdown_kernel(now=True)


def _run(kc, code, timeout=120):
    out = []

    def hook(msg):
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            out.append("\n".join(msg["content"]["traceback"]))

    reply = kc.execute_interactive(code, timeout=timeout, output_hook=hook)
    return reply["content"]["status"], "".join(out)


def _descendants(pid):
    return [p.pid for p in psutil.Process(pid).children(recursive=True)]


def test_killing_the_kernel_mid_cell_takes_every_process_and_folder_with_it(kernel):
    km, kc, scratch = kernel
    status, out = _run(kc, START)
    assert status == "ok", out
    kc.execute("def busy():\n    import subprocess, time\n    subprocess.Popen(['sleep', '300'])\n"
               "    time.sleep(300)\ncl.run(busy)\n")
    kernel_pid = km.provisioner.process.pid
    assert _wait_until(lambda: len(_descendants(kernel_pid)) >= 9)  # 4 ranks, 4 sleeps, forkserver
    victims = _descendants(kernel_pid)
    os.kill(kernel_pid, signal.SIGKILL)
    assert _wait_until(lambda: not _alive(victims)), [psutil.Process(p).cmdline() for p in _alive(victims)]
    assert _wait_until(lambda: _ours(scratch) == []), _ours(scratch)


def test_interrupting_a_cell_stops_the_call_and_the_next_cell_works(kernel):
    km, kc, scratch = kernel
    assert _run(kc, START)[0] == "ok"
    msg_id = kc.execute("print('calling', flush=True)\ncl.run(lambda: __import__('time').sleep(300))")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # interrupt only once the cell is inside the call
        msg = kc.get_iopub_msg(timeout=60)
        if msg["msg_type"] == "stream" and "calling" in msg["content"]["text"]:
            break
    time.sleep(1.0)
    km.interrupt_kernel()
    reply = kc.get_shell_msg(timeout=60)
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = kc.get_shell_msg(timeout=60)
    assert reply["content"]["status"] == "error", reply["content"]
    assert reply["content"]["ename"] == "KeyboardInterrupt", reply["content"]
    time.sleep(1.0)  # ipykernel aborts requests that arrive just after an error, as a person's would not
    status, out = _run(kc, "print(cl.run(lambda: lc.rank_info().rank))")
    assert status == "ok" and "[0, 1, 2, 3]" in out, out
    assert "starting 4 fresh ranks (the previous call was interrupted)" in out


@pytest.mark.parametrize("how", ["shutdown", "restart"])
def test_shutdown_and_restart_leave_nothing_on_disk(kernel, how):
    km, kc, scratch = kernel
    assert _run(kc, START)[0] == "ok"
    assert any(n.startswith("labcore-") for n in _ours(scratch))
    pids = _descendants(km.provisioner.process.pid)
    if how == "restart":
        km.restart_kernel(now=False)
        kc.wait_for_ready(timeout=120)
    else:
        km.shutdown_kernel(now=False)
    assert _wait_until(lambda: not _alive(pids))
    assert _wait_until(lambda: _ours(scratch) == []), _ours(scratch)


def test_a_killed_kernel_whose_ranks_cannot_run_leaves_no_folder(kernel):
    """Ranks that cannot run when the kernel dies (stopped here; on a busy machine, not scheduled within
    the forkserver's grace) are killed by the forkserver before they can tidy up: it removes the
    kernel's folder itself."""
    km, kc, scratch = kernel
    assert _run(kc, START)[0] == "ok"
    kernel_pid = km.provisioner.process.pid
    forkserver = [p for p in psutil.Process(kernel_pid).children() if "forkserver" in " ".join(p.cmdline())]
    ranks = [r for f in forkserver for r in f.children()]
    assert len(ranks) >= 4
    for p in ranks:
        p.suspend()
    os.kill(kernel_pid, signal.SIGKILL)
    assert _wait_until(lambda: not _alive([p.pid for p in ranks]))
    assert _wait_until(lambda: _ours(scratch) == []), _ours(scratch)
