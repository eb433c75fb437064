"""One preset registry (labcore.sim.machines.presets): every name works in simulate, replay, the DDP-step predictor
and the sim CLI; each preset finds its own NCCL tuner machine or says in one line why it has none."""
import doctest
import subprocess
import sys

import pandas as pd
import pytest

import labcore.sim as sim
from labcore.readers.recording import Recording
from labcore.sim import presets, scaleout, tuner
from labcore.sim.cli import main as sim_cli
from labcore.sim.apps.ddp_step import predict_ddp_step

NAMES = list(presets.PRESETS)
CLUSTERS = presets.names("cluster")


def _ranks(name):
    return 16 if presets.entry(name).kind == "cluster" else 8


def _recording(world_size=4):
    """Every rank: a blocking 1 MiB all_reduce and an overlapped 256 KiB all_gather in one 1 s step."""
    rows = [dict(rank=r, step=0, op=op, bytes=nbytes, in_bytes=nbytes, out_bytes=nbytes, dtype="float", group="0",
                 group_ranks=tuple(range(world_size)), group_size=world_size, seq=seq, issued_s=t, start_s=t,
                 end_s=t + 0.1, time_us=1e5, overlapped=overlapped, frame="", via="", backend_op=f"gloo:{op}")
            for r in range(world_size)
            for seq, (op, nbytes, t, overlapped) in enumerate([("all_reduce", 1 << 20, 0.2, False),
                                                               ("all_gather", 1 << 18, 0.5, True)])]
    steps = pd.DataFrame([dict(rank=r, step=0, start_s=0.0, end_s=1.0) for r in range(world_size)])
    scopes = pd.DataFrame(columns=["rank", "step", "name", "start_s", "end_s"])
    return Recording("presets", world_size, "gloo", pd.DataFrame(rows), scopes, steps, tuple(range(world_size)))


@pytest.mark.parametrize("name", ["labcore.sim.machines.presets", "labcore.sim.machines.presets.preset", "labcore.sim.apps.scaleout"])
def test_docstring_examples_run(name):
    import importlib

    assert doctest.testmod(importlib.import_module(name), optionflags=doctest.NORMALIZE_WHITESPACE).failed == 0


@pytest.mark.parametrize("name", NAMES)
def test_every_preset_simulates_by_name(name):
    t = sim.simulate("all_reduce", "ring", _ranks(name), 1 << 16, topology=name)
    t.verify()
    assert t.topology.ranks == _ranks(name) and t.time_s > 0
    assert sim.simulate_sizes("all_reduce", "ring", _ranks(name), [1 << 10], topology=name)["time_us"].item() > 0


@pytest.mark.parametrize("name", NAMES)
def test_every_preset_replays_by_name_with_its_tuner_or_says_why_not(name):
    r = sim.replay(_recording(), name)
    assert (r.collectives["status"] == "simulated").all() and r.overlap_s > 0
    p = presets.entry(name)
    if p.tuner:
        assert not any("tuner" in n for n in r.notes)
        assert (r.collectives["nccl"] != "default").all()                 # NCCL's tuner picked every one
    else:
        assert (r.collectives["nccl"] == "default").all()
        assert any(n.startswith(f"NCCL's tuner has no machine for {name}: ") for n in r.notes), r.notes


@pytest.mark.parametrize("name", NAMES)
def test_every_preset_predicts_a_ddp_step_by_name(name):
    step = predict_ddp_step(64 << 20, name, compute_s=0.01)
    assert step.topology == name and step.ranks == presets.topology(name).ranks and step.step_s >= 0.01
    if presets.entry(name).tuner:
        assert predict_ddp_step(64 << 20, name, compute_s=0.01, timing="nccl").comm_s > 0
    else:
        with pytest.raises(presets.NoTuner, match=f"timing='nccl' needs NCCL's tuner, and NCCL's tuner has no "
                                                  f"machine for {name}"):
            predict_ddp_step(64 << 20, name, compute_s=0.01, timing="nccl")


@pytest.mark.parametrize("name", NAMES)
def test_every_preset_runs_in_the_sim_cli(name, capsys):
    n = str(_ranks(name))
    assert sim_cli(["all_reduce", "-n", n, "--size", "1M", "--topology", name, "--no-values"]) == 0
    out = capsys.readouterr().out
    assert f"on {presets.topology(name, int(n)).name}" in out and "busbw" in out
    code = sim_cli(["all_reduce", "--algo", "auto", "-n", n, "--size", "1M", "--topology", name, "--no-values"])
    out, err = capsys.readouterr()
    if presets.entry(name).tuner:
        assert code == 0 and "NCCL's tuner picks" in out
    else:                 # no other machine's tuner stands in: one line saying why
        assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
        assert f"--algo auto needs NCCL's tuner, and NCCL's tuner has no machine for {name}" in err


