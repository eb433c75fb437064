"""labcore.validate: the shared checks of whole numbers, finite numbers and sizes (one grammar,
with nccl-tests' variant for -b/-e/-i), and the packages that read their inputs through it."""
import fractions

import numpy as np
import pytest

from labcore import validate
from labcore.bench.units import parse_size
from labcore.sim.cli import main as sim_main

def test_whole_numbers_take_numpy_integers_and_refuse_bools_floats_and_strings():
    assert validate.whole(np.int64(4)) == 4 and type(validate.whole(np.uint8(3))) is int
    for bad in (True, np.bool_(False), 2.0, "3", None, np.float64(1)):
        assert validate.whole(bad) is None
    assert validate.whole_number(np.int32(7), "ranks", least=1, most=8) == 7
    with pytest.raises(ValueError, match=r"^ranks must be a whole number from 1 to 8, not 9$"):
        validate.whole_number(9, "ranks", least=1, most=8)
    with pytest.raises(ValueError, match=r"^n must be a whole number >= 1, not True: give 2$"):
        validate.whole_number(True, "n", least=1, fix="give 2")
    with pytest.raises(ValueError, match=r"^root must be a whole rank number, not '0'$"):
        validate.whole_number("0", "root", must="a whole rank number")

def test_finite_numbers_take_numpy_and_fractions_and_refuse_nan_inf_bool_and_overflow():
    assert validate.real(np.float32(1.5)) == 1.5 and validate.real(fractions.Fraction(1, 4)) == 0.25
    for bad in (True, float("nan"), np.float64("inf"), "1", fractions.Fraction(10 ** 400, 3), None):
        assert validate.real(bad) is None
    assert validate.finite_number(0.5, "q", above=0, below=1) == 0.5
    with pytest.raises(ValueError, match=r"^q must be a finite number above 0 and below 1, not 1$"):
        validate.finite_number(1, "q", above=0, below=1)
    with pytest.raises(ValueError, match=r"^cap must be a finite number above 0, not -1.0$"):
        validate.positive_number(-1.0, "cap")
    long = "x" * 5000
    with pytest.raises(ValueError, match=r"\(5002 characters\)$") as caught:
        validate.positive_number(long, "cap")
    assert len(str(caught.value)) < 120            # a 5,000-character input does not fill the screen

@pytest.mark.parametrize("text,expected", [
    ("8", 8), ("64K", 64 << 10), ("64k", 64 << 10), ("64KiB", 64 << 10), ("64 MB", 64 << 20), ("1MiB", 1 << 20),
    ("1.5K", 1536), ("1e3", 1000), ("1T", 1 << 40), ("8B", 8), ("0", 0), (np.int64(4096), 4096), (10 ** 6, 10 ** 6),
])
def test_one_size_grammar(text, expected):
    assert validate.size(text) == expected
    if isinstance(text, str) and not set(text.upper()) & set("TIB"):
        assert validate.size(text, nccl_tests=True) == expected      # the variant agrees where both read it

@pytest.mark.parametrize("text,message", [
    ("0.3K", "307.2 bytes, not a whole number of bytes"), ("2kb x", "cannot read size"), ("8x", "cannot read size"),
    ("", "cannot read size"), ("-5", "non-negative"), ("nan", "finite"), ("inf", "finite"), (True, "not a number"),
    ("9E", "cannot read size"), ("1e30", "more than 2**63 bytes"),
])
def test_sizes_refused_in_one_line(text, message):
    with pytest.raises(ValueError, match="size") as caught:
        validate.size(text, "--size")
    assert message in str(caught.value) and str(caught.value).startswith("--size: ")
    assert "\n" not in str(caught.value)

def test_nccl_tests_variant_reads_as_parsesize_does():
    # nccl-tests' parsesize: K, M or G; whatever follows the letter is ignored; a fraction of a byte dropped.
    assert validate.size("0.3K", nccl_tests=True) == 307 == parse_size("0.3K")
    assert validate.size("2kb", nccl_tests=True) == 2048 and validate.size("2kx", nccl_tests=True) == 2048
    with pytest.raises(ValueError, match="cannot read size '1T'"):
        validate.size("1T", nccl_tests=True)            # nccl-tests knows no T

def test_sim_cli_reads_sizes_in_the_shared_grammar(capfd):
    assert sim_main(["all_reduce", "-n", "4", "--size", "1MiB", "--no-values"]) == 0
    assert "(1048576 B)" in capfd.readouterr().out
    assert sim_main(["all_reduce", "-n", "4", "--size", "1e3", "--no-values"]) == 0
    assert "(1000 B)" in capfd.readouterr().out
    with pytest.raises(SystemExit) as stop:
        sim_main(["all_reduce", "-n", "4", "--size", "0.3K"])
    assert stop.value.code == 2
    err = capfd.readouterr().err
    assert "not a whole number of bytes" in err and err.count("\n") == 1

def test_bench_and_evidence_read_through_the_shared_checks():
    import labcore as lc
    from labcore.bench import checks

    assert checks.check_factor(np.float32(1.5)) == 1.5
    with pytest.raises(ValueError, match="link_gbps must be a link speed in GB/s above 0, not True"):
        lc.evidence.busbw_fraction(None, 8, True)
    with pytest.raises(ValueError, match="q must be a fraction strictly between 0 and 1"):
        lc.evidence.quantile_interval([1.0], np.float64(1.0))
    assert lc.evidence.quantile_interval([1.0, 2.0, 3.0], np.float32(0.5))[0] == 2.0
