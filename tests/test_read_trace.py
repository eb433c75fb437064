"""lc.read_trace on real profiler traces of multi-GPU NCCL jobs (tests/data/traces, from
HolisticTraceAnalysis's test data): its collectives, bytes and busbw against an independent count
of each file's own events, HTA's communication/computation overlap, the kernel-name rules against
NCCL's sources, the replay and the timeline on a real job, and every bad input refused in one line."""
import gzip
import json
import logging
import os
import tempfile
from collections import Counter, defaultdict

import numpy as np
import pytest

import labcore as lc
from labcore.readers import TRACES_DIR, kernel_choice, read_trace
from labcore.readers import profiler_trace as kineto
from labcore.readers.recording import ITEMSIZE as _ITEMSIZE

TRACES = ["a100_2ranks_rank0.json.gz", "a100_8ranks_rank3.json.gz", "v100_2ranks_rank1.json.gz",
          "a100_16ranks_rank0.json.gz", "128ranks_rank*.json.gz"]
# the profiler's "Input type" names -> c10 names (for the independent byte count)
_TYPES = {"float": "Float", "int": "Int", "long": "Long", "long int": "Long", "unsigned char": "Byte",
          "signed char": "Char", "c10::BFloat16": "BFloat16", "c10::Half": "Half", "double": "Double"}
_OPS = {"nccl:all_reduce": "all_reduce", "nccl:all_to_all": "all_to_all", "nccl:broadcast": "broadcast",
        "nccl:_all_gather_base": "all_gather", "nccl:_reduce_scatter_base": "reduce_scatter"}


def _independent(path):
    """Per op, from the raw file with plain json and a linear scan per kernel: collectives whose
    NCCL kernel was launched inside their nccl: scope, their bytes (from the scope's or
    record_param_comms' arguments) and kernel time; and the NCCL kernels of the file."""
    trace = _raw(path)
    events = trace["traceEvents"]
    x = [e for e in events if e.get("ph") == "X"]
    launches = {e["args"]["correlation"]: e for e in x if e.get("cat") == "cuda_runtime" and "correlation" in e["args"]}
    scopes = [e for e in x if e["name"].startswith("nccl:") and e.get("cat") in ("cpu_op", "user_annotation")]
    params = [e for e in x if e["name"] == "record_param_comms"]
    kernels = [e for e in x if e.get("cat") == "kernel" and e["name"].startswith("nccl") and "Kernel" in e["name"]]
    world = trace["distributedInfo"]["world_size"]
    out = defaultdict(lambda: [0, 0, 0.0])
    for k in kernels:
        launch = launches.get(k["args"]["correlation"])
        if launch is None:
            continue
        scope = next(s for s in scopes if s["tid"] == launch["tid"] and s["ts"] <= launch["ts"] <= s["ts"] + s["dur"])
        meta = next((p["args"] for p in params if p["tid"] == scope["tid"]
                     and p["ts"] <= scope["ts"] <= p["ts"] + p["dur"] and "In msg nelems" in p["args"]), None)
        op = _OPS[scope["name"]]
        if meta is not None:
            nbytes = (meta["Out msg nelems"] if op == "all_gather" else meta["In msg nelems"]) * _ITEMSIZE[meta["dtype"]]
        else:
            dims, kind = scope["args"]["Input Dims"][0], scope["args"]["Input type"][0]
            nbytes = int(np.prod(dims)) * _ITEMSIZE[_TYPES[kind]]
            nbytes *= world if op == "all_gather" else 1
        row = out[op]
        row[0], row[1], row[2] = row[0] + 1, row[1] + nbytes, row[2] + k["dur"]
    return dict(out), len(kernels), Counter(_OPS[s["name"]] for s in scopes), trace["distributedInfo"]["rank"]


def _raw(path) -> dict:
    with gzip.open(path) as f:
        return json.load(f)


@pytest.mark.parametrize("pattern", TRACES)
def test_collectives_bytes_and_time_match_the_files_own_kernel_events(pattern):
    rec = read_trace(TRACES_DIR / pattern)
    for path in sorted(TRACES_DIR.glob(pattern)):
        want, n_kernels, n_scopes, rank = _independent(path)
        rows = rec.bandwidth(rank)
        got = {op: [len(g), int(g["bytes"].sum()), float(g["time_us"].sum())] for op, g in rows.groupby("op")}
        assert got.keys() == want.keys()
        for op in want:
            assert got[op][:2] == want[op][:2], op
            assert got[op][2] == pytest.approx(want[op][2], abs=1e-3 * want[op][0]), op      # us, ns digits
        # every NCCL kernel and every nccl: scope is in a row or counted in the notes
        left = {what: int(n) for note in rec.notes if note.startswith(f"rank {rank}:") and "left out" in note
                for n, what in [note.split(": ", 1)[1].split(" ", 1)]}
        launched_before = sum(n for what, n in left.items() if what.startswith("NCCL kernel(s) launched before"))
        no_kernel = sum(n for what, n in left.items() if what.startswith("collective(s) whose kernels"))
        assert len(rows) + launched_before == n_kernels
        assert len(rows) + no_kernel == sum(n_scopes.values())
        busbw = rows["busbw_gbs"]
        assert (busbw > 0).all() and busbw.notna().all()


