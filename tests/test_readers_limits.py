"""Every reader is bounded: what is not a regular file, or is over 64 MiB, is refused in one line before
anything is read (read_nccl_tests, nccl_log.parse/recorded, parse_topo, baselines: labcore.files)."""
import os
from pathlib import Path

import pytest

import labcore as lc
from labcore import files
from labcore.readers import nccl_log
from labcore.readers.smi_topo import parse_topo

DATA = Path(__file__).parent / "data"


def _one_line(exc) -> str:
    text = str(exc.value)
    assert "\n" not in text and text
    return text


def test_a_device_a_fifo_or_a_folder_is_refused_unread(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)                                    # no writer: opening it to read would wait forever
    for source, message in ((Path("/dev/zero"), "/dev/zero is a device, not a file of nccl-tests output"),
                            (fifo, f"{fifo} is a pipe (FIFO), not a file of nccl-tests output"),
                            (tmp_path, "is a folder")):
        with pytest.raises(ValueError) as caught:
            lc.read_nccl_tests(source)
        assert message in _one_line(caught)
    with pytest.raises(ValueError, match="/dev/zero is a device"):
        lc.read_nccl_tests("/dev/zero")          # a path given as a string too


def test_a_file_over_the_limit_is_refused_before_reading(tmp_path):
    sparse = tmp_path / "huge.txt"
    with open(sparse, "wb") as f:
        f.truncate(65 << 20)                           # 65 MiB on paper, nothing on disk
    with pytest.raises(ValueError) as caught:
        lc.read_nccl_tests(sparse)
    assert f"{sparse} is 65.0 MiB, more than the 64 MiB a file of nccl-tests output may have" in _one_line(caught)
    with pytest.raises(ValueError, match="is 65.0 MiB, more than the 64 MiB"):
        parse_topo(sparse)


def test_a_file_that_says_it_is_empty_is_read_only_up_to_the_limit(monkeypatch):
    proc = Path("/proc/self/maps")                     # st_size 0, yet it holds text
    if not proc.exists() or proc.stat().st_size != 0:
        pytest.skip("needs Linux's /proc")
    with pytest.raises(ValueError, match="holds more than the 0 MiB"):
        files.read_text_limited(proc, 16, "a file of nccl-tests output")


def test_text_given_as_a_string_or_bytes_is_bounded(monkeypatch):
    monkeypatch.setattr("labcore.readers.nccl_tests.MAX_TEXT_BYTES", 1 << 20)
    big = "x\n" * (1 << 19) + "y"
    for source in (big, big.encode()):
        with pytest.raises(ValueError) as caught:
            lc.read_nccl_tests(source)
        assert "more than the 1 MiB the lab reads" in _one_line(caught)
    monkeypatch.setattr("labcore.readers.nccl_log.MAX_TEXT_BYTES", 1 << 20)
    with pytest.raises(ValueError, match="the log given holds 1.0 M characters"):
        nccl_log.parse(big)


def test_the_shared_helper_names_each_problem(tmp_path):
    with pytest.raises(FileNotFoundError, match="no NCCL log at .*nope.log: give the file"):
        files.read_text_limited(tmp_path / "nope.log", what="an NCCL log", fix="give the file")
    with pytest.raises(ValueError, match="not a file name \\(it holds a NUL character\\)"):
        files.read_text_limited("a\0b")
    good = tmp_path / "ok.txt"
    good.write_bytes(b"caf\xc3")                        # cut inside a UTF-8 character
    assert files.read_text_limited(good) == "caf\ufffd"
    with pytest.raises(ValueError, match="more than the 0 MiB a file may have"):
        files.read_text_limited(good, limit=3)
    os.chmod(good, 0)
    if os.geteuid() != 0:
        with pytest.raises(ValueError, match="cannot read the file .*check the path and its permissions"):
            files.read_text_limited(good)


def test_bundled_lookups_stay_in_their_folder(tmp_path):
    (tmp_path / "a.log").write_text("x")
    outside = tmp_path.parent / f"{tmp_path.name}-secret.log"
    outside.write_text("secret")
    try:
        (tmp_path / "link.log").symlink_to(outside)
        assert files.bundled(tmp_path, "a.log") == tmp_path / "a.log"
        with pytest.raises(ValueError, match="no bundled file named 'link.log'"):
            files.bundled(tmp_path, "link.log")         # a link that leads out of the folder
        with pytest.raises(ValueError, match="a name, not a path"):
            files.bundled(tmp_path, f"../{outside.name}")
    finally:
        outside.unlink()
