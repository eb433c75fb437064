"""nvidia-smi topo -m parsing on recorded outputs, and the CPU summary used without GPUs."""
from pathlib import Path

import pytest

from labcore.live.sysinfo import cpu_summary, machine_topology
from labcore.readers.smi_topo import parse_topo

DATA = Path(__file__).parent / "data"


def test_nvlink_box_matrix_affinity_and_nics():
    topo = parse_topo((DATA / "topo_8gpu_nvlink.txt").read_text())
    assert topo.gpus == [f"GPU{i}" for i in range(8)]
    assert list(topo.matrix.index) == topo.gpus + ["NIC0", "NIC1"]
    assert topo.matrix.loc["GPU3", "GPU6"] == "NV18" and topo.matrix.loc["GPU2", "GPU2"] == "X"
    assert topo.matrix.loc["GPU5", "NIC1"] == "PIX" and topo.matrix.loc["GPU5", "NIC0"] == "SYS"
    assert topo.affinity.loc["GPU6", "NUMA Affinity"] == "1"
    assert topo.nics == {"NIC0": "mlx5_0", "NIC1": "mlx5_1"}
    links = topo.gpu_links()
    assert len(links) == 28 and set(links["meaning"]) == {"NVLink (18 links bonded)"}


def test_pcie_box_with_older_layout():
    topo = parse_topo((DATA / "topo_4gpu_pcie.txt").read_text())
    assert list(topo.matrix.columns) == ["GPU0", "GPU1", "GPU2", "GPU3", "mlx5_0"]
    links = topo.gpu_links().set_index(["a", "b"])
    assert links.loc[("GPU0", "GPU1"), "link"] == "PIX"
    assert links.loc[("GPU2", "GPU3"), "link"] == "NODE"
    # Same PCIe switch beats a hop between NUMA nodes.
    assert links.loc[("GPU0", "GPU1"), "speed_rank"] < links.loc[("GPU0", "GPU2"), "speed_rank"]
    assert "NUMA" in topo.describe("SYS")


def test_not_a_matrix_is_a_clear_error():
    with pytest.raises(ValueError, match="nvidia-smi topo -m"):
        parse_topo("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")


@pytest.mark.live
def test_cpu_summary_describes_this_machine():
    info = cpu_summary()
    assert info["logical_cores"] >= 1 and info["numa_nodes"] >= 1
    assert 0 < info["memory_available_gib"] <= info["memory_total_gib"]
    here = machine_topology()
    assert isinstance(here, dict) or len(here.gpus) >= 1


def test_current_driver_matrix_reads_gpu_numa_id_after_the_double_tab():
    # club-3090#1229 (2 x RTX 5090): nvidia-smi writes two tabs after NUMA Affinity; "GPU NUMA ID" was blank.
    topo = parse_topo((DATA / "topo_2gpu_5090_gpu_numa_id.txt").read_text())
    assert topo.gpus == ["GPU0", "GPU1"] and topo.matrix.loc["GPU0", "GPU1"] == "PHB"
    assert topo.affinity.loc["GPU1"].to_dict() == {"CPU Affinity": "0-63", "NUMA Affinity": "0", "GPU NUMA ID": "N/A"}
    p4 = parse_topo((DATA / "topo_1gpu_p4_numa_na.txt").read_text())   # HAMi#99: N/A, then two tabs, twice
    assert p4.affinity.loc["GPU0"].to_dict() == {"CPU Affinity": "0-7", "NUMA Affinity": "N/A", "GPU NUMA ID": "N/A"}


def test_underlined_header_of_a_terminal_keeps_gpu0():
    # On a terminal current drivers underline the header: "\t\x1b[4mGPU0\t...\tGPU NUMA ID\x1b[0m" (the codes as
    # nvidia-smi prints them, put into the real capture above; a pasted copy often keeps only "[4m").
    plain = (DATA / "topo_2gpu_5090_gpu_numa_id.txt").read_text()
    header = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"
    for start, end in (("\x1b[4m", "\x1b[0m"), ("[4m", "[0m")):
        text = plain.replace(header, f"\t{start}{header[1:]}{end}")
        topo = parse_topo(text)
        assert topo.gpus == ["GPU0", "GPU1"], start
        assert list(topo.affinity.columns) == ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]
        assert topo.affinity.loc["GPU0", "GPU NUMA ID"] == "N/A"


def test_a_copy_whose_tabs_became_spaces():
    topo = parse_topo(DATA / "topo_5gpu_4090_spaces.txt")              # club-3090#46, read from its path
    assert topo.gpus == [f"GPU{i}" for i in range(5)]
    assert topo.matrix.loc["GPU1", "GPU2"] == "PHB" and topo.matrix.loc["GPU0", "GPU4"] == "SYS"
    assert topo.affinity.loc["GPU0"].to_dict() == {"CPU Affinity": "8-15,24-31", "NUMA Affinity": "1",
                                                   "GPU NUMA ID": "N/A"}
    assert topo.gpu_links().set_index(["a", "b"]).loc[("GPU3", "GPU4"), "link"] == "PHB"


def test_topology_input_is_bounded(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="/dev/zero is a device"):
        parse_topo(Path("/dev/zero"))
    monkeypatch.setattr("labcore.readers.smi_topo.MAX_TEXT_BYTES", 1 << 20)
    with pytest.raises(ValueError, match="more than the 1 MiB"):
        parse_topo("\tGPU0\n" + "x" * (1 << 20))
    parse_topo("\tGPU0\nGPU0\t X \n" + "\n" * 200_000 + "NIC0: mlx5_0")   # blank lines: one pass, no hang