def test_a100_8_rank_job_reads_as_recorded():
    rec = read_trace(TRACES_DIR / "a100_8ranks_rank3.json.gz")
    assert rec.ranks == (3,) and rec.world_size == 8 and rec.backend == "nccl" and rec.n_steps == 2
    assert rec.steps["label"].tolist() == ["ProfilerStep#1012", "ProfilerStep#1013"]
    assert rec.machine == dict(gpu="NVIDIA A100-PG509-200", compute_capability="8.0", gpus_seen=8, world_size=8,
                               nodes=1, nccl_version="", kernels="2.7-2.11")
    ar = rec.bandwidth().query("op == 'all_reduce' and step == 0")
    # three bucket sizes, three protocols, as the launch sizes say (threads a block)
    assert ar[["bytes", "algorithm", "protocol", "channels", "threads"]].values.tolist() == [
        [181240752, "Ring", "Simple", 24, 544], [1068160, "Ring", "LL", 24, 512], [17728292, "Ring", "LL128", 24, 640]]
    assert ar["busbw_gbs"].round(1).tolist() == [168.0, 18.7, 7.2]
    a2a = rec.collectives().query("op == 'all_to_all'")
    assert (a2a["algorithm"] == "").all() and (a2a["kernel"] == "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t").all()
    assert set(rec.frame["group"]) == {"stream 21"} and "names no process groups" in rec.notes[0]
    assert (rec.frame["issued_s"] == rec.frame["start_s"]).all() and rec.frame["time_us"].notna().all()
    assert not rec.scopes["name"].str.startswith("nccl").any()
    assert rec.frame["seq"].tolist() == list(range(20))


def test_torch_23_metadata_names_groups_dtypes_and_nccl():
    rec = read_trace(TRACES_DIR / "a100_2ranks_rank0.json.gz")
    rows = rec.collectives()
    assert rec.notes == [] and rec.machine["nccl_version"] == "2.17.1"
    assert set(rows["group"]) == {"0"} and set(rows["group_ranks"]) == {(0, 1)} and set(rows["group_size"]) == {2}
    assert rows.groupby("op")["dtype"].apply(set).to_dict() == {"all_reduce": {"float"}, "broadcast": {"float", "long"}}
    assert rows.query("bytes == 424")[["protocol", "channels", "threads"]].values.tolist() == [["LL or Simple", 1, 96]] * 2


def test_two_ranks_of_a_128_rank_job_combine():
    rec = read_trace([TRACES_DIR / "128ranks_rank1.json.gz", TRACES_DIR / "128ranks_rank0.json.gz"])
    assert rec.ranks == (0, 1) and rec.world_size == 128 and rec.machine["gpu"] == ""
    a, b = rec.collectives(0), rec.collectives(1)
    assert a["op"].value_counts().to_dict() == b["op"].value_counts().to_dict() == {
        "all_to_all": 4, "all_reduce": 4, "all_gather": 2}
    # the all-gathers, on a communicator (stream) of their own, are the same on both ranks; HTA's
    # "sampled" files keep a subset of the other collectives (see tests/data/traces/README.md)
    gathers = [r.query("op == 'all_gather'")[["bytes", "group", "seq"]].values.tolist() for r in (a, b)]
    assert gathers[0] == gathers[1] == [[2147483648, "stream 203", 0], [2147483648, "stream 203", 1]]
    assert a.query("op == 'all_reduce'")["bytes"].tolist() != b.query("op == 'all_reduce'")["bytes"].tolist()
    # the generic kernel: NCCL's SendRecv kernel runs the all-reduces, so the name says nothing of the algorithm
    ar = a.query("op == 'all_reduce'")
    assert set(ar["kernel"]) == {"ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t"}
    assert set(ar["algorithm"]) == {"Tree or Ring or NVLS or NVLSTree"} and set(ar["protocol"]) == {"LL128 or Simple"}
    assert set(a.query("op == 'all_gather'")["algorithm"]) == {"Ring"}                         # 544: a Simple ring


