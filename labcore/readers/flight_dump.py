"""torch's flight-recorder dumps, read safely, and torch's own analysis of them (``fr_trace``).

With ``TORCH_FR_BUFFER_SIZE=N`` each rank of a job keeps its last N collectives in a ring buffer:
group, sequence number, op, sizes, dtypes and the Python stack that issued it; a dump is that
buffer pickled to a file (``TORCH_FR_DUMP_TEMP_FILE<rank>``, or :func:`labcore.live.flight.dump`
on a lab cluster). torch's analyzer (``python -m torch.distributed.flight_recorder.fr_trace DIR``)
reads the dumps of all ranks to find the first collective the ranks disagree on: :func:`analyze`
runs it on a folder of dumps and returns a :class:`FlightAnalysis`.

Dumps are untrusted input. A dump is a pickle, and unpickling runs whatever code a crafted
file names; dumps of real jobs get copied and shared. So the lab never calls ``pickle.load``
on one (nor torch's ``read_dump``, which does): :func:`load_dump` reads a regular file of at
most 64 MiB with an unpickler that builds plain data only (dicts, lists, tuples, strings,
bytes, numbers, booleans, None: all that torch's recorder writes) and refuses any class or
function, then checks the dump's layout; a file that is anything else is one ``ValueError``
naming it. torch is imported only to run its analyzer.
"""
from __future__ import annotations

import io
import logging
import os
import pickle
from dataclasses import dataclass, field

__all__ = ["PREFIX", "MAX_DUMP_BYTES", "FlightAnalysis", "analyze", "load_dump", "plain"]

#: Dump file names: PREFIX + global rank, as fr_trace expects.
PREFIX = "fr_trace_rank_"
#: The largest dump read (a ring buffer of 1,000 entries with stacks is a few MiB).
MAX_DUMP_BYTES = 64 << 20

# What fr_trace and the lab read of every entry.
_ENTRY_KEYS = ("record_id", "process_group", "collective_seq_id", "p2p_seq_id", "profiling_name", "input_sizes",
               "output_sizes", "state")


