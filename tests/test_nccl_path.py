"""The NCCL path, round two (issue 30), as far as a CPU can show it.

No GPU runs here, so where the lab's behaviour on NCCL hangs on something only a CUDA build or a GPU
has, a test stands in for that thing alone, as torch's own tests do for backends a machine lacks:
torch's NCCL flight-recorder dump functions (absent from the CPU wheel), a CUDA timer, a child that
fails the way ``torch.cuda.set_device`` fails on an old driver, or ProcessGroupNCCL's watchdog error.
Every such test says "stand-in" in its docstring and what it stands for; no stand-in replaces a
collective or a time that a test measures. The checks that need GPUs are in tests/test_cluster_gpu.py.
"""
from __future__ import annotations

import json
import pickle
import sys
import time

import pytest
import torch

import labcore as lc
from labcore.live import fr_dumps, hang, progress, sysinfo

_EMPTY = {"version": "2.10", "pg_config": {}, "pg_status": {}, "entries": []}


def _nccl_shaped_entry(record_id: int, seq: int, state: str = "completed") -> dict:
    return {"record_id": record_id, "pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": seq,
            "p2p_seq_id": 0, "op_id": seq, "profiling_name": "nccl:all_reduce", "time_created_ns": 1000 + record_id,
            "input_sizes": [[4]], "input_dtypes": ["Float"], "output_sizes": [[4]], "output_dtypes": ["Float"],
            "state": state, "is_p2p": False, "frames": [], "timeout_ms": 600000}


# -- 1. Both flight recorders: NCCL's (CUDA builds) and the CPU one ---------------------------------
def test_the_cpu_wheel_has_only_the_cpu_flight_recorder():
    # what the issue found: the NCCL dump functions exist only in CUDA builds (USE_C10D_NCCL)
    names = [n for n in dir(torch._C._distributed_c10d) if "dump" in n]
    assert "_dump_fr_trace" in names
    if not torch.backends.cuda.is_built():
        assert fr_dumps.available() == ["cpu"] and "_dump_nccl_trace" not in names


def test_both_recorders_are_read_and_their_entries_told_apart(monkeypatch):
    """Stand-in: ``_dump_nccl_trace``/``_dump_nccl_trace_json``, which a CUDA build binds, return a dump
    of two NCCL entries (one unfinished); the CPU recorder is torch's own, holding nothing here."""
    c10d = torch._C._distributed_c10d
    nccl = dict(_EMPTY, entries=[_nccl_shaped_entry(0, 1), _nccl_shaped_entry(1, 2, "started")],
                pg_status={"0": {"last_enqueued_collective": 2, "last_completed_collective": 1}})
    monkeypatch.setattr(c10d, "_dump_nccl_trace", lambda **kw: pickle.dumps(nccl), raising=False)
    monkeypatch.setattr(c10d, "_dump_nccl_trace_json", lambda **kw: json.dumps(nccl).encode(), raising=False)
    assert fr_dumps.available() == ["nccl", "cpu"]
    merged = fr_dumps.read(stacks=False)
    assert [fr_dumps.key(e) for e in merged["entries"]] == [("nccl", 0), ("nccl", 1)]
    assert merged["pg_status"]["nccl"]["0"]["last_completed_collective"] == 1
    # the hang report's snapshot reads NCCL's JSON: the unfinished all_reduce is named
    assert progress.describe_gpu(progress.gpu_snapshot()) == ("all_reduce", "all_reduce #2 of group 0 (started)")


def _nccl_recorder_stand_in():
    """On a rank: torch's NCCL dump functions answer with what gloo's recorder holds and gloo's with
    nothing, as on an H100 (8 NCCL all_reduces: 8 entries in _dump_nccl_trace_json, 0 in _dump_fr_trace_json)."""
    c10d = torch._C._distributed_c10d
    c10d._dump_nccl_trace, c10d._dump_nccl_trace_json = c10d._dump_fr_trace, c10d._dump_fr_trace_json
    c10d._dump_fr_trace = lambda **kw: pickle.dumps(_EMPTY)
    c10d._dump_fr_trace_json = lambda **kw: json.dumps(_EMPTY).encode()


def _recorded_all_reduces():
    import torch.distributed as dist

    with lc.live.record("fr") as rec:
        for _ in range(3):
            dist.all_reduce(torch.ones(8))
    return rec