def _hta_overlap(paths):
    pytest.importorskip("hta", reason="HolisticTraceAnalysis (the test extra) is the independent check")
    from hta.trace_analysis import TraceAnalysis

    logging.getLogger("hta").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as d:
        for p in paths:
            os.symlink(p, os.path.join(d, p.name))
        t = TraceAnalysis(trace_dir=d, include_last_profiler_step=True)
        return t.get_comm_comp_overlap(visualize=False).set_index("rank")["comp_comm_overlap_pctg"]


@pytest.mark.live                  # HTA parses the ranks of a job in a process pool
@pytest.mark.parametrize("pattern,tolerance", [
    ("a100_8ranks_rank3.json.gz", 0.01), ("v100_2ranks_rank1.json.gz", 0.01), ("a100_16ranks_rank0.json.gz", 0.01),
    ("128ranks_rank*.json.gz", 0.01),
    # HTA rounds this trace's nanosecond timestamps down to whole microseconds; the reader keeps them
    ("a100_2ranks_rank0.json.gz", 0.5)])
def test_hidden_communication_is_htas_overlap(pattern, tolerance):
    hta = _hta_overlap(sorted(TRACES_DIR.glob(pattern)))
    ours = read_trace(TRACES_DIR / pattern).exposed(by="rank").set_index("rank")
    assert ours.index.tolist() == hta.index.tolist()
    assert (100 * ours["hidden_us"] / ours["comm_us"]).tolist() == pytest.approx(hta.tolist(), abs=tolerance)
    assert (ours["exposed_us"] + ours["hidden_us"]).tolist() == pytest.approx(ours["comm_us"].tolist())


def test_exposed_per_step_adds_up():
    rec = read_trace(TRACES_DIR / "a100_8ranks_rank3.json.gz")
    per_step = rec.exposed()
    assert per_step["step"].tolist() == [0, 1]
    assert per_step["exposed_share"].round(3).tolist() == [0.5, 0.554]
    with pytest.raises(ValueError, match="by must be 'step' or 'rank'"):
        rec.exposed(by="op")


def test_matching_pairs_every_kernel_of_a_whole_window():
    ev = kineto.Events.from_trace(kineto.load_trace(TRACES_DIR / "a100_2ranks_rank0.json.gz"))
    found, left = kineto.match_kernels(ev)
    assert len(found) == 14 and all(len(c["kernels"]) == 1 for c in found)
    assert {k: len(v) for k, v in left.items()} == {"no launch": 0, "no scope": 0, "no kernel": 0}
    assert all(c["params"].get("Collective name") in ("allreduce", "broadcast") for c in found)
    by_time, _ = kineto.match_kernels(ev, by_thread=False)          # the live profile's way: time alone
    assert [c["kernels"] for c in by_time] == [c["kernels"] for c in found]


# --- what kernel names and launch sizes say, rule by rule (NVIDIA/nccl's sources) ----------------
@pytest.mark.parametrize("kernel,op,threads,sm,want", [
    # before 2.19 the name gives the algorithm; every protocol runs in the LL kernel
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "all_reduce", 512, None, ("Ring", "LL")),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "all_reduce", 256, None, ("Ring", "LL")),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "all_reduce", 640, None, ("Ring", "LL128")),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "all_reduce", 288, None, ("Ring", "Simple")),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "all_reduce", 96, None, ("Ring", "LL or Simple")),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "all_reduce", None, None, ("Ring", "LL or LL128 or Simple")),
    ("ncclKernel_AllReduce_TREE_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "all_reduce", 384, None,
     ("Tree", "Simple")),
    ("ncclKernel_AllReduce_TREE_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "all_reduce", 640, None,
     ("Tree", "LL128 or Simple")),
    ("ncclKernel_AllReduce_NVLS_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "all_reduce", 640, 90,
     ("NVLS", "Simple")),
    # the generic kernel (SendRecv's) of a build without the function's own
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "all_reduce", 544, None,
     ("Ring", "Simple")),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "all_reduce", 640, 80,
     ("Tree or Ring", "LL128 or Simple")),
    # from 2.19 every algorithm but Tree runs in the RING_LL kernel; trees use 640 threads from 2.22
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "all_reduce", 544, 90,
     ("Ring", "Simple")),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "all_reduce", 512, 90,
     ("Ring", "LL")),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "all_reduce", 640, 90,
     ("Ring or NVLS or NVLSTree", "LL128 or Simple")),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "all_reduce", 640, 80,
     ("Ring", "LL128")),
    ("ncclDevKernel_AllReduce_Sum_bf16_TREE_LL(ncclDevKernelArgsStorage<4096ul>)", "all_reduce", 640, 90,
     ("Tree", "LL or LL128 or Simple")),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "all_gather", 640, 90,
     ("Ring or NVLS or PAT", "LL128 or Simple")),
    ("ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "broadcast", 128, None,
     ("Ring", "LL or Simple")),
    ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", "reduce_scatter", 288, 90, ("Ring", "Simple")),
    # no algorithm: point-to-point, all_to_all, kernels NCCL does not name so
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "all_to_all", 640, 90, ("", "")),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)", "send", 640, None, ("", "")),
    ("void at::native::vectorized_elementwise_kernel<4>()", "all_reduce", 512, None, ("", "")),
    # a launch size NCCL's defaults never make (NCCL_NTHREADS set): the algorithm, no protocol
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "all_reduce", 448, None, ("Ring", "")),
])
def test_kernel_choice_follows_ncclS_rules(kernel, op, threads, sm, want):
    assert kernel_choice(kernel, op, threads, sm) == want


