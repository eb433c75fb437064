"""Real GPU jobs as recordings: PyTorch profiler traces of NCCL runs, read into a :class:`Recording`.

``read_trace("rank*.json.gz")`` reads the Kineto JSON that ``torch.profiler`` writes
(``export_chrome_trace``, ``tensorboard_trace_handler``; one file per rank, ``.json`` or
``.json.gz``) into the :class:`labcore.readers.recording.Recording` the live recorder returns, so
``lc.sim.replay``, ``lc.viz.step_timeline``, :meth:`Recording.bandwidth` and
:meth:`Recording.exposed` work on a real job. The live recorder reads NCCL's kernels with the
same code (:func:`match_kernels`).

How a trace is read
-------------------
* **A collective** is one ``nccl:<op>`` CPU scope (ProcessGroupNCCL's record function) and the
  NCCL kernels launched inside it: a kernel's ``correlation`` id names its CUDA launch call
  (``cudaLaunchKernel``, ``cudaLaunchKernelExC``, ...), and that call lies in the scope, on the
  same CPU thread. Where a release wrote no ``nccl:`` scope, torch's ``record_param_comms`` op
  stands in. Its GPU start and end are those of its kernels; on a trace's GPU timeline a
  collective is issued when its kernel starts (the CPU launched it earlier: it runs ahead).
* **Sizes, dtype and group** come from ``record_param_comms``'s arguments where torch wrote them
  (``In msg nelems``, ``dtype``, ``Process Group Name``/``Ranks``; torch 2.3 and later), else from
  the scope's ``Input Dims`` (``record_shapes=True``). A trace without group names gives each
  communicator the name of its CUDA stream (ProcessGroupNCCL runs each process group on a stream
  of its own) and the world size; ``Recording.notes`` says so.
* **Algorithm and protocol** (:func:`kernel_choice`): what NCCL's kernel names and launch sizes
  do and do not say, from NCCL's sources.
* **Compute** is every other GPU kernel (not memcpy or memset), as HolisticTraceAnalysis counts
  it; a collective is ``overlapped`` when a compute kernel ran on the GPU beside its kernels.
* **Steps** are the ``ProfilerStep#N`` annotations: step k spans the GPU work launched during the
  k-th one (``steps["label"]`` keeps N). Without them the whole trace is step 0.

What is left out is counted in ``Recording.notes`` (kernels launched before the trace began,
collectives whose kernels ran after it ended, collectives without a size), never dropped silently.

Inputs are untrusted: a file over 64 MiB (decompressed) is refused unread or as soon as its
decompression passes the limit, malformed JSON or a wrong shape is one line naming the file,
and the work is linear in the events (sorted once, then binary searches). A file is read one event
at a time (:mod:`labcore.readers.json_stream`), keeping only the events and arguments this reader
uses: reading one holds at most 3.5 times its JSON text (1 MiB for a file under 300 KiB) and never
over 448 MiB; a file that would need more (a trace of millions of tiny events, one event of many
megabytes) is refused before the memory is spent.

Why not HolisticTraceAnalysis's parser
--------------------------------------
HTA (``HolisticTraceAnalysis`` 0.5.0 on PyPI) parses the same traces, and the tests use it as the
independent check of this module (its kernel counts and its communication/computation overlap).
The lab does not parse with it because ``hta.common.trace_parser.parse_trace_dict`` decompresses
a whole ``.gz`` in one ``read()`` with no size limit, its default columns drop the kernels' launch
sizes and the comms arguments this reader needs, and it installs jupyterlab, networkx, pydot and
pytest as runtime requirements of the lab package.

Example
-------
>>> from labcore.readers import TRACES_DIR, read_trace
>>> rec = read_trace(TRACES_DIR / "a100_2ranks_rank0.json.gz")
>>> rec.collectives().query("bytes == 424")[["op", "kernel", "algorithm", "protocol"]].iloc[0].tolist()
['broadcast', 'ncclKernel_Broadcast_RING_LL_Sum_int8_t', 'Ring', 'LL or Simple']
"""
from __future__ import annotations

import bisect
import glob
import gzip
import math
import os
import re
import stat
import zlib
from pathlib import Path

import numpy as np

from labcore import collectives as _collectives
from labcore.readers import intervals, json_stream
from labcore.readers.recording import ITEMSIZE, ROW, Recording, combine, from_profiling_name, nccl_tests_bytes

__all__ = ["read_trace", "kernel_choice", "match_kernels", "collective_row", "load_trace", "Events", "TRACES_DIR",
           "MAX_TRACE_BYTES"]

MAX_TRACE_BYTES = 64 << 20
"""The largest trace read, decompressed (64 MiB)."""
TRACES_DIR = Path(__file__).resolve().parents[2] / "tests" / "data" / "traces"
"""Real traces of public multi-GPU jobs shipped with the lab (their sources: README.md there)."""
_MAX_FILES = 4096
_CHUNK = 1 << 20
_MEMORY = 448 << 20          # what reading one trace may hold besides its text, at most
_PER_BYTE = 2.5              # ... and per byte of its text (the text itself makes 3.5)
_FLOOR = 1 << 20             # ... whatever a small file's size
_TOP = ("baseTimeNanoseconds", "distributedInfo", "deviceProperties")
_KEPT_FIELDS = ("ph", "cat", "name", "ts", "dur", "tid", "args")
_KEPT_ARGS = frozenset({"correlation", "device", "stream", "grid", "block", "Input Dims", "Input type", "Process Group Name",
                        "Process Group Ranks", "Group size", "In msg nelems", "Out msg nelems", "dtype",
                        "Collective name", "Process Group ID"})

