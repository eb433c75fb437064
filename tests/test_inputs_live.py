"""Bad input to the live side (EngineCluster, %%ranks, the recorder, the flight recorder): one line
naming the fix, before any process starts, and nothing left on disk."""
import glob
import os
import tempfile

import psutil
import pytest


def _children():
    return {p.pid for p in psutil.Process().children(recursive=True)}


@pytest.mark.parametrize("kwargs,message", [
    (dict(engines=10000), "10000 ranks is more than this machine can hold"),
    (dict(engines=2, launcher="foo"), "launcher must name one of ipyparallel's engine launchers"),
    (dict(engines=2, launcher=5), "launcher must name one of ipyparallel's engine launchers"),
    (dict(engines=2, launcher="no.such.Launcher"), "ipyparallel refused these cluster options"),
])
def test_engine_cluster_refuses_before_starting_anything_and_leaves_no_folder(kwargs, message, monkeypatch):
    pytest.importorskip("ipyparallel")
    import labcore as lc

    monkeypatch.delenv("LABCORE_MAX_RANKS", raising=False)
    before = _children()
    with pytest.raises(ValueError, match=message):
        lc.EngineCluster(**kwargs)
    assert _children() <= before
    assert not glob.glob(os.path.join(tempfile.gettempdir(), f"labcore-{os.getpid()}-*"))