# --- replay and timeline on a real job --------------------------------------------------------
def test_a_real_step_replays_and_draws():
    rec = read_trace(TRACES_DIR / "a100_2ranks_rank0.json.gz")
    r = lc.sim.replay(rec, "nvswitch8", world_size=8, steps=[1])
    c = r.collectives
    assert (c["status"] == "simulated").all() and len(c) == 7 and (c["ranks"] == 8).all()
    assert c["recorded_us"].tolist() == pytest.approx(rec.collectives().query("step == 1")["time_us"].tolist())
    assert 0 < r.steps["overlap_us"].iloc[0] <= r.steps["serial_us"].iloc[0]
    fig = lc.viz.step_timeline(rec, [r], step=1, exposed=True)
    names = {t.name for t in fig.data}
    assert {"compute", "all_reduce", "broadcast", "exposed communication"} <= names
    assert fig.layout.height <= 800


# --- bad inputs: one line each, nothing read past the limit -------------------------------------
def _write(d, name, data: bytes, gz: bool = False) -> str:
    path = os.path.join(d, name)
    with (gzip.open(path, "wb") if gz else open(path, "wb")) as f:
        f.write(data)
    return path


def _minimal(**change):
    trace = {"distributedInfo": {"rank": 0, "world_size": 2, "backend": "nccl"},
             "traceEvents": [{"ph": "X", "cat": "kernel", "name": "gemm", "ts": 1, "dur": 2, "args": {}}]}
    trace.update(change)
    return json.dumps(trace).encode()


def test_bad_inputs_are_refused_in_one_line():
    with tempfile.TemporaryDirectory() as d:
        cases = {
            _write(d, "broken.json", b'{"traceEvents": [1,'): "is not JSON",
            _write(d, "deep.json", b"[" * 200_000): "nested too deeply",
            _write(d, "latin.json", b'{"a": "\xff"}'): "is not UTF-8",
            _write(d, "list.json", b"[]"): "no traceEvents list",
            _write(d, "nodist.json", json.dumps({"traceEvents": []}).encode()): "has no distributedInfo",
            _write(d, "rank.json", _minimal(distributedInfo={"rank": 2, "world_size": 2})): "which is not a rank",
            _write(d, "ts.json", _minimal(traceEvents=[{"ph": "X", "cat": "kernel", "name": "k", "ts": "1"}])):
                "event 0 ('k') has a ts that is not a finite number",
            _write(d, "args.json", _minimal(traceEvents=[{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "args": 3}])):
                "has args that are not a JSON object",
            _write(d, "nokernels.json", _minimal(traceEvents=[])): "holds no GPU kernels",
            _write(d, "cut.json.gz", gzip.compress(b'{"traceEvents": []}')[:-6]): "is not a readable gzip file",
            _write(d, "trace.txt", b"{}"): "is not a .json or .json.gz file",
            d: "is not a .json or .json.gz file",
            os.path.join(d, "missing.json"): "cannot be read",
        }
        fifo = os.path.join(d, "fifo.json")
        os.mkfifo(fifo)
        cases[fifo] = "is not a regular file"
        for path, message in cases.items():
            with pytest.raises(ValueError) as err:
                read_trace(path)
            text = str(err.value)
            assert message in text and "\n" not in text and (os.path.basename(path) in text), (path, text)
        with pytest.raises(ValueError, match="appears in both"):
            read_trace([_write(d, "a.json", _minimal()), _write(d, "b.json", _minimal())])
        other = _write(d, "c.json", _minimal(distributedInfo={"rank": 1, "world_size": 4}))
        with pytest.raises(ValueError, match=r"jobs of \[2, 4\] ranks"):
            read_trace([os.path.join(d, "a.json"), other])
        with pytest.raises(ValueError, match="no file matches"):
            read_trace(os.path.join(d, "nothing*.json"))
    for bad in ([], 3, [3]):
        with pytest.raises(TypeError, match="read_trace takes"):
            read_trace(bad)