class _PlainUnpickler(pickle.Unpickler):
    """Builds plain data only; a reference to any class or function (what running code needs) is refused."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"it names {module}.{name}, and a dump holds plain data only")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("it refers to an object outside the file")


def plain(data: bytes):
    """``data`` unpickled as plain data (see :class:`_PlainUnpickler`)."""
    return _PlainUnpickler(io.BytesIO(data)).load()


@dataclass
class FlightAnalysis:
    """torch's flight-recorder analysis of one call on every rank.

    Attributes
    ----------
    world_size : int
    dumped, missing : list[int]
        Ranks that left a dump, and ranks that did not (killed before their watchdog
        wrote one, or never started the call).
    collectives : list
        torch's ``Collective`` records (``fr_trace``'s database), in matching order;
        ``pass_check`` is False where the ranks disagreed.
    text : str
        What torch's analyzer printed.
    last_entered : dict[int, dict]
        Per rank, the last collective it enqueued: op, sequence number, sizes,
        whether it completed (from the dump's ``pg_status``).
    error : Exception or None
        What the call raised in the notebook (``CollectiveTimeout``, ``RankDied``, ...).
    elapsed_s : float
        From the call's start to the analysis being ready.
    """

    world_size: int
    dumped: list
    missing: list
    collectives: list
    text: str
    last_entered: dict = field(default_factory=dict)
    error: Exception | None = None
    elapsed_s: float = 0.0

    @property
    def first_mismatch(self):
        """The first collective torch's analyzer flagged (mismatched or missing ranks), or None."""
        return next((c for c in self.collectives if not c.pass_check or c.missing_ranks), None)

    @property
    def torch_culprits(self) -> list[int]:
        """The ranks torch's analyzer names at the first flagged collective.

        Either the ranks missing from it, or those whose entry differs from the
        reference rank's (the first rank fr_trace reads; here, rank 0 or the lowest
        rank that dumped). With no flagged collective: the ranks that left no dump.
        """
        c = self.first_mismatch
        if c is None:
            return list(self.missing)
        if c.missing_ranks:
            return sorted(c.missing_ranks)
        return sorted(c.mismatch_collectives or {})

    @property
    def culprits(self) -> list[int]:
        """:attr:`torch_culprits`, read as a majority vote.

        fr_trace compares every rank with its reference rank and blames those that
        differ; when it blames more than half of the ranks that dumped, the odd one
        out is the reference itself.
        """
        named = self.torch_culprits
        c = self.first_mismatch
        if c is not None and not c.missing_ranks and 2 * len(named) > len(self.dumped):
            return sorted(set(self.dumped) - set(named))
        return named

    def __str__(self) -> str:
        return self.describe()

    def describe(self, verdict: bool = True) -> str:
        """What each rank's dump says and fr_trace's first mismatch; with ``verdict``, also the
        culprit the lab reads from them (an exercise leaves that to the learner)."""
        lines = [f"flight recorder: dumps from ranks {self.dumped}"
                 + (f", none from {self.missing}" if self.missing else "")]
        for rank in self.dumped:
            e = self.last_entered.get(rank)
            if e is None:
                lines.append(f"  rank {rank}: no collective recorded in this call")
                continue
            state = "completed" if e["completed"] else "NOT completed"
            lines.append(f"  rank {rank}: last entered {e['op']} #{e['seq']} (group {e['group']}, "
                         f"input sizes {e['input_sizes']}), {state}")
        c = self.first_mismatch
        if c is None:
            lines.append("fr_trace: every recorded collective matched on every rank that dumped.")
            return "\n".join(lines)
        if c.missing_ranks:
            kind = f"ranks {sorted(c.missing_ranks)} never entered it"
        else:
            kinds = {m.type_of_mismatch.state.name for m in (c.mismatch_collectives or {}).values()}
            kind = f"{', '.join(sorted(kinds))} against rank {self.dumped[0]}'s entry, on ranks {self.torch_culprits}"
        lines.append(f"fr_trace: first mismatch at {c.collective_name} #{c.collective_seq_id} "
                     f"(group {c.pg_desc}): {kind}")
        if verdict:
            lines.append(f"culprit (majority reading): rank(s) {self.culprits}")
        return "\n".join(lines)


def _last_entered(trace: dict) -> dict | None:
    entries = [e for e in trace["entries"] if not e.get("is_p2p")] or trace["entries"]
    if not entries:
        return None
    e = entries[-1]
    name, desc = e["process_group"]
    done = trace.get("pg_status", {}).get(name, {}).get("last_completed_collective", -1)
    seq = e["p2p_seq_id"] if e.get("is_p2p") else e["collective_seq_id"]
    return {"op": e["profiling_name"], "seq": seq, "group": desc, "input_sizes": e["input_sizes"],
            "completed": bool(not e.get("is_p2p") and done >= e["collective_seq_id"])}


def load_dump(path) -> dict:
    """One rank's dump as plain data, read safely (see the module): a dict with ``version``,
    ``entries`` (each with the keys fr_trace reads) and ``pg_config``.

    Raises ValueError naming the file when it is not a regular file of at most
    :data:`MAX_DUMP_BYTES`, not a pickle of plain data, or not a flight-recorder dump.
    """
    from labcore.files import read_bytes_limited

    data = read_bytes_limited(path, MAX_DUMP_BYTES, "a flight-recorder dump", fix="remove it, or dump again")
    try:
        trace = plain(data)
    except Exception as exc:  # noqa: BLE001 - whatever a malformed pickle raises, one line naming the file
        raise _unreadable(path, f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}") from None
    why = _layout_problem(trace)
    if why:
        raise _unreadable(path, why)
    return trace


def _unreadable(path, why: str) -> ValueError:
    return ValueError(f"{path} is not a readable flight-recorder dump ({why}); remove it, or dump again")


def _layout_problem(trace) -> str | None:
    """What is missing for this to be torch's dump, or None."""
    if not isinstance(trace, dict):
        return f"it holds a {type(trace).__name__}, not the dump's dict"
    missing = [k for k in ("version", "entries", "pg_config") if k not in trace]
    if missing:
        return f"it has no {', '.join(missing)}"
    if not isinstance(trace["entries"], list) or not isinstance(trace["pg_config"], dict):
        return "its entries are not a list, or its pg_config not a dict"
    status = trace.get("pg_status", {})
    if not isinstance(status, dict) or not all(isinstance(v, dict) for v in status.values()):
        return "its pg_status is not a table of groups"
    for i, entry in enumerate(trace["entries"]):
        lacks = [k for k in _ENTRY_KEYS if not isinstance(entry, dict) or k not in entry]
        if lacks:
            return f"entry {i} has no {', '.join(lacks)}"
        group = entry["process_group"]
        if not isinstance(group, (list, tuple)) or len(group) != 2:
            return f"entry {i}'s process_group is not (name, description)"
    return None


def analyze(folder: str, world_size: int) -> FlightAnalysis:
    """Run torch's fr_trace analyzer on the dumps in ``folder`` (``PREFIX<rank>`` files).

    Each dump is read with :func:`load_dump` (dumps are untrusted input: no code in one runs).
    Ranks without a dump are allowed (``--allow-incomplete-ranks``); they are listed in
    ``missing``. A dump that cannot be read, or that torch's analyzer cannot match up, is one
    ValueError naming the file or the dumps.
    """
    from labcore import validate

    world_size = validate.whole_number(world_size, "world_size", least=1,
                                       must="a positive int (the ranks that should have dumped)")
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"no dump folder {folder!r}")
    files = {int(f[len(PREFIX):]): os.path.join(folder, f) for f in os.listdir(folder)
             if f.startswith(PREFIX) and f[len(PREFIX):].isdigit()}
    traces = {rank: load_dump(path) for rank, path in sorted(files.items())}
    last = {rank: entry for rank, trace in traces.items() if (entry := _last_entered(trace)) is not None}
    missing = [r for r in range(world_size) if r not in files]
    if not files:
        return FlightAnalysis(world_size, [], missing, [], "no rank left a dump", last)
    text, collectives = _run_fr_trace(files, traces)
    return FlightAnalysis(world_size, sorted(files), missing, collectives, text, last)