@pytest.mark.live
def test_the_recorder_finds_collectives_in_nccls_flight_recorder():
    """Stand-in: the ranks' NCCL dump functions hold gloo's entries and the CPU ones are empty, so the
    recording has rows only if NCCL's recorder is read (before, it read ``_dump_fr_trace`` alone)."""
    with lc.Cluster(2, backend="gloo", timeout=120, show_output=False) as cl:
        cl.run(_nccl_recorder_stand_in)
        rows = lc.readers.combine(cl.run(_recorded_all_reduces)).frame
    assert sorted(rows["rank"]) == [0, 0, 0, 1, 1, 1] and set(rows["op"]) == {"all_reduce"} and (rows["bytes"] == 32).all()


@pytest.mark.live
def test_flight_capture_analyses_nccls_flight_recorder():
    """Stand-in as above: the clinic's ``flight.capture`` on ranks whose entries are in NCCL's recorder."""
    from labcore.exercises import hang_cases
    from labcore.live import flight

    with lc.Cluster(3, backend="gloo", timeout=4, env=flight.ENV, show_output=False) as cl:
        cl.run(_nccl_recorder_stand_in)
        fa = flight.capture(cl, hang_cases.skipped_collective, culprit=2)
    assert fa.dumped == [0, 1, 2] and fa.culprits == [2], fa.describe()


def test_a_group_with_collectives_in_both_recorders_is_shown_to_fr_trace_as_two(monkeypatch):
    """Stand-in: NCCL's dump function returns one CUDA all_reduce of group 0 beside a CPU one that the
    CPU recorder (also a stand-in) holds: each backend numbers its collectives from 1."""
    from labcore.live import flight

    c10d = torch._C._distributed_c10d
    cpu = dict(_EMPTY, entries=[dict(_nccl_shaped_entry(0, 1), profiling_name="gloo:all_reduce",
                                     time_created_ns=10)])
    gpu = dict(_EMPTY, entries=[dict(_nccl_shaped_entry(0, 1), time_created_ns=20)])
    monkeypatch.setattr(c10d, "_dump_nccl_trace", lambda **kw: pickle.dumps(gpu), raising=False)
    monkeypatch.setattr(c10d, "_dump_fr_trace", lambda **kw: pickle.dumps(cpu))
    monkeypatch.setattr(flight, "_group_table", lambda: {"0": {"name": "0", "desc": "default_pg", "ranks": "[0]"}})
    trace = flight._trace({}, stacks=False)
    assert [(e["record_id"], e["process_group"][0]) for e in trace["entries"]] == [(0, "0:cpu"), (1, "0:nccl")]
    assert trace["pg_config"]["0:nccl"]["desc"] == "default_pg (nccl)"


# -- 2. A hang on NCCL is reported where the GPU is, and where the rank waits ------------------------
def _queue_then_wait(culprit: int):
    import torch.distributed as dist

    t = torch.ones(4)
    if dist.get_rank() == culprit:
        return "skipped"
    work = dist.all_reduce(t, async_op=True)   # queued: returns at once, as NCCL's calls do
    time.sleep(0.01)
    work.wait()                                # the line the rank waits at (NCCL: t.item())
    return "done"


@pytest.mark.live
def test_a_rank_waiting_for_a_queued_collective_is_reported_in_it_at_its_own_line():
    """Stand-in: gloo's ``async_op=True`` with the ``wait()`` on a later line has the shape of an NCCL
    collective (returns once queued) and the ``.item()`` that waits for the GPU: the rank's Python
    stack shows no collective, only its own line."""
    with lc.Cluster(3, backend="gloo", timeout=3, show_output=False) as cl:
        with pytest.raises(lc.CollectiveTimeout) as err:
            cl.run(_queue_then_wait, 1)
    report = err.value.report
    assert report.headline == "rank 1 never entered all_reduce; ranks 0 and 2 wait in it", str(report)
    where = str(report.stuck[0])
    assert where.startswith("waits at _queue_then_wait") and "all_reduce #1 of group 0" in where, where
    assert report.calls[0] == 1 and report.calls[1] == 0


def test_a_rank_at_its_own_line_with_an_unfinished_collective_is_in_that_collective():
    dump = ('Current thread 0x1 (most recent call first):\n'
            '  File "/home/me/train.py", line 12 in step\n'
            '  File "/x/labcore/live/worker.py", line 5 in run_call\n'
            '  File "/x/labcore/live/worker.py", line 7 in serve\n')
    where = hang.summarize_stack(dump, ("all_reduce", "all_reduce #5 of group 0 (started)"))
    assert where.collective == "all_reduce" and where.user_frame == "step (/home/me/train.py, line 12)"
    skipper = hang.summarize_stack(dump.replace("train.py", "other.py"))
    assert hang.headline([], {0: where, 1: skipper, 2: where}) == (
        "rank 1 has not reached all_reduce: still running its own code; ranks 0 and 2 wait in it")