def test_size_limits_hold_before_and_while_decompressing():
    limit = kineto.MAX_TRACE_BYTES
    with tempfile.TemporaryDirectory() as d:
        big = os.path.join(d, "big.json")
        with open(big, "wb") as f:
            f.truncate(limit + 1)              # sparse: refused from its size, unread
        with pytest.raises(ValueError, match=r"big.json: is 67,108,865 bytes, over the 64 MiB"):
            read_trace(big)
        bomb = os.path.join(d, "bomb.json.gz")
        with gzip.open(bomb, "wb", compresslevel=9) as f:
            chunk = b" " * (1 << 20)
            for _ in range((limit >> 20) + 2):
                f.write(chunk)
        assert os.path.getsize(bomb) < 1 << 20
        with pytest.raises(ValueError, match=r"bomb.json.gz: decompresses to over 64 MiB"):
            read_trace(bomb)


def test_docstring_examples_run():
    import doctest

    assert doctest.testmod(kineto, optionflags=doctest.NORMALIZE_WHITESPACE).failed == 0


# -- What real GPU jobs leave that is not a plain NCCL step (issue 30) --------------------------------
def test_a_one_rank_communicators_collectives_are_kept_without_kernels():
    # HTA's ns_resolution trace: world size 1, NCCL 2.17.1; NCCL completes a one-rank collective without a
    # kernel, so its scopes launch none, which is not "ran after the trace ended"
    raw = _raw(TRACES_DIR / "v100_1rank_rank0.json.gz")
    scopes = Counter(e["name"] for e in raw["traceEvents"] if str(e.get("name", "")).startswith("nccl:"))
    rec = read_trace(TRACES_DIR / "v100_1rank_rank0.json.gz")
    rows = rec.collectives()
    assert Counter(rows["backend_op"]) == scopes == {"nccl:all_reduce": 25, "nccl:broadcast": 10}
    assert rows["bytes"].notna().all() and (rows["group_size"] == 1).all() and (rows["kernel"] == "").all()
    assert (rows["end_s"] >= rows["start_s"]).all() and set(rows["group"]) == {"0"}
    assert rec.notes == ["rank 0: 35 collective(s) of a one-rank communicator, which NCCL completes without a "
                         "kernel: kept, timed by their CPU scope"]


def test_communication_that_is_not_nccls_is_named_in_the_notes():
    # TraceLens's B200 trace: one NCCL all_gather, and torch's symmetric-memory all-reduce kernels beside it
    raw = _raw(TRACES_DIR / "b200_8ranks_rank0.json.gz")
    multimem = sum(1 for e in raw["traceEvents"] if e.get("cat") == "kernel" and "multimem_all_reduce" in e["name"])
    rec = read_trace(TRACES_DIR / "b200_8ranks_rank0.json.gz")
    assert rec.collectives()[["op", "bytes", "group"]].values.tolist() == [["all_gather", 402176, "3"]]
    assert multimem == 73 and len(rec.notes) == 1
    assert f"{multimem} kernel(s) of another communication library (multimem_all_reduce_kernel x73)" in rec.notes[0]


def test_collectives_without_recorded_sizes_are_kept_with_unknown_bytes(tmp_path):
    # a real trace with its size arguments taken out, as HTA's df_index_resolver trace records none (2,020
    # all_reduces of a V100 job, 3 MB: not kept in the lab)
    raw = _raw(TRACES_DIR / "v100_2ranks_rank1.json.gz")
    for e in raw["traceEvents"]:
        args = e.get("args", {})
        for key in ("In msg nelems", "Out msg nelems", "dtype", "Input Dims", "Input type"):
            args.pop(key, None)
    path = tmp_path / "unsized.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(raw, f)
    sized, unsized = read_trace(TRACES_DIR / "v100_2ranks_rank1.json.gz"), read_trace(path)
    assert len(unsized.frame) == len(sized.frame) and unsized.frame["bytes"].isna().all()
    assert (unsized.frame["start_s"].values == sized.frame["start_s"].values).all()
    assert any("bytes unknown (NaN)" in note for note in unsized.notes)


def test_a_trace_without_distributed_info_is_refused_saying_why():
    with pytest.raises(ValueError, match="has no distributedInfo .* profile after init_process_group"):
        read_trace(TRACES_DIR / "rank70_no_distributed_info.json.gz")
