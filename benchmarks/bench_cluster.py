"""How much a persistent Cluster saves over starting ranks on every call.

Side by side in one run:
  * a warm ``Cluster.run`` of a no-op against ``torch.multiprocessing.spawn`` of the
    same no-op with its process group (what notebook launchers do per call);
  * the median round trip of ``run`` for 2 and 4 ranks;
  * a warm ``run`` of the same no-op on 2 ipyparallel engines (``EngineCluster``, local
    launcher, gloo over loopback) beside a 2-rank ``Cluster``, and their ratio;
  * start-up: the first cluster in a process (pays for importing torch), a second
    cluster, and a restart after a fault;
  * resident memory of a 4-rank CPU cluster (RSS double-counts pages the ranks share
    with the forkserver; PSS splits them fairly, so PSS is the real total).

Run:  .venv/bin/python benchmarks/bench_cluster.py   (--engines-only: just the EngineCluster comparison)
"""
from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from datetime import timedelta

import psutil

SPAWN_ROUNDS = 3
RUN_CALLS = 200


def _noop():
    return None


def _spawned_rank(rank: int, world_size: int, store_dir: str) -> None:
    import torch.distributed as dist

    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    store = dist.FileStore(os.path.join(store_dir, "store"), world_size)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=60))
    _noop()
    dist.barrier()
    dist.destroy_process_group()


def spawn_per_call(world_size: int) -> float:
    import torch.multiprocessing as tmp

    with tempfile.TemporaryDirectory() as store_dir:
        start = time.perf_counter()
        tmp.spawn(_spawned_rank, args=(world_size, store_dir), nprocs=world_size, join=True)
        return time.perf_counter() - start


def median_run(cluster, calls: int) -> float:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        cluster.run(_noop)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def memory_mb(cluster) -> tuple[float, float]:
    """Ranks plus the forkserver they were forked from (it holds the preloaded torch)."""
    procs = [psutil.Process(pid) for pid in cluster.pids]
    procs.append(procs[0].parent())
    rss = pss = 0
    for proc in procs:
        info = proc.memory_full_info()
        rss += info.rss
        pss += info.pss
    return rss / 2**20, pss / 2**20


def engines_vs_cluster(calls: int) -> tuple[float, float, float]:
    """Median warm ``run`` of a no-op: EngineCluster on 2 local engines, Cluster with 2 ranks,
    measured alternately in rounds so that both see the same load; the engines' start-up too."""
    import labcore as lc

    start = time.perf_counter()
    with lc.EngineCluster(2, backend="gloo", show_output=False) as engines, \
            lc.Cluster(2, backend="gloo", show_output=False) as forked:
        engine_start = time.perf_counter() - start
        engines.run(_noop)
        forked.run(_noop)
        on_engines, on_forked = [], []
        for _ in range(calls // 20):
            on_engines.append(median_run(engines, 20))
            on_forked.append(median_run(forked, 20))
    return statistics.median(on_engines), statistics.median(on_forked), engine_start


def print_engines_vs_cluster(calls: int) -> None:
    on_engines, on_forked, engine_start = engines_vs_cluster(calls)
    print(f"warm run() round trip, 2 ranks, median of {calls}: EngineCluster {on_engines * 1e3:.2f} ms, "
          f"Cluster {on_forked * 1e3:.2f} ms; ratio EngineCluster / Cluster: {on_engines / on_forked:.0f}x "
          f"(EngineCluster start-up with 2 engines {engine_start:.1f} s)")


def main() -> None:
    import labcore as lc

    if "--engines-only" in sys.argv[1:]:
        print(f"cores: {os.cpu_count()}, backend: gloo (CPU)")
        print_engines_vs_cluster(RUN_CALLS)
        return

    start = time.perf_counter()
    first = lc.Cluster(4, backend="gloo", show_output=False)
    first_start = time.perf_counter() - start

    start = time.perf_counter()
    second = lc.Cluster(4, backend="gloo", show_output=False)
    second_start = time.perf_counter() - start
    second.close()

    try:
        first.run(lambda: os._exit(1))
    except lc.RankDied:
        pass
    start = time.perf_counter()
    first.run(_noop)  # restarts the group, then runs
    restart = time.perf_counter() - start

    warm4 = median_run(first, RUN_CALLS)
    rss, pss = memory_mb(first)
    first.close()
    with lc.Cluster(2, backend="gloo", show_output=False) as two:
        warm2 = median_run(two, RUN_CALLS)

    spawned = statistics.median(spawn_per_call(4) for _ in range(SPAWN_ROUNDS))

    print(f"cores: {os.cpu_count()}, backend: gloo (CPU)")
    print(f"run() round trip, median of {RUN_CALLS}: 2 ranks {warm2 * 1e3:.2f} ms, 4 ranks {warm4 * 1e3:.2f} ms")
    print(f"torch.multiprocessing.spawn per call, 4 ranks, median of {SPAWN_ROUNDS}: {spawned * 1e3:.0f} ms")
    print(f"ratio spawn / warm run (4 ranks): {spawned / warm4:.0f}x  (goal >= 300x)")
    print(f"start-up, 4 ranks: first cluster {first_start:.2f} s (imports torch once), "
          f"second cluster {second_start:.3f} s, restart after a fault {restart:.3f} s (goal <= 0.5 s)")
    print(f"memory of the 4 ranks + forkserver: RSS sum {rss:.0f} MB, PSS sum {pss:.0f} MB (goal < 1200 MB)")
    print_engines_vs_cluster(RUN_CALLS)


if __name__ == "__main__":
    main()