def test_without_a_flight_recorder_the_counts_still_name_the_rank_that_skipped():
    dump = ('Current thread 0x1 (most recent call first):\n'
            '  File "/home/me/train.py", line 12 in step\n'
            '  File "/x/labcore/live/worker.py", line 7 in serve\n')
    waiting = hang.summarize_stack(dump)
    line = hang.headline([1], {0: waiting, 2: waiting}, calls={0: 1, 1: 0, 2: 1})
    assert line.startswith("rank 1 returned after 0 collectives while ranks 0 and 2 issued 1"), line


# -- 3. NCCL's init log reaches the sweep; late lines stay in last_output ---------------------------
_INIT = """h:1:1 [0] NCCL INFO NCCL version 2.29.7+cuda13.0
h:1:1 [0] NCCL INFO Channel 00/02 :    0
h:1:1 [0] NCCL INFO 2 coll channels, 2 collnet channels, 0 nvls channels, 2 p2p channels, 2 p2p channels per peer
"""


class _OneGpuStandIn:
    """Stand-in for a one-GPU NCCL cluster: it answers the sweep's calls with rows it makes up (nothing
    is measured: the test is about the log), its start-up output holds NCCL's init lines, and one line
    arrives after the last call returned, as NCCL's proxy threads print them."""

    world_size, backend, timeout = 1, "nccl", 60.0

    def __init__(self):
        self.start_output = [(_INIT, "")]
        self._last = self.start_output
        self.calls = 0

    @property
    def last_output(self):
        if self.calls >= 3 and self._last[0][1] == "":
            self._last[0] = (self._last[0][0], "h:1:9 [0] transport/net.cc:1 NCCL WARN late from a proxy thread\n")
        return self._last

    def call(self, fn, args=(), kwargs=None, timeout=None):
        self.calls += 1
        self._last = [("", "")]
        if fn.__name__ == "_free_memory":
            return [("cuda", 80 << 30)]
        if fn.__name__ == "_recorder_entries":
            return [0]
        spec = args[0]
        return [[dict(op=spec["op"], size=spec["nbytes"], placement="in-place", time_us=1.0, busbw=1.0, wrong=0)]]


def test_the_sweep_keeps_nccls_start_up_log_and_lines_printed_after_a_call():
    ranks = _OneGpuStandIn()
    df = lc.bench.sweep(ranks, "all_reduce", min_bytes=64, max_bytes=64, progress=False)
    nccl = df.attrs["nccl"]
    assert nccl.version == "2.29.7+cuda13.0" and nccl.channels == 2 and nccl.rings == {0: [0]}
    assert nccl.warnings == ["late from a proxy thread"]


def _print_from_a_thread_later():
    import threading

    def later():
        time.sleep(0.3)
        print("NCCL INFO from a proxy thread", flush=True)

    threading.Thread(target=later, daemon=True).start()
    return "returned"


@pytest.mark.live
def test_lines_printed_after_a_call_returned_are_kept_in_its_last_output():
    with lc.Cluster(2, backend="gloo", show_output=False) as cl:
        assert [out for out, _ in cl.start_output] == ["", ""]
        cl.run(_print_from_a_thread_later)
        first = cl.last_output
        time.sleep(1.0)
        assert [out for out, _ in cl.last_output] == ["NCCL INFO from a proxy thread\n"] * 2
        assert cl.last_output is first   # the same record: a copy taken earlier has the lines too
        cl.run(print, "second")
        assert [out for out, _ in cl.last_output] == ["second\n"] * 2


# -- 4. backend="auto" asks a child whether CUDA can run -------------------------------------------
# What torch raises where the driver is older than the CUDA it was built with (c10/cuda/CUDAFunctions.cpp)
_OLD_DRIVER = ("raise RuntimeError('The NVIDIA driver on your system is too old (found version 12020). Please "
               "update your GPU driver by downloading and installing a new version from the URL: "
               "http://www.nvidia.com/Download/index.aspx Alternatively, go to: https://pytorch.org to install a "
               "PyTorch version that has been compiled with your version of the CUDA driver.')")