# --- what NCCL's kernel names and launch sizes say -------------------------------------------
# Kernel names, NVIDIA/nccl: before 2.19, ncclKernel_<Func>_<ALGO>_<PROTO>_<RedOp>_<type>
# (src/collectives/device/common.h IMPL_COLL_KERN); from 2.19, ncclDevKernel_<Func>[_<RedOp>_<ty>]
# [_<ALGO>_<PROTO>] (src/device/generate.py).
_OLD = re.compile(r"ncclKernel_(?P<func>[A-Za-z]+)_(?P<algo>TREE|RING|COLLNET_DIRECT|COLLNET_CHAIN|COLLNET|"
                  r"NVLS_TREE|NVLS)_(?P<proto>LL128|LL|SIMPLE)_(?P<redop>[A-Za-z]+)_(?P<type>[A-Za-z0-9_]+)")
_NEW = re.compile(r"ncclDevKernel_(?P<func>[A-Za-z]+)(?:_(?P<redop>Sum|Prod|MinMax|PreMulSum|SumPostDiv)_"
                  r"(?P<type>[a-z0-9]+))?(?:_(?P<algo>TREE|RING|COLLNET_DIRECT|COLLNET_CHAIN|NVLS_TREE|NVLS|PAT)_"
                  r"(?P<proto>LL128|LL|SIMPLE))?$")
_ALGO = {"TREE": "Tree", "RING": "Ring", "COLLNET": "CollNetDirect", "COLLNET_DIRECT": "CollNetDirect",
         "COLLNET_CHAIN": "CollNetChain", "NVLS": "NVLS", "NVLS_TREE": "NVLSTree", "PAT": "PAT"}
_PROTOCOLS = ("LL", "LL128", "Simple")
# NCCL's function of each collective the lab names (point-to-point and all_to_all run SendRecv)
_FUNC = _collectives.NCCL_NAMES
# The algorithms NCCL has for each function (generate.py algos_of_coll), CollNet left out: it runs only
# with NCCL_COLLNET_ENABLE=1 and a SHARP network, and then its kernels are named for it before 2.19.
_ALGOS_OF = {"AllReduce": ("Tree", "Ring", "NVLS", "NVLSTree"), "AllGather": ("Ring", "NVLS", "PAT"),
             "ReduceScatter": ("Ring", "NVLS", "PAT"), "Broadcast": ("Ring",), "Reduce": ("Ring",)}
# Threads a block of each (algorithm, protocol), NCCL's defaults (NCCL_NTHREADS unset): maxThreads
# (tuning.cc: LL 512, LL128 640, Simple 512, 256 on rings of PCIe speed, NVLS/CollNet/PAT 640), halved
# while a message is small and the count a multiple of 128, plus one sync warp for Simple rings
# (enqueue.cc computeColl/topoGetAlgoInfo, every release 2.7-2.30); Simple trees add 1 warp (2.7),
# 2 (2.8-2.9) or 4 (2.10-2.21); trees use 640 always from 2.22; at least 3 warps a block, 4 from 2.23
# (NCCL_MIN_NTHREADS). By kernel generation: 2.7-2.11 (ncclKernel_..(ncclWorkElem) or (ncclColl)),
# 2.12-2.18 (ncclKernel_..(ncclDevComm*, ...)), 2.19+ (ncclDevKernel_).
_RING_LL, _LL128, _RING_SIMPLE = {512, 256, 128, 96}, {640, 320}, {544, 288, 160, 96}
_TREE_SIMPLE = {640, 384, 256, 192}
_THREADS = {
    "2.7-2.11": {("Ring", "LL"): _RING_LL, ("Ring", "LL128"): _LL128, ("Ring", "Simple"): _RING_SIMPLE,
                 ("Tree", "LL"): _RING_LL, ("Tree", "LL128"): _LL128,
                 ("Tree", "Simple"): _RING_SIMPLE | {576, 320, 192, 128} | _TREE_SIMPLE},
    "2.12-2.18": {("Ring", "LL"): _RING_LL, ("Ring", "LL128"): _LL128, ("Ring", "Simple"): _RING_SIMPLE,
                  ("Tree", "LL"): _RING_LL, ("Tree", "LL128"): _LL128, ("Tree", "Simple"): _TREE_SIMPLE},
    "2.19+": {("Ring", "LL"): _RING_LL | {128}, ("Ring", "LL128"): _LL128, ("Ring", "Simple"): _RING_SIMPLE | {128},
              ("Tree", "LL"): _RING_LL | {640}, ("Tree", "LL128"): _LL128, ("Tree", "Simple"): _TREE_SIMPLE},
}
_SIMPLE_ONLY = {"NVLS": {640}, "NVLSTree": {640}, "PAT": {640}, "CollNetDirect": {640},
                "CollNetChain": _TREE_SIMPLE | {320}}


def _generation(kernel: str) -> str:
    if kernel.startswith("ncclDevKernel_"):
        return "2.19+"
    return "2.12-2.18" if "ncclDevComm" in kernel else "2.7-2.11"


def _options(algorithms, generation: str) -> dict:
    """{(algorithm, protocol): the threads a block NCCL launches it with} for these algorithms."""
    out = {}
    for a in algorithms:
        if a in _SIMPLE_ONLY:           # NVLS, PAT, CollNet: Simple only (generate.py required_cuda)
            out[a, "Simple"] = _SIMPLE_ONLY[a]
            continue
        for p in _PROTOCOLS:
            out[a, p] = _THREADS[generation][a, p]
    return out