@pytest.mark.live
def test_the_command_line_takes_a_scale_out_preset():
    done = subprocess.run([sys.executable, "-m", "labcore", "sim", "all_reduce", "-n", "32", "--size", "1G",
                           "--topology", "dgx_h100_ib", "--algo", "auto", "--no-values"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "on 4 x DGX H100, 8 x 400 Gb/s IB" in done.stdout and "NCCL's tuner picks NVLSTree" in done.stdout


def test_defaults_and_shapes():
    shapes = {n: (presets.topology(n).ranks, presets.topology(n).nodes) for n in NAMES}
    for name in NAMES:                  # every preset's default shape is its entry's
        p = presets.entry(name)
        assert shapes[name] == (p.gpus_per_node * p.nodes, p.nodes)
    assert {n: shapes[n] for n in ("nvswitch8", "multinode", "dgx_h100_ib", "tcp_100g", "uniform", "pcie4_gen5")} == {
        "nvswitch8": (8, 1), "multinode": (32, 4), "dgx_h100_ib": (16, 2), "tcp_100g": (16, 2), "uniform": (8, 1),
        "pcie4_gen5": (4, 1)}
    for ranks, want in ((64, (8, 8)), (12, (2, 6)), (7, (1, 7)), (4, (1, 4))):
        assert presets.entry("dgx_h100_ib").shape(ranks) == want
    t = presets.topology("dgx_h100_ib", 8, gpus_per_node=4)           # 2 DGX H100 nodes running 4 GPUs each
    assert (t.ranks, t.nodes, t.nics_per_node) == (8, 2, 4)
    assert presets.topology("tcp_100g", nodes=3).nics_per_node == 1
    assert presets.topology("uniform", 16, nodes=2).nodes == 2 and presets.topology("uniform", 16).nodes == 1
    assert presets.topology("nvswitch8", 4).ranks == 4 and sim.presets.topology("multinode", 16).nodes == 2


@pytest.mark.parametrize("call, message", [
    (lambda: presets.topology("nvswitch8", nodes=2), "nvswitch8 is one machine; for several nodes use dgx_h100_ib"),
    (lambda: presets.topology("pcie8", 16, nodes=2), "pcie8 is one machine"),
    (lambda: presets.topology("switch", 8, nodes=2), "switch is one machine; it is one switch"),
    (lambda: presets.topology("roce_8x400", sharp=True), "roce_8x400 has no SHARP: SHARP needs InfiniBand switches"),
    (lambda: presets.topology("tcp_100g", sharp=True), "tcp_100g has no SHARP"),
    (lambda: presets.topology("nvswitch8", sharp=True), "nvswitch8 has no SHARP: NVLink SHARP \\(NVLS\\) is built in"),
    (lambda: presets.topology("uniform", sharp=True), "its switch reduces already"),
    (lambda: presets.topology("nvswitch8", nics_per_node=8), "nvswitch8 has no NICs to count"),
    (lambda: presets.topology("dgx_h100_ib", 16, nodes=3), "16 GPUs do not split evenly over 3 nodes"),
    (lambda: presets.topology("dgx_h100_ib", 16, nodes=2, gpus_per_node=4), "give two of the three"),
    (lambda: presets.topology("dgx_h100_ib", 0), "ranks must be a whole number"),
    (lambda: presets.topology("dgx_h100_ib", nodes=2.5), "nodes must be a whole number"),
    (lambda: presets.topology("torus"), "unknown topology 'torus'; choose one of nvswitch8"),
    (lambda: presets.entry("uniform").tuner_machine(8), "NCCL's tuner has no machine for uniform: it is a textbook"),
    (lambda: presets.entry("dgx_h100_ib").tuner_machine(16, 2, sharp=True), "no CollNet graphs"),
    (lambda: presets.tuner_for(sim.topologies.nvswitch(8)), "was built by hand"),
])
def test_what_a_preset_cannot_do_is_one_line(call, message):
    with pytest.raises(ValueError, match=message) as caught:
        call()
    assert "\n" not in str(caught.value)


def test_each_preset_is_priced_by_its_own_tuner_machine():
    # the catalog decides which NCCL machine prices a preset, once: the topology carries it (what NCCL's
    # mechanisms read), the tuner prices with it, and the tuner itself knows no preset
    for name in NAMES:
        p = presets.entry(name)
        for shape in ({}, {"nodes": 1}) if p.kind == "cluster" else ({},):
            t = presets.topology(name, **shape)
            assert t.preset == name
            assert t.nccl == p.nccl_machine(t.ranks, t.nodes)
            if t.nccl is None:
                with pytest.raises(presets.NoTuner, match=f"no machine for {name}"):
                    presets.tuner_for(t)
            else:
                assert presets.tuner_for(t) == t.nccl
                assert t.nccl == tuner.MACHINES[p.node_tuner if t.nodes == 1 and p.node_tuner else p.tuner].with_ranks(
                    t.ranks, t.nodes)
        assert (p.tuner is None) == bool(p.no_tuner)
    assert presets.topology("dgx_h100_ib", nodes=1).nccl.nodes == 1     # one node alone: NCCL finds the node's graphs
    assert presets.topology("nvswitch8").nccl == tuner.MACHINES["dgx_h100"]
    assert sim.topologies.nvswitch(8).nccl is None                      # a block built by hand names no machine
    # a replay on a topology object built from a preset uses that preset's tuner; one built by hand says why not
    rec = _recording()
    assert sim.replay(rec, presets.topology("dgx_h100_ib", nodes=2)).collectives["nccl"].iloc[0] != "default"
    by_hand = sim.replay(rec, sim.topologies.nvswitch(8))
    assert (by_hand.collectives["nccl"] == "default").all() and "built by hand" in by_hand.notes[-1]
    sharp = sim.replay(rec, presets.topology("dgx_h100_ib", nodes=2, sharp=True), algorithm={"all_gather": "ring"})
    assert "no CollNet graphs" in sharp.notes[-1]


def test_no_silent_fallback_to_another_machines_tuner(capsys):
    # before the registry, --algo auto on uniform, switch or ring priced the run with nvswitch8's tuner
    assert sim_cli(["all_reduce", "--algo", "auto", "-n", "8", "--size", "1G", "--topology", "switch"]) == 2
    assert "NCCL's tuner has no machine for switch" in capsys.readouterr().err
    with pytest.raises(presets.NoTuner, match="NCCL_ALGO=Ring needs NCCL's tuner"):
        predict_ddp_step(64 << 20, "tcp_100g", compute_s=0.01, nccl_algo="Ring")


def test_the_registry_describes_every_preset():
    table = presets.summary()
    assert list(table.index) == NAMES
    assert table.loc["dgx_h100_ib", "GB/s per NIC"] == pytest.approx(48.0)
    assert table.loc["tcp_100g", "NICs per node"] == 1 and table.loc["nvswitch8", "NVLS"]
    # NVLS wherever the GPUs have it (H100 and later), on one node and across nodes; none on A100 or PCIe
    some = ["nvswitch8", "pcie8", "a100_sxm8", "b200_sxm8", "dgx_a100_ib", "dgx_h100_ib", "aws_p4de", "uniform"]
    assert [n for n in some if table.loc[n, "NVLS"]] == ["nvswitch8", "b200_sxm8", "dgx_h100_ib"]
    assert [n for n in some if table.loc[n, "SHARP"]] == ["dgx_a100_ib", "dgx_h100_ib"]
    assert not table.loc[[n for n in NAMES if n.startswith("pcie")], "NVLS"].any()
    for name in NAMES:
        p = presets.entry(name)
        assert p.sources and p.machine and (p.sharp or p.no_sharp) and (p.tuner or p.no_tuner)
        nvls = ("NVLS",) if table.loc[name, "NVLS"] else ()
        assert p.protocols == (("LL", "LL128", "Simple") + nvls if p.kind != "textbook" and not name.startswith("pcie")
                               else ())
    assert {k: v for k, v in presets.PUBLISHED.items() if k in ("dgx_h100_ib", "dgx_h100_ib_sharp", "ib_8x200",
                                                                 "roce_8x400", "tcp_100g")} == {
        "dgx_h100_ib": 380.0, "dgx_h100_ib_sharp": 480.0, "ib_8x200": 192.0, "roce_8x400": 384.0, "tcp_100g": 10.0}
    assert set(presets.PUBLISHED_AS) == set(presets.PUBLISHED)


def test_scale_out_helpers_live_in_scaleout():
    df = scaleout.scale_sweep("roce_8x400", nodes=[2], sizes=[1 << 20], algorithms=["ring", "in_network"])
    assert df["algorithm"].tolist() == ["ring"] and df["published"].item() == 384.0   # no SHARP on RoCE: skipped
    assert {"presets", "scaleout"} <= set(sim.__all__)