@pytest.mark.live
def test_auto_falls_back_to_gloo_with_the_fix_when_cuda_cannot_run(monkeypatch, capsys):
    """Stand-ins: NVML counts two GPUs (``has_gpus``), and the child that tries CUDA fails the way
    ``torch.cuda.set_device`` fails on a driver older than torch's CUDA."""
    monkeypatch.setattr(sysinfo, "has_gpus", lambda n=1: n <= 2)
    monkeypatch.setattr(sysinfo, "_CUDA_PROBE", _OLD_DRIVER)
    sysinfo.cuda_runs.cache_clear()
    try:
        assert sysinfo.choose_backend(2, "auto") == "gloo"
        said = capsys.readouterr().err.strip().splitlines()
        assert len(said) == 1 and "too old" in said[0] and "580" in said[0] and "whl/cpu" in said[0], said
        with pytest.raises(ValueError, match="CUDA cannot run here.*too old"):
            sysinfo.choose_backend(2, "nccl")
    finally:
        sysinfo.cuda_runs.cache_clear()


@pytest.mark.live
def test_the_cuda_check_runs_in_a_child_and_leaves_the_notebook_without_cuda():
    if torch.backends.cuda.is_built():
        pytest.skip("a CUDA build of torch: the child's answer depends on this machine's GPUs")
    sysinfo.cuda_runs.cache_clear()
    ok, why = sysinfo.cuda_runs()
    assert not ok and why, why     # the CPU wheel cannot run CUDA, and the child said why
    assert not torch.cuda.is_initialized()


# -- 5. The group's backend string: its device part counts ----------------------------------------
def test_a_sweep_on_an_nccl_group_is_budgeted_against_gpu_memory(monkeypatch):
    """Stand-ins: an initialised group whose backend string is torch's for a lab NCCL rank, a CUDA
    device and ``torch.cuda.mem_get_info`` answering 80 GB free (no GPU is touched)."""
    import torch.distributed as dist

    from labcore.bench import memory
    from labcore.live import context

    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "cpu:gloo,cuda:nccl")
    monkeypatch.setattr(context, "device", lambda: torch.device("cuda", 0))
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (80 << 30, 80 << 30))
    assert memory.free_bytes_here() == ("cuda", 80 << 30)
    assert context.backend_for("cuda") == "nccl" and context.backend_for("cpu") == "gloo"


def test_the_rows_backend_is_the_one_that_ran_them(monkeypatch):
    import torch.distributed as dist

    from labcore.bench import harness

    monkeypatch.setattr(dist, "get_backend", lambda group=None: "cpu:gloo,cuda:nccl")
    assert harness._backend(torch.device("cuda", 0)) == "nccl"
    assert harness._backend(torch.device("cpu")) == "gloo"


# -- 6. The bench times GPUs as nccl-tests does ----------------------------------------------------
class _TimerStandIn:
    """Stand-in for CUDA's synchronize and events on a CPU: it writes down what the harness asks of
    them, in order, and times nothing (the calls are a counter, not a collective)."""

    def __init__(self, monkeypatch):
        from labcore.bench import harness

        self.log = []
        outer = self

        class Event:
            def __init__(self, enable_timing=False):
                outer.log.append("event")

            def record(self):
                pass

            def synchronize(self):
                pass

            def elapsed_time(self, other):
                return 0.001

        monkeypatch.setattr(harness, "_sync", lambda dev: self.log.append("sync"))
        monkeypatch.setattr(torch.cuda, "Event", Event)

    def call(self):
        self.log.append("call")


def test_gpu_time_is_the_host_clock_around_the_loop_and_the_median_a_second_loop(monkeypatch):
    from labcore.bench import harness

    timer = _TimerStandIn(monkeypatch)
    mean, median = harness._timed_loop(timer.call, 3, torch.device("cuda", 0))
    timed = timer.log[:timer.log.index("event")]
    assert timed == ["sync", "call", "call", "call", "sync"]          # nccl-tests' BenchTime
    assert timer.log[len(timed):].count("call") == 3 and median == pytest.approx(1e-6)


def test_an_emulated_out_of_place_call_copies_nothing_while_timed():
    from labcore.bench import harness, ops
    from labcore.bench.units import dtype_of

    op = ops.OPS["all_reduce"]
    ran = []
    stand_in = type("Op", (), {"copies": True, "name": "all_reduce", "fill_redop": op.fill_redop,
                               "run": lambda self, send, recv, ctx: ran.append(send is recv)})()
    ctx = ops.Ctx(0, 2, -1, "sum", dtype_of("float")[1], 4, torch_op="sum")
    send, recv = torch.empty(4), torch.zeros(4)
    harness._prepare(stand_in, "out-of-place", send, recv, ctx)
    assert torch.equal(recv, send)                     # filled once, before timing
    recv.zero_()
    harness._caller(stand_in, "out-of-place", send, recv, ctx)()
    assert ran == [True] and not recv.any()            # the timed call: in place on recv, no copy