def _named(kernel: str, func: str, generation: str) -> tuple[tuple[str, ...], str]:
    """The algorithms a kernel's name allows for a collective of NCCL function ``func``, and why."""
    short = kernel.split("(", 1)[0]
    m = _OLD.match(short) if generation != "2.19+" else _NEW.match(short)
    every = _ALGOS_OF[func]
    if m is None or m["func"] != func:
        # NCCL launches its generic kernel (ncclKernelGeneric, the SendRecv one, before 2.19; Generic
        # after) for functions it built no kernel of their own: the name says nothing of the algorithm
        return every, "generic kernel"
    if m["algo"] is None:
        return every, "no algorithm in the name"
    algo = _ALGO[m["algo"]]
    if generation == "2.19+" and algo == "Ring":
        # generate.py best_kernel: every algorithm but Tree runs in the <func>..._RING_LL kernel
        return tuple(a for a in every if a != "Tree"), "ring kernel"
    return (algo,), "named"


def kernel_choice(kernel: str, op: str, threads: int | None = None, sm: int | None = None) -> tuple[str, str]:
    """NCCL's algorithm and protocol for one collective, from its kernel's name and threads a block.

    Returns ``(algorithm, protocol)`` with NCCL's names ("Ring", "Tree", "NVLS", ...; "LL",
    "LL128", "Simple"); "A or B" where the evidence allows more than one, "" where it says
    nothing (point-to-point, all_to_all, unknown kernels).

    What the names say (NVIDIA/nccl's sources): before 2.19 a kernel is named for its algorithm,
    but every protocol runs in the LL one (enqueue.cc ``NCCL_FUNC5``: "Only generate inline
    kernels for LL"), and builds without a function's kernel launch the generic SendRecv one;
    from 2.19 (src/device/generate.py ``best_kernel``) every function runs in a
    ``<Func>_..._RING_LL`` kernel but Tree's, which has its own. So the name gives the algorithm
    before 2.19, and Tree-or-not since; the block size (``threads``, the trace's ``block``)
    gives the protocol, and often the rest: NCCL sizes a block per algorithm and protocol
    (see the table above :func:`_options`). ``sm``, the GPU's compute capability as NCCL writes it
    (80 for 8.0), rules out NVLS and NVLSTree below Hopper (90; generate.py ``required_cuda``). It
    assumes NCCL_NTHREADS and NCCL_LL128_NTHREADS unset and one collective per launch.

    Example
    -------
    >>> kernel_choice("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "all_reduce", 544)
    ('Ring', 'Simple')
    >>> kernel_choice("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    ...               "all_reduce", 640)
    ('Ring or NVLS or NVLSTree', 'LL128 or Simple')
    """
    func = _FUNC.get(op)
    if func is None or not kernel.startswith(("ncclKernel_", "ncclDevKernel_")):
        return "", ""
    generation = _generation(kernel)
    algos, _ = _named(kernel, func, generation)
    if sm is not None and sm < 90:
        algos = tuple(a for a in algos if a not in ("NVLS", "NVLSTree")) or algos
    options = _options(algos, generation)
    if threads is not None:
        fits = {k: v for k, v in options.items() if int(threads) in v}
        if not fits:          # a launch size NCCL's defaults do not make (NCCL_NTHREADS set?)
            return " or ".join(algos), ""
        options = fits
    found_a = [a for a in algos if any(k[0] == a for k in options)]
    found_p = [p for p in _PROTOCOLS if any(k[1] == p for k in options)]
    return " or ".join(found_a), " or ".join(found_p)


def is_nccl_kernel(name: str) -> bool:
    """NCCL's kernels, as HolisticTraceAnalysis tells them (``^nccl.*Kernel``)."""
    return name.startswith("nccl") and "Kernel" in name


# --- reading one file, bounded --------------------------------------------------------------
def _fail(path, what: str) -> ValueError:
    return ValueError(f"{path}: {what}")


def _read_bytes(path: Path, limit: int = MAX_TRACE_BYTES) -> bytearray:
    try:
        st = os.stat(path)
    except OSError as err:
        raise _fail(path, f"cannot be read ({err.strerror or err})")
    if not stat.S_ISREG(st.st_mode):
        raise _fail(path, "is not a regular file; pass the profiler's .json or .json.gz trace")
    if st.st_size > limit:
        raise _fail(path, f"is {st.st_size:,} bytes, over the {limit >> 20} MiB a trace may have; "
                          "profile fewer steps (torch.profiler.schedule(active=1..2))")
    with open(path, "rb") as f:
        head = f.read(2)
        f.seek(0)
        if head != b"\x1f\x8b":
            out = bytearray(min(st.st_size, limit) + 1)        # a buffer the file's size, not the limit's
            del out[f.readinto(out):]
            return out
        out = bytearray()                  # grown in place: never the chunks and their join at once
        try:
            with gzip.GzipFile(fileobj=f) as z:
                while chunk := z.read(_CHUNK):
                    if len(out) + len(chunk) > limit:
                        raise _fail(path, f"decompresses to over {limit >> 20} MiB; profile fewer steps "
                                          "(torch.profiler.schedule(active=1..2))")
                    out += chunk
        except (OSError, EOFError, zlib.error) as err:
            raise _fail(path, f"is not a readable gzip file ({err})")
    return out


