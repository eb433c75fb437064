"""The package surface: lazy parts, aliases, and a light import."""
import subprocess
import sys
import pytest

pytestmark = pytest.mark.live


def test_import_labcore_does_not_import_torch():
    code = "import sys, labcore; assert 'torch' not in sys.modules, 'import labcore pulled in torch'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_bench_and_evidence_are_packages_of_their_own():
    import importlib.util

    import labcore as lc
    import labcore.bench
    import labcore.evidence

    assert lc.bench is labcore.bench and lc.evidence is labcore.evidence
    assert hasattr(labcore.bench, "__path__") and hasattr(labcore.evidence, "__path__")
    assert importlib.util.find_spec("labcore.live.bench") is None
    assert not set(labcore.bench.__all__) & set(labcore.evidence.__all__)


def _internal_imports(source: str) -> list[str]:
    """Imports in ``source`` that reach past a package's public names."""
    import ast
    import importlib

    bad = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
            names = []
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules, names = [node.module], [alias.name for alias in node.names]
        else:
            continue
        for module in modules:
            parts = module.split(".")
            if parts[0] != "labcore" or len(parts) == 1:
                continue
            if parts[1] == "exercises" and len(parts) <= 3:
                continue            # a notebook's own exercises module
            if len(parts) > 2:
                bad.append(module)
                continue
            package = importlib.import_module(module)
            bad += [f"{module}.{n}" for n in names
                    if n != "*" and n not in getattr(package, "__all__", ()) and module != "labcore.exercises"]
    return bad


def _internal_attributes(source: str) -> list[str]:
    """``lc.<package>.<name>`` chains in ``source`` that reach past a package's public names (and, where
    ``<name>`` is a public module such as ``lc.sim.topologies``, past that module's own ``__all__``)."""
    import ast
    import importlib
    import types

    bad = []
    for node in ast.walk(ast.parse(source)):
        chain, part = [], node
        while isinstance(part, ast.Attribute):
            chain.insert(0, part.attr)
            part = part.value
        if not (isinstance(part, ast.Name) and part.id == "lc" and len(chain) >= 2):
            continue
        package = getattr(importlib.import_module("labcore"), chain[0], None)
        if not isinstance(package, types.ModuleType) or chain[0] == "exercises":
            continue
        public = getattr(package, "__all__", ())
        if chain[1] not in public:
            bad.append(".".join(["lc", *chain[:2]]))
        elif len(chain) >= 3 and isinstance(getattr(package, chain[1]), types.ModuleType):
            module = getattr(package, chain[1])
            if chain[2] not in getattr(module, "__all__", ()):
                bad.append(".".join(["lc", *chain[:3]]))
    return sorted(set(bad))


def test_the_attribute_check_sees_internal_modules():
    assert _internal_attributes("lc.live.magic.get_cluster(4)") == ["lc.live.magic"]
    assert _internal_attributes("lc.sim.topologies._private(8)") == ["lc.sim.topologies._private"]
    assert _internal_attributes("x = lc.sim.topologies.nvswitch(8); lc.live.get_cluster(4)") == []


def test_notebooks_import_only_public_names():
    import json
    import pathlib

    found = {}
    for path in sorted(pathlib.Path(__file__).parent.parent.glob("notebooks/*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] != "code":
                continue
            source = "".join(cell["source"])
            source = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
            bad = _internal_imports(source) + _internal_attributes(source)
            if bad:
                found.setdefault(path.name, []).extend(bad)
    assert not found, f"notebooks import internal modules: {found}"


def test_unknown_attribute_is_an_attribute_error():
    import labcore as lc

    try:
        _ = lc.nonexistent
    except AttributeError as err:
        assert "nonexistent" in str(err)
    else:
        raise AssertionError("lc.nonexistent should raise AttributeError")


def test_cli_without_arguments_prints_usage():
    out = subprocess.run([sys.executable, "-m", "labcore"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "bench" in out.stdout and "sim" in out.stdout
