"""How fast the scale-out presets simulate: timing-only all-reduce on 512 and 1,024 GPUs.

Goals (2-core machine): a 64-node (512-GPU) flat ring all-reduce on the DGX H100 multi-node
preset in under 2 s, and a 128-node (1,024-GPU) hierarchical one in under 2 s, timing only.
"First" includes building the topology and its routes; "again" reuses the topology.
It also prints the busbw of every algorithm at 2, 8 and 64 nodes beside the published figures.

Run:  python benchmarks/bench_scale.py
"""
from __future__ import annotations

import time

import labcore.sim as sim
from labcore.sim import presets_scale as ps


def timed(algorithm: str, nodes: int) -> tuple[float, float, float]:
    """(first run incl. the topology, best of two more on it, busbw) for a 1 GiB all-reduce."""
    t0 = time.perf_counter()
    topo = ps.preset("dgx_h100_ib", nodes)
    trace = sim.simulate("all_reduce", algorithm, topo.ranks, 1 << 30, topology=topo, values=False)
    first = time.perf_counter() - t0
    again = []
    for _ in range(2):
        t0 = time.perf_counter()
        sim.simulate("all_reduce", algorithm, topo.ranks, 1 << 30, topology=topo, values=False)
        again.append(time.perf_counter() - t0)
    return first, min(again), trace.busbw


def main() -> None:
    sim.simulate("all_reduce", "ring", 8, 1 << 20).verify()            # warm numpy up
    print("timing only, all_reduce 1 GiB, DGX H100 8 x 400 Gb/s IB preset")
    print(f"{'algorithm':>13} {'GPUs':>5} {'first s':>8} {'again s':>8} {'busbw GB/s':>11}  goal")
    goals = []
    for algo, nodes in (("ring", 64), ("hierarchical", 128)):
        first, again, busbw = timed(algo, nodes)
        met = "met" if first < 2 else "NOT met"
        goals.append(f"{algo} on {nodes * 8} GPUs: {first:.2f} s first, {again:.2f} s again (goal < 2 s): {met}")
        print(f"{algo:>13} {nodes * 8:>5} {first:>8.2f} {again:>8.2f} {busbw:>11.1f}  < 2 s {met}")
    print("\nbusbw (GB/s) at 1 GiB against the published figures (GTC24 S62129: 380 rings, 480 SHARP)")
    df = ps.scale_sweep("dgx_h100_ib", nodes=(2, 8, 64))
    table = df.pivot(index="algorithm", columns="nodes", values="busbw").loc[list(ps.ALGORITHMS)]
    print(table.round(1).to_string())
    print("\n" + "\n".join(goals))


if __name__ == "__main__":
    main()
