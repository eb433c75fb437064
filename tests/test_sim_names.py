"""Names that say what they are: no public class or function of labcore shares its name with a different
one elsewhere in labcore, and the old names warn and forward for one release."""
import importlib
import inspect
import pkgutil
import warnings

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


@pytest.mark.parametrize("old, new", [
    ("labcore.sim:sweep", "labcore.sim:simulate_sizes"),
    ("labcore.sim:cost_table", "labcore.sim:price_steps"),
    ("labcore.sim.pricing:cost_table", "labcore.sim.pricing:price_steps"),
    ("labcore.sim.tuner:sweep", "labcore.sim.tuner:cost_sweep"),
    ("labcore.sim.tuner:Graph", "labcore.sim.tuner:TopoGraph"),
    ("labcore.sim.trees:nccl_tree_parents", "labcore.sim.tree_shapes:nccl_tree_parents"),
    ("labcore.sim.presets_scale:nic_bytes", "labcore.sim.scaleout:nic_bytes"),
])
def test_old_names_warn_and_forward(old, new):
    (old_module, old_name), (new_module, new_name) = (x.split(":") for x in (old, new))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = getattr(importlib.import_module(old_module), old_name)
    assert got is getattr(importlib.import_module(new_module), new_name)
    assert len(caught) == 1 and caught[0].category is DeprecationWarning and new_name in str(caught[0].message)
    assert old_name not in getattr(importlib.import_module(old_module), "__all__", ())


def test_renamed_things_are_what_they_say():
    import labcore.sim as sim
    from labcore.sim.topology import NVSwitchNodes

    assert isinstance(sim.topologies.nvswitch(8), NVSwitchNodes) and isinstance(sim.presets.topology("multinode"),
                                                                                 NVSwitchNodes)
    import labcore.sim.topology as topology

    assert not hasattr(topology, "Cluster")                   # the topology is not lc.Cluster (the ranks)
    from labcore.collectives import Counts

    from labcore.bench.ops import OPS

    assert isinstance(OPS["all_gather"].layout(1000, 4, 4), Counts)      # sim.Layout draws a schedule
    assert sim.simulate_sizes("all_reduce", "ring", 4, [1024])["time_us"].item() > 0
