"""Flight-recorder dumps are untrusted input: read as plain data (no code in a dump runs), a malformed
dump is one line naming the file, and a real dump of a gloo cluster reads and analyses."""
import pickle
import re
from pathlib import Path

import pytest

from labcore.live import flight
from labcore.readers import flight_dump


class _Payload:
    """What a crafted dump carries: unpickling it would create the marker file."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def _dump(folder: Path, rank: int, content) -> Path:
    path = folder / f"{flight_dump.PREFIX}{rank}"
    path.write_bytes(content if isinstance(content, bytes) else pickle.dumps(content))
    return path


def _entry(**change):
    entry = dict(record_id=0, pg_id=0, process_group=("0", "default_pg"), collective_seq_id=1, p2p_seq_id=0,
                 op_id=1, profiling_name="gloo:all_reduce", time_created_ns=1, input_sizes=[[4]],
                 input_dtypes=["Float"], output_sizes=[[4]], output_dtypes=["Float"], state="completed",
                 frames=[], is_p2p=False, retired=True, timeout_ms=1000)
    return {**entry, **change}


def _trace(entries, **change):
    trace = dict(version="2.10", entries=entries, comm_lib_version="gloo",
                 pg_config={"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
                 pg_status={"0": {"last_enqueued_collective": 1, "last_started_collective": 1,
                                  "last_completed_collective": 1}})
    return {**trace, **change}


def test_a_crafted_dump_runs_no_code(tmp_path):
    marker = tmp_path / "marker"
    path = _dump(tmp_path, 0, {"version": "2.10", "entries": [_Payload(marker)], "pg_config": {}})
    with pytest.raises(ValueError) as caught:
        flight_dump.analyze(str(tmp_path), 1)
    assert not marker.exists()                                    # the payload did not run
    text = str(caught.value)
    assert text.startswith(f"{path} is not a readable flight-recorder dump (UnpicklingError: it names io.open")
    assert "\n" not in text and "remove it, or dump again" in text


@pytest.mark.parametrize("content,why", [
    (b"", "EOFError"),                                                         # empty
    (pickle.dumps(_trace([_entry()]))[:40], "UnpicklingError"),                 # cut short
    (pickle.dumps([1, 2, 3]), "it holds a list, not the dump's dict"),          # not a trace
    (pickle.dumps({k: v for k, v in _trace([_entry()]).items() if k != "version"}), "it has no version"),
    (pickle.dumps(_trace([{"record_id": 0}])), "entry 0 has no process_group"),
    (pickle.dumps(_trace([_entry(process_group="0")])), "entry 0's process_group is not (name, description)"),
    (pickle.dumps(_trace("x")), "its entries are not a list"),
    (pickle.dumps(_trace([_entry()], pg_status=[1])), "its pg_status is not a table of groups"),
])
def test_a_malformed_dump_is_one_line_naming_the_file(tmp_path, content, why):
    path = _dump(tmp_path, 0, content)
    with pytest.raises(ValueError) as caught:
        flight_dump.analyze(str(tmp_path), 2)
    text = str(caught.value)
    assert text.startswith(f"{path} is not a readable flight-recorder dump (") and why in text and "\n" not in text


def test_a_dump_that_is_no_regular_file_or_too_large_is_refused_unread(tmp_path, monkeypatch):
    import os

    os.mkfifo(tmp_path / f"{flight_dump.PREFIX}0")
    with pytest.raises(ValueError, match="is a pipe \\(FIFO\\), not a flight-recorder dump"):
        flight_dump.analyze(str(tmp_path), 1)
    (tmp_path / f"{flight_dump.PREFIX}0").unlink()
    _dump(tmp_path, 0, _trace([_entry()]))
    monkeypatch.setattr(flight_dump, "MAX_DUMP_BYTES", 16)
    with pytest.raises(ValueError, match="more than the 0 MiB a flight-recorder dump may have"):
        flight_dump.analyze(str(tmp_path), 1)


def test_plain_dumps_read_and_analyse(tmp_path):
    for rank in (0, 1):
        _dump(tmp_path, rank, _trace([_entry()]))
    fa = flight_dump.analyze(str(tmp_path), 2)
    assert fa.dumped == [0, 1] and fa.first_mismatch is None
    assert fa.last_entered[1] == {"op": "gloo:all_reduce", "seq": 1, "group": "default_pg", "input_sizes": [[4]],
                                  "completed": True}


# Where the package may run code it is handed: the worker runs the learner's own cells (eval/exec of the
# cell's source) and the clusters pass calls and replies over their control pipes (cloudpickle); the checker's
# child process reads the check the notebook sent it (exercises/checker.py); a handed-in answer's source is
# defined where a learner's code may run, the grader's sandbox and a live check's ranks (exercises/codec.py),
# and the sandbox reads the judge's arguments (course/sandbox.py). None of them reads a file. A student
# release's exercise modules run their own compiled code, which ships inside the installed package as a .pyc
# does (exercises/sealed.py), never a file a user hands the lab.
_RUNS_CODE_ON_PURPOSE = {"live/worker.py", "live/cluster.py", "live/engines.py", "live/base.py", "exercises/sealed.py",
                         "exercises/checker.py", "exercises/codec.py", "course/sandbox.py"}


def test_no_reader_in_the_package_unpickles_or_evals_a_file():
    root = Path(__file__).resolve().parents[1] / "labcore"
    found = []
    for path in root.rglob("*.py"):
        name = str(path.relative_to(root))
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#")[0]
            loads = ("pickle.load(" in code or "pickle.loads(" in code or "marshal.load" in code
                     or "torch.load(" in code and "weights_only=True" not in code)
            runs = any(re.search(rf"(?<![\w.]){word}\(", code) for word in ("eval", "exec"))
            if (loads or runs) and name not in _RUNS_CODE_ON_PURPOSE:
                found.append(f"{name}:{number}: {line.strip()}")
    # The recorder reads torch's in-memory trace bytes (not a file); it is the one pickle.loads left.
    assert [f for f in found if not f.startswith("live/recorder.py")] == []


@pytest.mark.live
def test_a_real_dump_of_a_gloo_cluster_is_plain_data_and_analyses(tmp_path):
    import labcore as lc

    def work(folder):
        import torch
        import torch.distributed as dist

        t = torch.ones(4)
        dist.all_reduce(t)
        dist.broadcast(t, 0)
        flight.dump(f"{folder}/{flight_dump.PREFIX}{dist.get_rank()}", stacks=True)

    with lc.Cluster(2, backend="gloo", env=flight.ENV, timeout=120, show_output=False) as cl:
        cl.run(work, str(tmp_path))
    trace = flight_dump.load_dump(tmp_path / f"{flight_dump.PREFIX}0")      # what torch's recorder writes, read safely
    assert [e["profiling_name"] for e in trace["entries"]][-2:] == ["gloo:all_reduce", "gloo:broadcast"]
    assert trace["entries"][0]["frames"] and isinstance(trace["entries"][0]["process_group"], tuple)
    fa = flight_dump.analyze(str(tmp_path), 2)
    assert fa.dumped == [0, 1] and fa.first_mismatch is None and fa.last_entered[0]["op"] == "gloo:broadcast"
