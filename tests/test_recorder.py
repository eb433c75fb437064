"""The collective recorder on live gloo ranks: byte counts against the models' own sizes, ZeRO's
volumes against the paper, what each row says, and the errors."""
import os
import time

import pytest
import torch

import labcore as lc
from labcore.exercises import data_parallel as dp
from labcore.exercises import sharding as sh
from labcore.live import magic
from labcore.live.recorder import record
from labcore.readers.recording import Recording, combine

pytestmark = pytest.mark.live

PSI_BYTES = sum(p.numel() * p.element_size() for p in dp.make_model().parameters())   # float64 MLP


@pytest.fixture(scope="module")
def cl():
    cluster = magic.get_cluster(4)          # the cluster the exercises and %%ranks 4 use too
    yield cluster
    magic.close_all()


def test_ddp_all_reduces_the_gradient_bytes_in_its_buckets(cl):
    cap = 256 << 10
    rec = combine(cl.run(dp.ddp_train, cap, steps=2, dims=dp.DEEP, dtype=torch.float32, per_rank=16))
    model = dp.make_model(dims=dp.DEEP, dtype=torch.float32)
    layout = [sum(p.numel() * p.element_size() for p in b) for b in dp.buckets_of(model.parameters(), cap)]
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    assert len(layout) > 1
    for rank in range(4):
        rows = rec.collectives(rank)
        for step in (0, 1):
            reduced = rows[(rows["step"] == step) & (rows["op"] == "all_reduce")]
            assert reduced["bytes"].tolist() == layout               # DDP's buckets, last layers first
            assert reduced["bytes"].sum() == grad_bytes
            assert (reduced["dtype"] == "float").all() and (reduced["group_size"] == 4).all()
            assert reduced["via"].str.contains("_engine_run_backward").all()   # launched from backward
    # the same collective has the same group sequence number on every rank
    seqs = rec.frame.groupby("rank")["seq"].apply(list)
    assert all(s == seqs.iloc[0] for s in seqs)
    summary = rec.summary().loc[1]
    assert summary.loc["all_reduce", "calls"] == len(layout)
    assert summary.loc["all_reduce", "sent_bytes"] == pytest.approx(2 * 3 / 4 * grad_bytes)
    assert (rec.step_times() > 0).all()


def test_ddp_construction_broadcasts_rank_0s_parameters(cl):
    def build():
        from torch.nn.parallel import DistributedDataParallel as DDP

        with record("init") as rec:
            DDP(dp.make_model(seed=lc.rank_info().rank))
        return rec

    rows = combine(cl.run(build)).collectives()
    sync = rows[rows["via"].str.endswith("_sync_params_and_buffers")]
    assert sync["op"].tolist() == ["broadcast"] and sync["bytes"].tolist() == [PSI_BYTES]


def test_fsdp2_all_gathers_carry_each_layers_parameters(cl):
    layers = [sum(p.numel() * 8 for p in m.parameters()) for m in dp.make_model() if isinstance(m, torch.nn.Linear)]
    for reshard, gathers in ((True, 2), (False, 1)):
        results = cl.run(sh.fsdp_train, reshard)
        want = sh.adam_reference(4)
        assert all(torch.allclose(p, want, rtol=1e-12, atol=1e-14) for p, _ in results)
        rows = combine([r for _, r in results]).collectives()
        for step in range(3):
            s = rows[rows["step"] == step]
            assert sorted(s.loc[s["op"] == "all_gather", "bytes"]) == sorted(layers * gathers)
            assert sorted(s.loc[s["op"] == "reduce_scatter", "bytes"]) == sorted(layers)
            assert (s["backend_op"][s["op"] == "reduce_scatter"] == "gloo:all_reduce").all()   # gloo's way