def test_the_sweeps_own_ranks_run_without_the_flight_recorder(monkeypatch):
    import importlib

    import labcore.live.cluster

    sweep_module = importlib.import_module("labcore.bench.sweep")

    started = []

    class _Refuse:
        def __init__(self, n, env=None, **kw):
            started.append(env)
            raise RuntimeError("no ranks in this test")

    monkeypatch.setattr(labcore.live.cluster, "Cluster", _Refuse)
    monkeypatch.setattr(sysinfo, "has_gpus", lambda n=1: False)
    for kwargs in ({}, {"flight_recorder": True}, {"env": {"NCCL_DEBUG": "INFO"}}):
        with pytest.raises(RuntimeError, match="no ranks"):
            sweep_module.sweep(2, "all_reduce", max_bytes=64, progress=False, **kwargs)
    assert started == [{"TORCH_FR_BUFFER_SIZE": "0"}, {}, {"TORCH_FR_BUFFER_SIZE": "0", "NCCL_DEBUG": "INFO"}]


# -- 8. A subgroup's watchdog cannot kill a rank later ---------------------------------------------
def test_nccl_ranks_run_without_the_heartbeat_monitors_kill(monkeypatch, tmp_path):
    from labcore.live import worker

    for name in ("TORCH_NCCL_ENABLE_MONITORING", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_DUMP_ON_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    worker._nccl_defaults(str(tmp_path))
    import os
    assert os.environ["TORCH_NCCL_ENABLE_MONITORING"] == "0" and os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "0"


def _watchdog_timed_out_stand_in():
    """On a rank: gloo's backend answers ``get_error()`` with TIMEOUT, as ProcessGroupNCCL's does once its
    watchdog saw a collective time out (``ErrorType getError()``, ProcessGroupNCCL.hpp)."""
    c10d = torch._C._distributed_c10d
    c10d.ProcessGroupGloo.get_error = lambda self: c10d.ErrorType.TIMEOUT
    return "armed"


@pytest.mark.live
def test_a_group_whose_watchdog_saw_a_timeout_is_replaced_before_the_next_call(capsys):
    """Stand-in: the watchdog's error, above; the group must be replaced at the next call, with the
    reason, instead of living on until torch's heartbeat monitor kills a rank."""
    with lc.Cluster(2, backend="gloo", timeout=60) as cl:
        assert cl.run(_watchdog_timed_out_stand_in) == ["armed"] * 2
        assert cl.run(lambda: "fresh") == ["fresh"] * 2 and cl.restarts == 1
    said = capsys.readouterr().out
    assert "starting 2 fresh ranks (rank 0 had group 0 (timeout) failed in NCCL's watchdog" in said, said


# -- 7. The acceptance script says what it needs -----------------------------------------------------
def _acceptance():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_acceptance.py"
    spec = importlib.util.spec_from_file_location("gpu_acceptance", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)   # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_acceptance_scripts_nccl_line_pattern_takes_nccl_2_29s_timestamped_warn():
    pattern = _acceptance().NCCL_LINE
    assert pattern.match("gpu1:2048:2048 [0] NCCL INFO NCCL version 2.29.7+cuda13.0")
    # NCCL 2.29 prefixes WARN lines with a timestamp (the form of ROCm/ROCm#5656's RCCL log, quoted in tests/data)
    assert pattern.match("[2025-11-12 11:11:57] gpu1:2048:2050 [0] misc/socket.cc:50 NCCL WARN socket closed")
    assert not pattern.match("step 3 loss 0.25 (NCCL INFO lines above)")


@pytest.mark.live
def test_the_acceptance_script_without_a_gpu_says_what_is_missing_in_one_line(tmp_path):
    import subprocess
    from pathlib import Path

    if lc.has_gpus(1):
        pytest.skip("this machine has a GPU: run benchmarks/gpu_acceptance.py itself (minutes)")
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_acceptance.py"
    done = subprocess.run([sys.executable, str(script), "--out", str(tmp_path / "run")], capture_output=True,
                          text=True, timeout=300)
    said = (done.stdout + done.stderr).strip().splitlines()
    assert done.returncode == 2 and len(said) == 1, done.stdout + done.stderr
    assert "GPU" in said[0] and "nvidia-smi" in said[0]
