"""What this machine offers the lab: GPUs, the backend a cluster will use and why, how its devices connect."""
from __future__ import annotations

import functools
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path


def gpu_count() -> int:
    """GPUs this machine offers the ranks, counted through NVML, without CUDA in this process.

    ``torch.cuda.is_available()`` calls ``cudaGetDeviceCount``, which initialises the CUDA
    driver (``cuInit``) in the notebook (torch 2.13, torch/cuda/__init__.py ``is_available``),
    and ``torch.cuda.device_count()`` falls back to the same call whenever NVML fails. A process
    that has initialised CUDA cannot fork a child that uses it, and the notebook never needs a
    CUDA context of its own. So the count comes from torch's NVML path alone
    (``_device_count_nvml``: libnvidia-ml.so.1's ``nvmlDeviceGetCount_v2``, trimmed to
    ``CUDA_VISIBLE_DEVICES``), and a machine without NVML, which ships with the NVIDIA driver,
    or where NVML cannot count (MIG instances), has 0 GPUs for the lab. Once CUDA is initialised
    here anyway (the learner's own code), torch's count costs nothing more.

    >>> gpu_count() >= 0
    True
    """
    import warnings

    import torch

    if not torch.backends.cuda.is_built():
        return 0
    if torch.cuda.is_initialized():
        return torch.cuda.device_count()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns "Can't initialize NVML" where no driver is loaded
        return max(0, torch.cuda._device_count_nvml())


def has_gpus(n: int = 1) -> bool:
    """True when this machine has at least ``n`` GPUs (:func:`gpu_count`) and torch has NCCL.

    It never initialises CUDA in the calling process. Notebooks gate GPU-only cells on it::

        if lc.has_gpus(4):
            ...  # NCCL on 4 GPUs
    """
    import torch.distributed as dist

    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"has_gpus(n) asks for a whole number of GPUs, 1 or more, not {n!r}")
    return dist.is_available() and dist.is_nccl_available() and gpu_count() >= n


# What a rank does first on NCCL (worker.main): if this fails, every rank would die in set_device.
_CUDA_PROBE = "import torch; torch.cuda.set_device(0); torch.ones(1, device='cuda').sum().item()"
CUDA_FIX = ("torch's default Linux wheel (2.13: CUDA 13) needs an NVIDIA driver of the 580 series or newer "
            "(nvidia-smi shows the driver's version): update the driver, install the torch build made for your "
            "driver's CUDA (pytorch.org's selector), or take the CPU wheel (pip install torch --index-url "
            "https://download.pytorch.org/whl/cpu); see the README's 'Which torch for which driver'")