def test_zero_by_hand_matches_adam_and_moves_the_papers_volumes(cl):
    want = sh.adam_reference(4)
    layers = [sum(p.numel() * 8 for p in m.parameters()) for m in dp.make_model() if isinstance(m, torch.nn.Linear)]
    volumes = {}
    for stage in (0, 1, 2, 3):
        results = cl.run(sh.zero_train, stage)
        assert all(torch.allclose(r["params"], want, rtol=1e-12, atol=1e-14) for r in results), stage
        rec = combine([r["recording"] for r in results])
        for step in range(3):
            per_op = rec.summary().loc[step, "bytes"]
            volumes[stage, step] = sum(b * (2 if op == "all_reduce" else 1) for op, b in per_op.items()) / PSI_BYTES
        memory = results[0]["memory"]
        assert memory["optimizer"] == (2 * PSI_BYTES if stage == 0 else 2 * PSI_BYTES // 4)
        assert memory["params"] == (PSI_BYTES // 4 if stage == 3 else PSI_BYTES)
        if stage == 3:      # every all-gather carries one layer's flat parameters
            gathers = rec.collectives().query("op == 'all_gather' and step == 0")["bytes"]
            assert sorted(gathers) == sorted(layers * 2)
    assert volumes == {(s, t): (3.0 if s == 3 else 2.0) for s in range(4) for t in range(3)}


def test_zero_redundancy_optimizer_all_reduces_then_broadcasts(cl):
    results = cl.run(sh.zero_redundancy_train)
    want = sh.adam_reference(4)
    assert all(torch.allclose(p, want, rtol=1e-12, atol=1e-14) for p, _ in results)
    per_op = combine([r for _, r in results]).summary().loc[2, "bytes"]     # step 1 rebuilds DDP buckets
    assert per_op.to_dict() == {"all_reduce": PSI_BYTES, "broadcast": PSI_BYTES}


def _mixed():
    import torch.distributed as dist

    rank = dist.get_rank()
    with record("mixed") as rec:
        with rec.step():
            t = torch.ones(3, dtype=torch.float64)
            if rank == 0:
                dist.send(t, 1)
            elif rank == 1:
                dist.recv(t, 0)
            out = torch.empty(12, dtype=torch.float64)
            dist.all_gather_single(out, t)
            dist.reduce_scatter_single(t, out)
            dist.barrier()
            pair = dist.new_group([0, 1])
            if rank < 2:
                dist.all_reduce(t, group=pair)
        with rec.step():
            if rank:
                time.sleep(0.3)   # the others join late, so rank 0's all-reduce is surely in flight...
            work = dist.all_reduce(torch.ones(1000), async_op=True)
            with torch.profiler.record_function("compute"):     # a scope the recorder sees
                busy, until = torch.ones(200, 200), time.perf_counter() + 0.1
                while time.perf_counter() < until:
                    busy = busy @ busy / 200      # ...while rank 0 computes
            work.wait()
            dist.all_reduce(torch.ones(1000))     # blocking: nothing happens while it runs
    return rec


def test_rows_name_op_bytes_group_and_frame(cl):
    rec = combine(cl.run(_mixed))
    assert isinstance(rec, Recording) and rec.ranks == (0, 1, 2, 3) and rec.n_steps == 2
    r0, r1, r2 = rec.collectives(0), rec.collectives(1), rec.collectives(2)
    assert r0.query("op == 'send'")["bytes"].tolist() == [24] and r1.query("op == 'recv'")["bytes"].tolist() == [24]
    assert "send" not in set(r2["op"])
    ag = r0.query("op == 'all_gather'").iloc[0]
    assert (ag["bytes"], ag["in_bytes"], ag["out_bytes"]) == (96, 24, 96)        # nccl-tests: the output
    rs = r0.query("op == 'reduce_scatter'").iloc[0]
    assert rs["bytes"] == 96 and rs["backend_op"] == "gloo:all_reduce"
    assert rs["frame"].startswith("_mixed (") and rs["via"] == "reduce_scatter_single"
    assert set(r0.query("step == 0")["op"]) >= {"barrier", "all_reduce"}
    sub = r0.query("op == 'all_reduce' and step == 0").iloc[0]
    assert sub["group_ranks"] == (0, 1) and sub["group_size"] == 2
    assert "all_reduce" not in set(r2.query("step == 0")["op"])
    timed = r0.query("op != 'recv'")
    assert (timed["start_s"] >= timed["issued_s"] - 1e-3).all() and (timed["end_s"] >= timed["start_s"]).all()
    assert r0.query("step == 1")["overlapped"].tolist() == [True, False]
    assert "compute" in set(rec.scopes["name"])
    by_rank = rec.summary(by="rank")
    assert by_rank.loc[(0, 0), "bytes"] > by_rank.loc[(0, 2), "bytes"]     # rank 0 sent and joined the pair
    # gloo runs no kernels: the kernel columns are empty, and gloo's send/recv events do not name the peer
    assert (rec.frame[["kernel", "algorithm", "protocol"]] == "").all().all()
    assert (rec.frame[["peer", "channels", "threads"]] == -1).all().all()
    assert rec.notes == [] and rec.machine == {}


def test_percent_percent_ranks_record(cl):
    ns = {}                                  # the notebook's namespace; magic.ranks is the cell magic's body
    magic.ranks("4 --record rec", "with rec.step():\n    dist.all_reduce(torch.ones(8))\n", ns)
    rec = ns["rec"]
    assert isinstance(rec, Recording) and rec.collectives()["bytes"].tolist() == [32]
    with pytest.raises(lc.RankError):
        magic.ranks("4 --record rec2", "dist.all_reduce(torch.ones(8))\nraise ValueError('boom')\n", ns)
    magic.ranks("4 --record rec3", "dist.broadcast(torch.ones(2), 0)\n", ns)   # the profiler was stopped
    assert ns["rec3"].collectives()["op"].tolist() == ["broadcast"]
    with pytest.raises(ValueError, match="Python name"):
        magic.parse_line("4 --record not-a-name")


def _misuse():
    import torch.distributed as dist
    from torch.profiler import profile

    errors = []
    rec = record("x")
    try:
        rec.recording()
    except RuntimeError as e:
        errors.append(str(e))
    try:
        with rec.step():
            pass
    except RuntimeError as e:
        errors.append(str(e))
    with profile():
        try:
            with record("y"):
                pass
        except RuntimeError as e:
            errors.append(str(e))
    with rec:
        dist.barrier()
    try:
        with rec:
            pass
    except RuntimeError as e:
        errors.append(str(e))
    return errors


def test_misuse_is_refused_with_what_to_do(cl):
    errors = cl.run(_misuse)[0]
    assert "after the `with record(...)` block" in errors[0]
    assert "inside `with record(...) as rec:`" in errors[1]
    assert "already running on this rank" in errors[2] and "do not nest" in errors[2]
    assert "already used" in errors[3]
    with pytest.raises(RuntimeError, match="runs on a rank"):
        record().__enter__()


def _record_one():
    import torch.distributed as dist

    with record() as rec:
        dist.all_reduce(torch.ones(2))
    return rec


def test_flight_recorder_off_is_reported():
    with lc.Cluster(2, env={"TORCH_FR_BUFFER_SIZE": "0"}, show_output=False) as off:
        with pytest.raises(lc.RankError, match="FR_ENV"):
            off.run(_record_one)


def test_combine_refuses_mixed_runs(cl):
    rec = cl.run(_record_one)
    with pytest.raises(ValueError, match="appear twice"):
        combine(rec + rec[:1])
    other = Recording("other", 4, "gloo", rec[0].frame, rec[0].scopes, rec[0].steps, (1,), 0, {1: (0, 1)})
    with pytest.raises(ValueError, match="different recordings"):
        combine([rec[0], other])
    with pytest.raises(TypeError, match="combine\\(\\) takes"):
        combine([1, 2])


def test_backend_profiling_names_give_op_and_peer():
    from labcore.readers.recording import from_profiling_name as _op_name

    assert _op_name("nccl:send 0->3") == ("send", 3) and _op_name("nccl:recv 2<-1") == ("recv", 1)
    assert _op_name("nccl:_all_gather_base") == ("all_gather", -1)
    assert _op_name("nccl:_reduce_scatter_base") == ("reduce_scatter", -1)
    assert _op_name("nccl:all_reduce_barrier") == ("barrier", -1)
    assert _op_name("gloo:all_reduce") == ("all_reduce", -1) and _op_name("gloo:send") == ("send", -1)


# Two DDP steps of one rank (16 KiB buckets, dp.DEEP, float32), recorded on 2 cores with 3 busy loops, the
# times in us from the first entry: flight-recorder entries (record_id, created, input length) and gloo's
# runs (worker thread, start, end, input length). Thread 3 began the second bucket 5 us before thread 2
# began the first.
_ENTRIES = [(14, 0.0, 17802), (15, 99.7, 16512), (16, 318.2, 16512), (17, 428.9, 16512), (18, 514.5, 16512),
            (19, 611.1, 16512), (20, 697.5, 16512), (21, 743.9, 8320), (22, 25639.7, 17802), (23, 25785.4, 16512),
            (24, 25870.7, 16512), (25, 25927.6, 16512), (26, 25982.5, 16512), (27, 26038.3, 16512),
            (28, 26091.5, 16512), (29, 26135.0, 8320)]
_RUNS = [(3, 124.6, 17650.1, 16512), (2, 129.9, 17781.0, 17802), (3, 17665.5, 21777.1, 16512),
         (2, 17791.0, 21783.2, 16512), (3, 21784.0, 22042.6, 16512), (2, 21790.2, 22267.4, 16512),
         (3, 22047.4, 22278.5, 16512), (2, 22271.6, 22462.4, 8320), (3, 25653.0, 33690.5, 17802),
         (2, 25810.4, 33686.3, 16512), (2, 33692.6, 37795.2, 16512), (3, 33700.0, 41619.8, 16512),
         (2, 37801.0, 38047.6, 16512), (2, 38052.0, 41530.1, 16512), (2, 41535.7, 53553.1, 16512),
         (3, 41624.4, 53589.6, 8320)]


def _fr_entries(rows, group="0"):
    return [dict(record_id=i, process_group=(group, "pg"), profiling_name="gloo:all_reduce",
                 time_created_ns=round(t * 1e3), input_sizes=[[n]]) for i, t, n in rows]


def _gloo_runs(rows):
    return [("gloo:all_reduce", thread, round(a * 1e3), round(b * 1e3), [[n]], ["float"]) for thread, a, b, n in rows]


def test_gloo_runs_begun_out_of_queue_order_pair_with_their_own_entries():
    """gloo's worker threads take work in queue order but can begin it out of order; each thread's runs
    are its own collectives in queue order (it serves one group), so that is what the pairing must give."""
    from labcore.live.recorder import _match_runs

    paired = _match_runs(_fr_entries(_ENTRIES), _gloo_runs(_RUNS))
    assert len(paired) == len(_ENTRIES)
    by_thread = {}
    for thread, a, _, n in _RUNS:
        rid = next(i for (_, i), v in paired.items() if v[0] == round(a * 1e3))
        assert dict((i, m) for i, _, m in _ENTRIES)[rid] == n
        by_thread.setdefault(thread, []).append(rid)
    assert by_thread == {3: [15, 16, 18, 20, 22, 25, 29], 2: [14, 17, 19, 21, 23, 24, 26, 27, 28]}


def test_gloo_runs_pair_within_their_group_and_never_before_their_entry():
    from labcore.live.recorder import _match_runs

    # two groups queue the same shapes; each has its own two threads, and their runs interleave
    entries = _fr_entries([(0, 0, 4), (1, 1, 8)], "0") + _fr_entries([(2, 2, 4), (3, 3, 8)], "1")
    runs = _gloo_runs([(1, 10, 20, 4), (3, 11, 21, 4), (2, 12, 22, 8), (4, 13, 23, 8),
                       (1, 30, 40, 4)])      # group 0's thread, again: a run no entry of the window made
    paired = _match_runs(entries, runs)
    # entries are named (recorder, record_id): gloo's are in the CPU recorder (labcore.live.fr_dumps)
    assert paired == {("cpu", 0): (10_000, 20_000), ("cpu", 2): (11_000, 21_000), ("cpu", 1): (12_000, 22_000),
                      ("cpu", 3): (13_000, 23_000)}
    # a run that began before every entry (a collective queued before the recording) pairs with none
    early = _gloo_runs([(1, -2000, -1000, 4)]) + runs
    assert _match_runs(entries, early) == paired
    # a run whose shape no entry near the head of its group's queue has is left alone, not forced onto one
    assert _match_runs(_fr_entries([(0, 0, 4), (1, 1, 4), (2, 2, 8)]), _gloo_runs([(1, 10, 20, 8)])) == {}


def test_the_nccl_path_reads_the_profilers_own_trace_on_the_flight_recorders_clock():
    """On NCCL the recorder reads its kernels from the profiler's Kineto JSON (labcore.readers.profiler_trace, as for a
    real job's trace). A CPU has no kernels; what it can check is that the exported scopes land on the
    clock the flight recorder uses (time.time_ns) and on the profiler's own times, and that no file stays."""
    import glob
    import tempfile

    from labcore.live import recorder

    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "labcore-profile-*")))
    recorder._start_profiler()
    t0 = time.time_ns()
    with torch.profiler.record_function("nccl:send 0->1"):
        torch.ones(64).sum()
    t1 = time.time_ns()
    result = recorder._stop_profiler()
    ev = recorder._gpu_events(result)
    (scope,) = ev.scopes
    (own,) = [e for e in recorder._events(result) if e[0] == "nccl:send 0->1"]
    assert scope[3] == "nccl:send 0->1" and t0 <= scope[0] <= scope[1] <= t1
    assert abs(scope[0] - own[2]) <= 1 and abs(scope[1] - own[3]) <= 1          # ns: the export's rounding
    assert ev.kernels == [] and set(glob.glob(os.path.join(tempfile.gettempdir(), "labcore-profile-*"))) == before


