"""The package surface: lazy parts, aliases, and a light import."""
import subprocess
import sys


def test_import_labcore_does_not_import_torch():
    code = "import sys, labcore; assert 'torch' not in sys.modules, 'import labcore pulled in torch'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_bench_is_one_module_under_both_names():
    import labcore as lc
    import labcore.live.bench
    from labcore.bench import sweep

    assert lc.bench is labcore.live.bench and sweep is labcore.live.bench.sweep


def test_unknown_attribute_is_an_attribute_error():
    import labcore as lc

    try:
        lc.nonexistent
    except AttributeError as err:
        assert "nonexistent" in str(err)
    else:
        raise AssertionError("lc.nonexistent should raise AttributeError")


def test_cli_without_arguments_prints_usage():
    out = subprocess.run([sys.executable, "-m", "labcore"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "bench" in out.stdout and "sim" in out.stdout
