"""Nothing a rank starts outlives the cluster: daemons (setsid, double fork) included.

Each test starts a ``Popen(..., start_new_session=True)`` and a classic double-fork daemon on
the ranks, then checks that they are gone after ``close()`` or after the notebook exits, polling
with a generous deadline (the machine may be busy) and returning as soon as they are.
"""
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

import labcore as lc

pytestmark = pytest.mark.live

_DEADLINE_S = 60.0


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _all_gone(pids, within=_DEADLINE_S) -> bool:
    deadline = time.monotonic() + within
    while any(_alive(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def _start_daemons():
    """On a rank: a process in a session of its own, and a daemon that double-forked away.

    Returns their pids and their parents' (the daemon's parent after its first child exited)."""
    import os
    import subprocess
    import sys
    import time

    import psutil

    def parent_of(pid):
        return psutil.Process(pid).ppid()

    session = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    read_end, write_end = os.pipe()
    first = os.fork()
    if first == 0:                       # the classic daemon: new session, fork again, parent exits
        os.setsid()
        if os.fork() == 0:
            os.write(write_end, f"{os.getpid()}\n".encode())
            time.sleep(600)              # Python, no exec: it keeps every descriptor it inherited
        os._exit(0)
    os.close(write_end)
    os.waitpid(first, 0)
    with os.fdopen(read_end) as pipe:
        daemon = int(pipe.readline())
    deadline = time.monotonic() + 30
    while parent_of(daemon) == first and time.monotonic() < deadline:
        time.sleep(0.01)                 # the kernel hands the orphan over as its parent exits
    return {"pids": [session.pid, daemon], "daemon_parent": parent_of(daemon), "rank": os.getpid()}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="child subreapers are Linux's")
def test_daemons_a_rank_started_are_its_children_and_die_on_close():
    cl = lc.Cluster(2, backend="gloo", timeout=60)
    try:
        started = cl.run(_start_daemons)
    finally:
        cl.close()
    pids = [p for s in started for p in s["pids"]]
    assert [s["daemon_parent"] for s in started] == [s["rank"] for s in started]  # adopted, not init's
    try:
        assert _all_gone(pids), [p for p in pids if _alive(p)]
    finally:
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


_NOTEBOOK = """
    import os, sys, time
    from multiprocessing import resource_tracker
    import labcore as lc
    sys.path.insert(0, {tests!r})
    from test_cluster_daemons import _start_daemons
    if __name__ == "__main__":
        cl = lc.Cluster(2, backend="gloo", timeout=60)
        pids = [p for s in cl.run(_start_daemons) for p in s["pids"]]
        resource_tracker.ensure_running()
        print(" ".join(map(str, [resource_tracker._resource_tracker._pid, *pids])), flush=True)
        if {end!r} == "killed":
            time.sleep(600)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="child subreapers are Linux's")
@pytest.mark.parametrize("end", ["exits", "killed"])
def test_daemons_and_the_resource_tracker_go_with_the_notebook(tmp_path, end):
    """A notebook that exits without close() (or is SIGKILLed): its ranks' daemons go, and so its
    multiprocessing resource tracker, which a daemon holding its pipe would keep alive, exits."""
    script = tmp_path / "notebook.py"
    script.write_text(textwrap.dedent(_NOTEBOOK.format(tests=os.path.dirname(__file__), end=end)))
    env = dict(os.environ, TMPDIR=str(tmp_path))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    pids = []
    try:
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert len(pids) == 5, "the notebook script did not start its cluster"
        if end == "killed":
            proc.kill()
        proc.wait(_DEADLINE_S)
        assert _all_gone(pids), [(p, psutil.Process(p).cmdline()) for p in pids if _alive(p)]
    finally:
        proc.kill()
        proc.wait(_DEADLINE_S)
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
