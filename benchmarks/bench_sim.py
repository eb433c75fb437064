"""How fast the simulator is: timing-only runs up to 1024 ranks, value-carrying runs up to 64.

Goals (2-core machine):

* a 1024-rank ring all-reduce on the uniform machine, timing only, in under 2 s;
* a 64-rank ring all-reduce carrying and verifying real values in under 2 s;
* on the multi-node preset (DGX H100-like nodes, one ring per NIC, NCCL's protocols tried and
  the fastest kept), a 64-node (512-GPU) ring all-reduce and a 1,024-GPU hierarchical one,
  timing only, each in under 2 s.

What the cost grows with: timing is vectorised over all transfers (a ring
all-reduce has 2p(p-1) of them per channel, so ~p^2); moving values loops over steps
(2(p-1)) and per step touches transfers x ranks bits (~p^2 per step, ~p^3 in all).
Each protocol tried re-times the same plan (routes and link loads are shared).

Run:  python benchmarks/bench_sim.py
"""
from __future__ import annotations

import time

import labcore.sim as sim


def best_of(fn, repeat: int = 3) -> float:
    """Smallest wall time of ``repeat`` calls, seconds."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    sim.simulate("all_reduce", "ring", 8, 1 << 20).verify()            # warm numpy up
    print("timing only (values=False), ring all-reduce, 1 GiB, uniform topology")
    print(f"{'ranks':>6} {'transfers':>10} {'seconds':>9}")
    for p in (128, 256, 512, 1024):
        t = best_of(lambda p=p: sim.simulate("all_reduce", "ring", p, 1 << 30, values=False))
        print(f"{p:>6} {2 * p * (p - 1):>10} {t:>9.3f}")
    t1024 = t
    print("\nvalues on (move real numbers, record every step, verify), ring all-reduce")
    print(f"{'ranks':>6} {'steps':>6} {'seconds':>9}")

    def with_values(p):
        sim.simulate("all_reduce", "ring", p, 1 << 20).verify()

    for p in (16, 32, 64, 128):
        t = best_of(lambda p=p: with_values(p))
        print(f"{p:>6} {2 * (p - 1):>6} {t:>9.3f}")
        if p == 64:
            t64 = t
    print("\nother algorithms, 64 ranks, values on and verified")
    for algo in ("double_tree", "rabenseifner", "recursive_doubling", "nvls"):
        t = best_of(lambda algo=algo: sim.simulate("all_reduce", algo, 64, 1 << 20).verify())
        print(f"{algo:>20} {t:>9.3f} s")

    print("\nmulti-node preset (8 GPUs and 8 NICs per node), timing only, 1 GiB, fastest protocol")
    print(f"{'algorithm':>14} {'GPUs':>6} {'channels':>9} {'transfers':>10} {'busbw GB/s':>11} {'seconds':>9}")
    multi = {}
    for algo, p in (("ring", 64), ("ring", 512), ("hierarchical", 128), ("hierarchical", 1024)):
        topo = sim.topologies.preset("multinode", p)
        trace = sim.simulate("all_reduce", algo, p, 1 << 30, topology=topo, values=False)
        t = best_of(lambda algo=algo, p=p: sim.simulate("all_reduce", algo, p, 1 << 30,
                                                         topology=sim.topologies.preset("multinode", p), values=False))
        multi[algo, p] = t
        print(f"{algo:>14} {p:>6} {trace.schedule.n_channels:>9} {trace.schedule.n_transfers:>10} "
              f"{trace.busbw:>11.1f} {t:>9.3f}")

    print(f"\n1024-rank ring, timing only: {t1024:.3f} s (goal < 2 s): {'met' if t1024 < 2 else 'NOT met'}")
    print(f"64-rank ring, values + verify: {t64:.3f} s (goal < 2 s): {'met' if t64 < 2 else 'NOT met'}")
    for (algo, p), goal in ((("ring", 512), 2.0), (("hierarchical", 1024), 2.0)):
        t = multi[algo, p]
        print(f"multinode {algo} on {p} GPUs, timing only: {t:.3f} s (goal < {goal:g} s): "
              f"{'met' if t < goal else 'NOT met'}")


if __name__ == "__main__":
    main()
