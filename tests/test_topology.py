"""nvidia-smi topo -m parsing on recorded outputs, and the CPU summary used without GPUs."""
from pathlib import Path

import pytest

from labcore.live.topology import cpu_summary, machine_topology, parse_topo

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