def test_flight_recorder_entries_pair_with_the_scopes_that_launched_kernels():
    """The pairing the recorder does on NCCL, on a real trace's scopes and kernels (a100_2ranks): entries
    of one profiling name pair in order when they are as many, else by the scope around their creation."""
    from labcore.live.recorder import _nccl_kernels
    from labcore.readers import profiler_trace as kineto

    ev = kineto.Events.from_trace(kineto.load_trace(kineto.TRACES_DIR / "a100_2ranks_rank0.json.gz"))
    scopes = sorted(ev.scopes)
    entries = [dict(record_id=k, profiling_name=sc[3], time_created_ns=(sc[0] + sc[1]) // 2)
               for k, sc in enumerate(scopes)]
    kernels, compute = _nccl_kernels(entries, ev, 80)
    want = {("cpu", k): min(kern[0] for kern in c["kernels"]) for k, c in enumerate(kineto.match_kernels(ev)[0])}
    assert {k: v["start_ns"] for k, v in kernels.items()} == want
    assert {v["protocol"] for v in kernels.values()} == {"Simple", "LL", "LL or Simple"}
    assert len(compute) == len(ev.compute)
    fewer, _ = _nccl_kernels(entries[1:], ev, 80)                 # counts differ: paired by time
    assert {k: v["start_ns"] for k, v in fewer.items()} == {k: v for k, v in want.items() if k[1]}


@pytest.mark.skipif(not lc.has_gpus(2), reason="needs 2 GPUs: on NCCL the recorder reads start and end from "
                                               "the CUDA kernels the profiler records")
def test_nccl_recording_has_times():
    with lc.Cluster(2, backend="nccl") as gpu:
        def step():
            import torch.distributed as dist

            with record() as rec:
                x = torch.ones(1 << 20, device=lc.device())
                dist.all_reduce(x)
                if dist.get_rank() == 0:
                    dist.send(x, 1)
                else:
                    dist.recv(x, 0)
            return rec
        rows = combine(gpu.run(step)).frame
    reduce = rows[rows["op"] == "all_reduce"]
    assert reduce["bytes"].tolist() == [4 << 20] * 2 and rows["time_us"].notna().all()
    assert reduce["kernel"].str.startswith("nccl").all() and (reduce["algorithm"] != "").all()
    assert (reduce["start_s"] >= reduce["issued_s"]).all() and (reduce["threads"] > 0).all()
    p2p = rows[rows["op"].isin(["send", "recv"])].sort_values("rank")
    assert p2p[["op", "peer"]].values.tolist() == [["send", 1], ["recv", 0]] and (p2p["seq"] == -1).all()