@functools.cache
def cuda_runs() -> tuple[bool, str]:
    """(True, "") when CUDA can run here, else (False, the error's last line); asked once per process.

    NVML counting GPUs does not mean CUDA runs: a driver older than the CUDA torch was built with
    (torch 2.13's default wheel is a CUDA 13 build, which needs a 580+ driver), or a container without
    the device nodes, fails at ``torch.cuda.set_device``. The question goes to a child process so the
    notebook never initialises CUDA itself (a process with CUDA cannot fork ranks that use it).
    """
    try:
        done = subprocess.run([sys.executable, "-c", _CUDA_PROBE], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"the check could not run ({type(exc).__name__})"
    if done.returncode == 0:
        return True, ""
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    return False, lines[-1] if lines else f"the check exited with code {done.returncode}"


def choose_backend(world_size: int, backend: str = "auto") -> str:
    """Resolve ``backend`` for ``world_size`` ranks; raise a clear error when NCCL cannot run.

    With ``"auto"``, NCCL needs one GPU per rank and CUDA that runs (:func:`cuda_runs`); when NVML
    counts the GPUs but CUDA cannot run, the ranks use gloo and one line on stderr names the fix.
    """
    if backend not in {"auto", "gloo", "nccl"}:
        raise ValueError(f"backend must be 'auto', 'gloo' or 'nccl', not {backend!r}")
    if backend == "gloo":
        return backend
    if has_gpus(world_size):
        ok, why = cuda_runs()
        if ok:
            return "nccl"
        if backend == "nccl":
            raise ValueError(f"backend='nccl': NVML counts {gpu_count()} GPU(s), but CUDA cannot run here ({why}). "
                             f"{CUDA_FIX}; or use backend='gloo'.")
        print(f"labcore: CUDA cannot run here ({why}), so the ranks use gloo on the CPU. {CUDA_FIX}.",
              file=sys.stderr, flush=True)
        return "gloo"
    if backend == "auto":
        return "gloo"
    import torch.distributed as dist

    if not dist.is_nccl_available():
        why = "this torch build has no NCCL (a CPU-only wheel?)"
    else:
        why = f"NVML counts {gpu_count()} GPU(s)"
    raise ValueError(
        f"backend='nccl' needs one GPU per rank: {world_size} ranks asked, but {why}. "
        f"Use backend='gloo' (CPU) or backend='auto', or ask for at most {gpu_count()} ranks."
    )


def group_backend(backend: str) -> str:
    """What a rank passes to ``init_process_group`` when the lab has chosen ``backend``.

    NCCL moves CUDA tensors only: torch 2.13 maps a bare ``"nccl"`` to ``{"cuda": nccl}``
    (``BackendConfig`` in torch/distributed/distributed_c10d.py, from
    ``Backend.backend_capability["nccl"] == ["cuda"]``), so a CPU tensor on such a group fails
    with "No backend type associated with device type cpu". The lessons that train on the CPU
    (notebooks 05 and 06, their exercises, the recorder) then fail on any NCCL machine, and a
    fault cell blames the rank whose CPU all_reduce failed first instead of the one that raised.
    ``"cpu:gloo,cuda:nccl"`` gives the group both: gloo for CPU tensors, NCCL for CUDA ones
    (the same BackendConfig parses the ``device:backend`` pairs), so the same cell runs on
    either machine.

    >>> group_backend("nccl")
    'cpu:gloo,cuda:nccl'
    >>> group_backend("gloo")
    'gloo'
    """
    if backend not in {"gloo", "nccl"}:
        raise ValueError(f"the lab's ranks run 'gloo' or 'nccl', not {backend!r}")
    return "cpu:gloo,cuda:nccl" if backend == "nccl" else "gloo"


def explain_backend(world_size: int) -> str:
    """One sentence saying which backend ``Cluster(world_size)`` picks here, and why."""
    backend = choose_backend(world_size)
    ranks = f"{world_size} rank{'' if world_size == 1 else 's'}"
    if backend == "nccl":
        return (f"{ranks} -> nccl: NVML counts {gpu_count()} GPUs, one per rank, "
                "so collectives on CUDA tensors run on the GPUs over NVLink/PCIe (CPU tensors go "
                "through gloo in the same group).")
    import torch.distributed as dist

    if not dist.is_nccl_available():
        why = "this torch build has no NCCL"
    elif has_gpus(world_size):
        why = f"NVML counts {gpu_count()} GPU(s), but CUDA cannot run here ({cuda_runs()[1]})"
    else:
        why = f"NVML counts {gpu_count()} GPU(s), fewer than one per rank"
    return (f"{ranks} -> gloo on the CPU: {why}. Same API and semantics; gloo's own CPU algorithms "
            "over TCP, none of NCCL's kernels or protocols.")


# A rank is a process with torch loaded: past these the machine thrashes instead of teaching.
RANKS_PER_CORE = 8
RANK_MEMORY_BYTES = {"gloo": 150e6, "nccl": 1.5e9}  # gloo: measured PSS plus headroom; nccl adds a CUDA context


LIMIT_ENV = "LABCORE_MAX_RANKS"  # set on purpose, it replaces the limit below


def rank_limit(backend: str = "gloo") -> tuple[int, str]:
    """How many ranks this machine can hold, and a sentence saying why."""
    import psutil

    if os.environ.get(LIMIT_ENV, "").isdigit():
        return int(os.environ[LIMIT_ENV]), f"{LIMIT_ENV} is {os.environ[LIMIT_ENV]}"
    cores = os.cpu_count() or 1
    free = psutil.virtual_memory().available
    per_rank = RANK_MEMORY_BYTES.get(backend, RANK_MEMORY_BYTES["gloo"])
    by_cores, by_memory = RANKS_PER_CORE * cores, int(free // per_rank)
    why = (f"{cores} CPU core(s) allow {by_cores} ranks ({RANKS_PER_CORE} per core) and "
           f"{free / 1e9:.1f} GB of free memory allows {by_memory} (about {per_rank / 1e6:.0f} MB per "
           f"{backend} rank)")
    return max(1, min(by_cores, by_memory)), why


def check_world_size(world_size: int, backend: str = "gloo", oversubscribe: bool = False,
                     override: str = "oversubscribe=True") -> None:
    """Refuse, before any process starts, more ranks than this machine can hold.

    ``override`` names the way to start them anyway in the caller's terms
    (a keyword argument, a CLI flag).
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int (the number of ranks), not {world_size!r}")
    limit, why = rank_limit(backend)
    if world_size > limit and not oversubscribe:
        raise ValueError(f"{world_size} ranks is more than this machine can hold: {why}. "
                         f"Use at most {limit} ranks, or pass {override} to start them anyway.")


def gpu_names() -> list[str]:
    """GPU model names from nvidia-smi (empty without it): asking torch would create a CUDA context."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def machine_summary() -> dict:
    """A short description of this machine for the welcome notebook."""
    import torch
    import torch.distributed as dist

    n = gpu_count()
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu_cores": os.cpu_count(),
        "gpus": n,
        "gpu_names": gpu_names(),
        "nccl_available": dist.is_nccl_available(),
        "gloo_available": dist.is_gloo_available(),
        "backend_for_4_ranks": choose_backend(4),
    }


def _rdma_devices(root: str = "/sys/class/infiniband") -> list[str]:
    """RDMA ports (InfiniBand, or RoCE when the link layer is Ethernet) with their rate, from sysfs."""
    ports = []
    for dev in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        for port in sorted(os.listdir(os.path.join(root, dev, "ports"))):
            facts = []
            for name in ("rate", "link_layer", "state"):
                try:
                    with open(os.path.join(root, dev, "ports", port, name)) as f:
                        facts.append(f.read().strip())
                except OSError:
                    facts.append("?")
            rate, layer, state = facts
            kind = "RoCE" if layer == "Ethernet" else layer
            ports.append(f"{dev}:{port} {rate} {kind} {state.split(':')[-1].strip()}")
    return ports


def host_network() -> str:
    """One line on this host's network: its name, each interface that is up with its IPv4 address and
    speed, the RDMA ports (InfiniBand/RoCE) and the socket interfaces NCCL and gloo were told to use.

    Example
    -------
    >>> "lo 127.0.0.1" in host_network()
    True
    """
    import socket

    import psutil

    stats, parts = psutil.net_if_stats(), []
    for name, addrs in sorted(psutil.net_if_addrs().items()):
        ipv4 = [a.address for a in addrs if a.family == socket.AF_INET]
        st = stats.get(name)
        if ipv4 and st is not None and st.isup:
            speed = f" {st.speed / 1000:g} Gb/s" if st.speed else ""
            parts.append(f"{name} {ipv4[0]}{speed}")
    rdma = _rdma_devices()
    chosen = [f"{v}={os.environ[v]}" for v in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_HCA")
              if os.environ.get(v)]
    return (f"{socket.gethostname()}: " + ", ".join(parts) + (f"; rdma {', '.join(rdma)}" if rdma else "; no rdma")
            + (f"; {' '.join(chosen)}" if chosen else ""))


def network_summary() -> list[str]:
    """``# `` lines for a benchmark preamble: :func:`host_network` of every node taking part.

    Under an initialised torch.distributed group every rank must call it (it gathers one
    line per rank and keeps one per host); elsewhere it describes this host only.

    Example
    -------
    >>> network_summary()[0]
    '# Network'
    """
    line = host_network()
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        lines = [None] * dist.get_world_size()
        dist.all_gather_object(lines, line)
    else:
        lines = [line]
    return ["# Network"] + [f"#  {entry}" for entry in dict.fromkeys(lines)]


def cpu_summary() -> dict:
    """What ranks on this machine share when there is no GPU: cores, NUMA nodes, memory."""
    import psutil

    model = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        found = re.search(r"^model name\s*:\s*(.+)$", cpuinfo.read_text(), flags=re.M)
        model = found.group(1).strip() if found else model
    nodes = sorted(Path("/sys/devices/system/node").glob("node[0-9]*"))
    mem = psutil.virtual_memory()
    return {
        "cpu": model,
        "logical_cores": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "numa_nodes": max(1, len(nodes)),
        "memory_total_gib": round(mem.total / 2**30, 1),
        "memory_available_gib": round(mem.available / 2**30, 1),
        "transport": "gloo over loopback TCP: every byte crosses the kernel's network stack "
                     "and competes with the ranks for the same cores",
    }


def machine_topology(timeout: float = 10.0):
    """The GPU :class:`~labcore.readers.smi_topo.TopoMatrix` from ``nvidia-smi topo -m`` when it works, else :func:`cpu_summary`."""
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True,
                                 timeout=timeout, check=True).stdout
            from labcore.readers.smi_topo import parse_topo

            return parse_topo(out)
        except (subprocess.SubprocessError, OSError, ValueError):
            pass
    return cpu_summary()
