"""Names that say what they are: no public class or function of labcore shares its name with a different
one elsewhere in labcore, and the old names are gone."""
import importlib
import inspect
import pkgutil

import pytest

import labcore


def _public(module) -> dict:
    """name -> the object, for the classes and functions ``module`` offers: those in its ``__all__``,
    or, without one, those it defines under a name without a leading underscore."""
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n, o in vars(module).items() if not n.startswith("_") and getattr(o, "__module__", "") ==
                 module.__name__]
    out = {}
    for name in names:
        obj = getattr(module, name, None)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            out[name] = obj
    return out


# Every command line has a main(): the module names which one.
ENTRY_POINTS = {"main"}


def test_no_public_name_means_two_things():
    modules = [importlib.import_module(m.name) for m in pkgutil.walk_packages(labcore.__path__, "labcore.")]
    seen: dict = {}
    for module in modules:
        for name, obj in _public(module).items():
            seen.setdefault(name, {})[f"{obj.__module__}.{obj.__qualname__}"] = module.__name__
    clashes = {name: sorted(where) for name, where in seen.items() if len(where) > 1 and name not in ENTRY_POINTS}
    assert not clashes, clashes


@pytest.mark.parametrize("old", [
    "labcore.sim:sweep", "labcore.sim:cost_table", "labcore.sim.apps.pricing:cost_table", "labcore.sim.nccl.tuner:sweep",
    "labcore.sim.nccl.tuner:Graph", "labcore.sim.nccl.tuner:SIM_ALGORITHM", "labcore.bench:summarize",
    "labcore.bench:read_nccl_tests", "labcore.live.flight:record", "labcore.live:read_trace",
    "labcore.sim.machines.topologies:preset",
])
def test_old_names_are_gone(old):
    module, name = old.split(":")
    assert not hasattr(importlib.import_module(module), name)


@pytest.mark.parametrize("module", ["labcore.sim.trees", "labcore.sim.presets_scale", "labcore.live.kineto",
                                    "labcore.bench.reader", "labcore.course.hooks"])
def test_old_modules_are_gone(module):
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(module)


def test_renamed_things_are_what_they_say():
    import labcore.sim as sim
    from labcore.sim.core.network import NVSwitchNodes

    assert isinstance(sim.topologies.nvswitch(8), NVSwitchNodes) and isinstance(sim.presets.topology("multinode"),
                                                                                 NVSwitchNodes)
    import labcore.sim.core.network as topology

    assert not hasattr(topology, "Cluster")                   # the topology is not lc.Cluster (the ranks)
    from labcore.collectives import Counts

    from labcore.bench.ops import OPS

    assert isinstance(OPS["all_gather"].layout(1000, 4, 4), Counts)      # sim.Layout draws a schedule
    assert sim.simulate_sizes("all_reduce", "ring", 4, [1024])["time_us"].item() > 0