def load_trace(path: Path, limit: int = MAX_TRACE_BYTES) -> dict:
    """One trace file's top-level facts and the events this reader uses (their arguments cut to those it
    reads), within ``limit`` bytes of JSON and the memory bound of the module docstring, or a one-line
    ValueError naming the file."""
    name = str(path)
    if not (name.endswith(".json") or name.endswith(".json.gz")):
        raise _fail(path, "is not a .json or .json.gz file (the profiler's trace)")
    data = _read_bytes(path, limit)
    budget = max(min(int(_PER_BYTE * len(data)), _MEMORY - len(data)), _FLOOR)
    try:
        top, events = json_stream.read_records(data, "traceEvents", _keeper(name), fields=_TOP, budget=budget)
    except ValueError as err:
        text = str(err)
        raise (err if text.startswith(name) else _fail(path, text.replace("has no traceEvents list", "is not a PyTorch "
                                                                         "profiler trace (no traceEvents list)")))
    return {**top, "traceEvents": events}


def _keeper(where: str):
    """``keep(index, event)`` for :func:`json_stream.read_records`: an event this reader uses, validated,
    its arguments cut to those read (:data:`_KEPT_ARGS`); None for the rest."""
    def keep(k: int, e) -> dict | None:
        if not isinstance(e, dict):
            raise ValueError(f"{where}: event {k} is not a JSON object")
        if e.get("ph") != "X" or _kind(e) is None:
            return None
        args = e.get("args", {})
        if not isinstance(args, dict):
            raise ValueError(f"{where}: event {k} ({e['name']!r}) has args that are not a JSON object")
        _number(e, "ts", where, k)
        if "dur" in e:
            _number(e, "dur", where, k)
        kept = {f: e[f] for f in _KEPT_FIELDS if f in e}
        kept["args"] = {a: args[a] for a in _KEPT_ARGS if a in args}       # the reader's own names: shared
        return kept
    return keep


# --- the events this reader uses, validated ---------------------------------------------------
def _number(e: dict, key: str, where: str, k: int) -> float:
    v = e.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"{where}: event {k} ({e.get('name', '?')!r}) has a {key} that is not a finite number")
    return v


def _ns(us) -> int:
    """Microseconds (an int, or a float with ns digits) to integer nanoseconds, exactly for ints."""
    if isinstance(us, int):
        return us * 1000
    whole = math.floor(us)
    return int(whole) * 1000 + int(round((us - whole) * 1000))


# Kineto's event categories (lower-cased; releases before torch 1.10 capitalised them) -> the kinds read
_CATEGORY = {"kernel": "kernel", "cuda_runtime": "runtime", "cuda_driver": "runtime", "runtime": "runtime",
             "cpu_op": "cpu", "operator": "cpu", "user_annotation": "cpu"}


def _kind(e: dict) -> str | None:
    """The kind of event this reader uses ("kernel", "runtime", "cpu": a scope or a step), or None."""
    name, cat = e.get("name"), e.get("cat")
    if not isinstance(name, str) or not isinstance(cat, str):
        return None
    cat = _CATEGORY.get(cat.lower())
    scope = name.startswith("nccl:") or name == "record_param_comms" or name.startswith("ProfilerStep#")
    return None if cat is None or (cat == "cpu" and not scope) else cat


class Events:
    """What one trace (or one live profile) holds that a recording needs, times in ns.

    Attributes: ``scopes`` (``nccl:<op>`` CPU scopes), ``params`` (``record_param_comms`` ops),
    ``steps`` (``ProfilerStep#N``), each a list of (start, end, tid, name, args);
    ``launches`` {correlation: (tid, ts)}; ``kernels`` (NCCL's) and ``compute`` (every other
    kernel), lists of (start, end, correlation, name, args).
    """

    def __init__(self):
        self.scopes, self.params, self.steps, self.kernels, self.compute = [], [], [], [], []
        self.launches: dict = {}

    @classmethod
    def from_trace(cls, trace: dict, where: str = "trace") -> "Events":
        base = trace.get("baseTimeNanoseconds", 0)
        if isinstance(base, bool) or not isinstance(base, int) or base < 0:
            raise ValueError(f"{where}: baseTimeNanoseconds is not a whole number of nanoseconds")
        ev = cls()
        for k, e in enumerate(trace["traceEvents"]):
            if not isinstance(e, dict):
                raise ValueError(f"{where}: event {k} is not a JSON object")
            if e.get("ph") == "X":
                ev._add(e, base, where, k)
        return ev

    def _add(self, e: dict, base: int, where: str, k: int) -> None:
        cat = _kind(e)
        if cat is None:
            return
        name = e["name"]
        args = e.get("args", {})
        if not isinstance(args, dict):
            raise ValueError(f"{where}: event {k} ({name!r}) has args that are not a JSON object")
        start = base + _ns(_number(e, "ts", where, k))
        end = start + _ns(_number(e, "dur", where, k)) if "dur" in e else start
        tid = e.get("tid")
        if cat == "kernel":
            (self.kernels if is_nccl_kernel(name) else self.compute).append(
                (start, end, args.get("correlation"), name, args))
        elif cat == "runtime":
            if "Launch" in name and "correlation" in args:
                self.launches[args["correlation"]] = (tid, start)
        elif name.startswith("nccl:"):
            self.scopes.append((start, end, tid, name, args))
        elif name == "record_param_comms":
            self.params.append((start, end, tid, name, args))
        else:
            self.steps.append((start, end, tid, name, args))