def _run_fr_trace(files: dict[int, str], traces: dict[int, dict]) -> tuple[str, list]:
    """torch's analyzer on the dumps in rank order (so rank 0 is its reference), its log captured.

    The dumps are handed over as read by :func:`load_dump`, in the form of torch's own
    ``read_dump`` (which unpickles the files itself, and is not used).
    """
    from torch.distributed.flight_recorder.components.fr_logger import FlightRecorderLogger

    log = FlightRecorderLogger().logger
    buffer = io.StringIO()
    capture = logging.StreamHandler(buffer)
    capture.setFormatter(logging.Formatter("%(message)s"))
    saved, log.handlers = log.handlers, [capture]
    try:
        from torch.distributed.flight_recorder.components.builder import build_db
        from torch.distributed.flight_recorder.components.config_manager import JobConfig

        folder = os.path.dirname(next(iter(files.values())))
        args = JobConfig().parse_args([folder, "--allow-incomplete-ranks", "-p", PREFIX])
        details = {os.path.basename(files[rank]): dict(host_name=f"host_rank{rank}", rank=rank, entries=t["entries"],
                                                       version=t["version"], pg_config=t["pg_config"])
                   for rank, t in sorted(traces.items())}
        version = str(next(iter(details.values()))["version"])
        try:
            db = build_db(details, args, version)
        except Exception as exc:  # noqa: BLE001 - dumps that do not match up: one line naming them
            text = " ".join(str(exc).split())[:200]
            raise ValueError(f"torch's fr_trace could not match up the dumps in {folder} ({type(exc).__name__}"
                             f"{': ' + text if text else ''}); remove the dumps that are not of one job, or dump "
                             "again") from None
    finally:
        log.handlers = saved
    # builder warns once, at import, that the optional tabulate package is absent
    text = "\n".join(line for line in buffer.getvalue().splitlines() if not line.startswith("tabulate is"))
    return text.strip(), list(db.collectives)