class _Enclosing:
    """Find the interval of a list that holds a (thread, time): per-thread sorted starts, one binary search."""

    def __init__(self, items: list, by_thread: bool = True):
        self.by: dict = {}
        for i, it in enumerate(items):
            self.by.setdefault(it[2] if by_thread else None, []).append((it[0], i))
        for v in self.by.values():
            v.sort()
        self.starts = {t: [s for s, _ in v] for t, v in self.by.items()}
        self.items, self.by_thread = items, by_thread

    def find(self, tid, t: int, look_back: int = 8) -> int | None:
        key = tid if self.by_thread else None
        starts = self.starts.get(key)
        if not starts:
            return None
        j = bisect.bisect_right(starts, t) - 1
        for i in range(j, max(j - look_back, -1), -1):
            idx = self.by[key][i][1]
            if self.items[idx][1] >= t:
                return idx
        return None


def match_kernels(ev: Events, by_thread: bool = True) -> tuple[list[dict], dict]:
    """Pair NCCL's kernels with the CPU scopes that launched them: the one matching code of the lab.

    Returns one dict per collective, in issue order: ``scope`` (start, end, tid, name, args of the
    ``nccl:<op>`` scope, or of ``record_param_comms`` where no scope held the launch), ``params``
    (the arguments of the ``record_param_comms`` op around it, or {}), ``kernels`` (its NCCL
    kernels); and what was left out: {"no launch": kernels whose launch is not in the trace,
    "no scope": kernels launched outside any collective's scope, "no kernel": scopes that
    launched none in the trace}. ``by_thread=False`` matches a launch to a scope by time alone
    (for profiles whose CPU events carry the profiler's own thread numbers).

    Example
    -------
    >>> ev = Events.from_trace(load_trace(TRACES_DIR / "a100_2ranks_rank0.json.gz"))
    >>> found, left = match_kernels(ev)
    >>> len(found), {k: len(v) for k, v in left.items()}
    (14, {'no launch': 0, 'no scope': 0, 'no kernel': 0})
    """
    scopes, params = _Enclosing(ev.scopes, by_thread), _Enclosing(ev.params, by_thread)
    found: dict[tuple, dict] = {}
    left = {"no launch": [], "no scope": [], "no kernel": []}
    for kern in sorted(ev.kernels):
        launch = ev.launches.get(kern[2])
        if launch is None:
            left["no launch"].append(kern)
            continue
        tid, t = launch
        i = scopes.find(tid, t)
        if i is not None:
            key = ("scope", i)
        else:
            j = params.find(tid, t)
            if j is None:
                left["no scope"].append(kern)
                continue
            key = ("params", j)
        if key not in found:
            scope = ev.scopes[key[1]] if key[0] == "scope" else ev.params[key[1]]
            j = params.find(scope[2], scope[0]) if key[0] == "scope" else key[1]
            found[key] = dict(scope=scope, params=ev.params[j][4] if j is not None else {}, kernels=[])
        found[key]["kernels"].append(kern)
    used = {i for kind, i in found if kind == "scope"}
    left["no kernel"] = [s for i, s in enumerate(ev.scopes) if i not in used]
    return sorted(found.values(), key=lambda c: c["scope"][0]), left


# --- one rank's recording ---------------------------------------------------------------------
# c10d's names of record_param_comms ("Collective name"), for traces that have no nccl: scope
# the profiler's type names ("Input type") -> c10's (the flight recorder's and record_param_comms' dtype)
_C10_TYPE = {"float": "Float", "double": "Double", "c10::Half": "Half", "c10::BFloat16": "BFloat16",
             "long int": "Long", "long": "Long", "int": "Int", "short int": "Short", "short": "Short",
             "signed char": "Char", "unsigned char": "Byte", "bool": "Bool", "c10::Float8_e4m3fn": "Float8_e4m3fn",
             "c10::Float8_e5m2": "Float8_e5m2", "c10::complex<float>": "ComplexFloat",
             "c10::complex<double>": "ComplexDouble"}
_P2P_OPS = {"send", "recv"}


def _whole(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _first_tensor(args: dict) -> tuple[int, str] | None:
    """(elements, c10 dtype) of the first tensor in a profiler op's Input Dims / Input type."""
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not isinstance(dims, list) or not isinstance(types, list):
        return None
    for d, t in zip(dims, types):
        if isinstance(d, list) and d and all(_whole(x) for x in d) and t in _C10_TYPE:
            return int(np.prod(d, dtype=object)), _C10_TYPE[t]
    return None


def _group(params: dict, kernel_args: dict) -> tuple[str, tuple, int | None]:
    """(process group name, its ranks, its size) as torch wrote them, or ("", (), None)."""
    meta = params if "Process Group Name" in params else kernel_args
    name = meta.get("Process Group Name")
    if not isinstance(name, str) and _whole(params.get("Process Group ID")):
        meta, name = params, str(params["Process Group ID"])   # torch 2.2's record_param_comms: the group's id
    if not isinstance(name, str):
        return "", (), None
    text = meta.get("Process Group Ranks", "")
    ranks = tuple(int(x) for x in re.findall(r"-?\d+", text[:1 << 20])) if isinstance(text, str) else ()
    size = meta.get("Group size")
    return name, ranks, int(size) if _whole(size) and size > 0 else (len(ranks) or None)


def _sizes(op: str, scope_args: dict, params: dict, kernel_args: dict, group_size: int):
    """(in_bytes, out_bytes, dtype) of one collective, or None when the trace does not say."""

    meta = params if "In msg nelems" in params else kernel_args
    n_in, n_out, dtype = meta.get("In msg nelems"), meta.get("Out msg nelems"), meta.get("dtype")
    if _whole(n_in) and _whole(n_out) and isinstance(dtype, str) and dtype in ITEMSIZE:
        return n_in * ITEMSIZE[dtype], n_out * ITEMSIZE[dtype], dtype.lower()
    first = _first_tensor(scope_args) or _first_tensor(params)
    if first is None:
        return None
    n, dtype = first
    nbytes = n * ITEMSIZE[dtype]
    if op == "all_gather":                 # the scope holds the input; nccl-tests counts the output
        return nbytes, nbytes * group_size, dtype.lower()
    if op == "reduce_scatter":
        return nbytes, nbytes // group_size, dtype.lower()
    return nbytes, nbytes, dtype.lower()


def _op_of(scope: tuple) -> tuple[str, int]:

    name, args = scope[3], scope[4]
    if name.startswith("nccl:"):
        return from_profiling_name(name)
    c10d = args.get("Collective name")
    return ((_collectives.from_torch(c10d) or c10d), -1) if isinstance(c10d, str) else ("", -1)


def _launch_dims(args: dict) -> tuple[int, int]:
    grid, block = args.get("grid"), args.get("block")
    channels = grid[0] if isinstance(grid, list) and grid and _whole(grid[0]) else -1
    threads = block[0] if isinstance(block, list) and block and _whole(block[0]) else -1
    return channels, threads


def collective_row(op: str, peer: int, kernels: list, compute: list, sm: int | None = None) -> dict:
    """The kernel columns of a Recording row from a collective's NCCL kernels (one place for the
    recorder and the reader): GPU start and end, kernel, algorithm, protocol, channels, threads,
    and ``overlapped`` (a compute kernel ran beside them)."""
    start, end = min(k[0] for k in kernels), max(k[1] for k in kernels)
    first = kernels[0]
    channels, threads = _launch_dims(first[4])
    algorithm, protocol = kernel_choice(first[3], op, threads if threads > 0 else None, sm)
    return dict(start_ns=start, end_ns=end, kernel=first[3].split("(", 1)[0], algorithm=algorithm,
                protocol=protocol, channels=channels, threads=threads, overlapped=intervals.overlaps(compute, start, end),
                peer=peer)


class _Steps:
    """Profiler steps on the CPU (where launches happen) and the GPU spans of what each launched."""

    def __init__(self, ev: Events, numbers: list[int]):
        marks = sorted((s[0], s[1], int(s[3].split("#", 1)[1])) for s in ev.steps
                       if s[3].split("#", 1)[1].isdigit())
        self.cpu = [(a, b, numbers.index(n)) for a, b, n in marks]
        self.labels = {numbers.index(n): f"ProfilerStep#{n}" for _, _, n in marks}
        self.starts = [a for a, _, _ in self.cpu]
        self.gpu: dict[int, list[int]] = {}

    def of_launch(self, t: int | None) -> int:
        if not self.cpu:
            return 0
        if t is None:
            return -1
        i = bisect.bisect_right(self.starts, t) - 1
        return self.cpu[i][2] if i >= 0 and self.cpu[i][1] >= t else -1

    def saw(self, step: int, a: int, b: int) -> None:
        if step >= 0:
            span = self.gpu.setdefault(step, [a, b])
            span[0], span[1] = min(span[0], a), max(span[1], b)

    def of_gpu(self, a: int) -> int:
        return next((k for k, (s, e) in self.gpu.items() if s <= a <= e), -1)


def _machine(trace: dict, ev: Events, world: int) -> dict:
    """The machine facts a trace holds: GPU, compute capability, GPUs the process saw, nodes, NCCL."""
    devices = trace.get("deviceProperties")
    devices = [d for d in devices if isinstance(d, dict)] if isinstance(devices, list) else []
    used = [k[4].get("device") for k in ev.kernels + ev.compute[:1000]]
    dev = max(set(used), key=used.count) if used else None
    props = next((d for d in devices if d.get("id") == dev), devices[0] if devices else {})
    seen = len(devices)
    nodes = (1 if world <= seen else world // seen if world % seen == 0 else 0) if seen else 0
    cc = (props.get("computeMajor"), props.get("computeMinor"))
    info = trace.get("distributedInfo", {})
    return dict(gpu=str(props.get("name", "")), compute_capability=f"{cc[0]}.{cc[1]}" if all(map(_whole, cc)) else "",
                gpus_seen=seen, world_size=world, nodes=nodes, nccl_version=str(info.get("nccl_version", "")),
                kernels=_generation(ev.kernels[0][3]) if ev.kernels else "")


def _distributed(trace: dict, path) -> tuple[int, int, str]:
    info = trace.get("distributedInfo")
    if not isinstance(info, dict):
        raise _fail(path, "has no distributedInfo (rank, world_size): it is not the trace of a torch.distributed "
                          "job; profile after init_process_group")
    rank, world, backend = info.get("rank"), info.get("world_size"), info.get("backend", "")
    if not (_whole(rank) and _whole(world) and 0 <= rank < world):
        raise _fail(path, f"its distributedInfo gives rank {rank!r} of world_size {world!r}, which is not a rank")
    return rank, world, str(backend)


# Kernels of communication libraries other than NCCL, by their names: DeepEP (``deep_ep::``, DeepSeek's
# ``dpsk::ep::``), NVSHMEM, vLLM's custom all-reduce, torch's symmetric-memory all-reduce, MSCCL++.
_OTHER_COMMUNICATION = re.compile(r"::ep::|deep_?ep|nvshmem|cross_device_reduce|(?:one|two)_shot_all_reduce|"
                                  r"multimem_|mscclpp", re.IGNORECASE)
# A collective NCCL ran without a kernel has none of a kernel's columns.
_NO_KERNEL = dict(kernel="", algorithm="", protocol="", channels=-1, threads=-1, overlapped=False)


def _one_rank(params: dict, world: int) -> bool:
    """A collective of a one-rank communicator: NCCL completes it without launching a kernel."""
    return world == 1 or params.get("Group size") == 1


class _RankRows:
    """One rank's collectives as Recording rows: numbered per group, with what had to be left out or assumed."""

    def __init__(self, ev: Events, rank: int, world: int, steps: _Steps, sm: int | None):
        self.ev, self.rank, self.world, self.steps, self.sm = ev, rank, world, steps, sm
        self.compute = intervals.union((k[0], k[1]) for k in ev.compute)
        self.rows, self.seqs, self.streams = [], {}, set()
        self.unsized = self.kernelless = 0

    def add(self, scope: tuple, params: dict, kernels: list) -> None:
        """One collective: its CPU scope, the ``record_param_comms`` arguments around it, its NCCL kernels
        (none for a one-rank communicator, whose row takes the scope's times)."""
        op, peer = _op_of(scope)
        meta = kernels[0][4] if kernels else {}
        group, ranks, size = _group(params, meta)
        if not group:
            group = f"stream {meta.get('stream', '?')}"
            self.streams.add(group)
        size = size or self.world
        sizes = _sizes(op, scope[4], params, meta, size)
        if sizes is None:   # kept, counted and timed: only its bytes are unknown
            self.unsized += 1
            sizes = (math.nan, math.nan, "")
        if kernels:
            row = collective_row(op, peer, kernels, self.compute, self.sm)
            launch = self.ev.launches.get(kernels[0][2])
            launched = launch[1] if launch else None
        else:
            self.kernelless += 1
            row = dict(_NO_KERNEL, start_ns=scope[0], end_ns=scope[1], peer=peer)
            launched = scope[0]
        seq = -1
        if op not in _P2P_OPS:
            seq = self.seqs[group] = self.seqs.get(group, -1) + 1
        nbytes = nccl_tests_bytes(op, sizes[0], sizes[1]) if sizes[2] else math.nan
        row.update(rank=self.rank, step=self.steps.of_launch(launched), op=op, bytes=nbytes, in_bytes=sizes[0],
                   out_bytes=sizes[1], dtype=sizes[2], group=group, group_ranks=ranks, group_size=size, seq=seq,
                   frame="", via="", backend_op=scope[3], issued_ns=row["start_ns"])
        self.rows.append([row[col] for col in ROW])

    def notes(self, left: dict, lone: int) -> list[str]:
        """What the rows leave out or assume, one line each."""
        notes = []
        if self.streams:
            notes.append(f"the trace names no process groups; each communicator is named by its CUDA stream "
                         f"({', '.join(sorted(self.streams))}) and taken as all {self.world} ranks (bytes of "
                         "all_gather and reduce_scatter, and busbw, assume so)")
        if self.unsized:
            notes.append(f"{self.unsized} collective(s) of a size the trace does not give (record with "
                         "record_shapes=True): kept, counted and timed, bytes unknown (NaN)")
        if self.kernelless:
            notes.append(f"{self.kernelless} collective(s) of a one-rank communicator, which NCCL completes without "
                         "a kernel: kept, timed by their CPU scope")
        for what, n in (("NCCL kernel(s) launched before the trace began (their collective is not in it)",
                         len(left["no launch"])),
                        ("NCCL kernel(s) launched outside any collective's scope", len(left["no scope"])),
                        ("collective(s) whose kernels are not in the trace (they ran after it ended)",
                         len(left["no kernel"]) - lone)):
            if n:
                notes.append(f"{n} {what}: left out")
        other = _other_communication(self.ev)
        if other:
            notes.append(other)
        return [f"rank {self.rank}: {note}" for note in notes]


def _other_communication(ev: Events) -> str:
    """A note on kernels of communication libraries other than NCCL, which this reader does not read."""
    counts: dict = {}
    for k in ev.compute:
        if _OTHER_COMMUNICATION.search(k[3]):
            name = re.split(r"[<(]", re.sub(r"^void |\(anonymous namespace\)::", "", k[3]), maxsplit=1)[0]
            counts[name] = counts.get(name, 0) + 1
    if not counts:
        return "" if ev.kernels or ev.scopes else "the trace holds no NCCL collective"
    listed = ", ".join(f"{name} x{n}" for name, n in sorted(counts.items(), key=lambda kv: -kv[1])[:5])
    where = "besides NCCL's" if ev.kernels else "and no NCCL collective"
    return (f"{sum(counts.values())} kernel(s) of another communication library ({listed}) {where}: "
            "read_trace reads NCCL's collectives only, so this communication is not in the recording")


def _rank_frames(ev: Events, rank: int, world: int, steps: _Steps, sm: int | None):
    """(rows, scope rows, notes) of one rank."""
    for k in ev.kernels + ev.compute:
        launch = ev.launches.get(k[2])
        if launch is not None:
            steps.saw(steps.of_launch(launch[1]), k[0], k[1])
    found, left = match_kernels(ev)
    made = _RankRows(ev, rank, world, steps, sm)
    for c in found:
        made.add(c["scope"], c["params"], c["kernels"])
    params = _Enclosing(ev.params)
    lone = 0
    for scope in left["no kernel"]:
        j = params.find(scope[2], scope[0])
        around = ev.params[j][4] if j is not None else {}
        if _one_rank(around, world):
            made.add(scope, around, [])
            lone += 1
    made.rows.sort(key=lambda r: r[ROW.index("issued_ns")])
    scopes = []
    for k in ev.compute:
        launch = ev.launches.get(k[2])
        step = steps.of_launch(launch[1]) if launch else steps.of_gpu(k[0])
        scopes.append((rank, step, k[3].split("(", 1)[0], k[0], k[1]))
    return made.rows, scopes, made.notes(left, lone)


def _expand(paths) -> list[Path]:
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if not isinstance(paths, (list, tuple)) or not paths:
        raise TypeError(f"read_trace takes a path, a glob such as 'rank*.json.gz', or a list of them, not "
                        f"{type(paths).__name__ if not isinstance(paths, (list, tuple)) else 'an empty list'}")
    out: list[Path] = []
    for p in paths:
        if not isinstance(p, (str, os.PathLike)):
            raise TypeError(f"read_trace takes paths (str or pathlib.Path), not {type(p).__name__}")
        text = os.fspath(p)
        if glob.has_magic(text):
            hits = sorted(glob.glob(text))
            if not hits:
                raise ValueError(f"no file matches {text!r}")
            out += [Path(h) for h in hits]
        else:
            out.append(Path(text))
    if len(out) > _MAX_FILES:
        raise ValueError(f"{len(out)} files: read_trace reads at most {_MAX_FILES} (one per rank)")
    return out


def read_trace(paths, name: str | None = None):
    """Read the PyTorch profiler traces of one multi-GPU NCCL job (one file per rank) as a Recording.

    Parameters
    ----------
    paths : a path, a glob (``"traces/rank*.json.gz"``) or a list of them; ``.json`` or ``.json.gz``
        files as ``torch.profiler`` writes them (``export_chrome_trace``, ``tensorboard_trace_handler``).
    name : the recording's label (default: the first file's name).

    Returns
    -------
    :class:`labcore.readers.recording.Recording` with the ranks the files hold (``world_size`` is the
    job's); its frame has, besides the recorder's columns, ``kernel``, ``algorithm``,
    ``protocol``, ``channels`` (CTAs), ``threads`` (a block) and ``peer``; ``scopes`` are the
    compute kernels; ``notes`` what was left out or assumed; ``machine`` the GPU, compute
    capability, GPUs the process saw, nodes, NCCL version (where the trace says) and kernel
    generation. See the module docstring for how each is read.

    Example
    -------
    >>> rec = read_trace(TRACES_DIR / "128ranks_rank*.json.gz")
    >>> rec.ranks, rec.world_size, sorted(rec.collectives()["op"].value_counts().items())
    ((0, 1), 128, [('all_gather', 2), ('all_reduce', 4), ('all_to_all', 4)])
    """
    import pandas as pd


    files = _expand(paths)
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name is a label (a str), not {type(name).__name__}")
    loaded, owner = [], {}
    for path in files:
        trace = load_trace(path)
        rank, world, backend = _distributed(trace, path)
        if rank in owner:
            raise ValueError(f"rank {rank} appears in both {owner[rank]} and {path}: pass one trace per rank of one job")
        owner[rank] = path
        ev = Events.from_trace(trace, str(path))
        loaded.append((path, rank, world, backend, ev, _machine(trace, ev, world)))
        del trace
    worlds = {w for _, _, w, _, _, _ in loaded}
    if len(worlds) > 1:
        raise ValueError(f"these traces come from jobs of {sorted(worlds)} ranks; pass the traces of one job")
    numbers = sorted({int(s[3].split("#", 1)[1]) for item in loaded for s in item[4].steps
                      if s[3].split("#", 1)[1].isdigit()})
    label = name if name is not None else files[0].name.removesuffix(".gz").removesuffix(".json")
    recs, notes = [], []
    for path, rank, world, backend, ev, machine in loaded:
        steps = _Steps(ev, numbers)
        cc = machine["compute_capability"]
        rows, scopes, rank_notes = _rank_frames(ev, rank, world, steps, int(cc.replace(".", "")) if cc else None)
        notes += rank_notes
        spans = [(k[0], k[1]) for k in ev.kernels + ev.compute]
        if not spans:
            raise _fail(path, "holds no GPU kernels: profile with activities=[ProfilerActivity.CPU, "
                              "ProfilerActivity.CUDA]")
        t0, t1 = min(a for a, _ in spans), max(b for _, b in spans)
        step_rows = [(rank, k, a, b, steps.labels.get(k, "")) for k, (a, b) in sorted(steps.gpu.items())] \
            or [(rank, 0, t0, t1, "")]
        frame = pd.DataFrame(rows, columns=ROW).sort_values("issued_ns", kind="stable").reset_index(drop=True)
        rec = Recording._from_rank(label, rank, world, backend, t0, t1, frame,
                                   pd.DataFrame(scopes, columns=["rank", "step", "name", "start_ns", "end_ns"]),
                                   pd.DataFrame(step_rows, columns=["rank", "step", "start_ns", "end_ns", "label"]))
        rec.machine = machine
        recs.append(rec)
    out = combine(recs)
    out.notes, out.machine = notes, recs[0].machine
    return out
