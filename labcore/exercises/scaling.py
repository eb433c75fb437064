"""Exercises for notebook 07 (scaling out): bytes between nodes, SHARP, NIC units, small messages.

- :data:`q_hierarchical_bytes`: what one GPU's NIC sends in a hierarchical all-reduce;
- :data:`q_sharp_bytes`: what a NIC sends up with in-network reduction;
- :data:`q_nic_gbytes`: a NIC's line rate in Gb/s to achievable GB/s;
- :data:`q_sharp_gain`: how much SHARP raised busbw in the published measurement;
- :data:`q_nic_per_gpu`: per-GPU NIC throughput behind a multi-node busbw;
- :data:`q_small_message`: the fastest algorithm for 8 KiB on 64 nodes, by simulation.

Example
-------
>>> q_sharp_bytes.check(1 << 20)
SHARP: bytes up per NIC: correct!
"""
from __future__ import annotations

import functools

from labcore.exercises.answers import as_text, spelling
from labcore.exercises.core import CustomExercise, Incorrect
from labcore.exercises.values import StatedValue

__all__ = ["q_hierarchical_bytes", "q_sharp_bytes", "q_nic_gbytes", "q_sharp_gain", "q_nic_per_gpu",
           "q_small_message", "fastest_small_message"]


def _hier(size, nodes, gpus_per_node):
    from labcore.sim.apps.scaleout import internode_bytes_per_gpu

    return internode_bytes_per_gpu("hierarchical", size, nodes, gpus_per_node)


q_hierarchical_bytes = StatedValue(
    "Hierarchical: bytes between nodes",
    "A hierarchical all-reduce of S = {size} bytes on {nodes} nodes of {gpus_per_node} GPUs: reduce-scatter "
    "inside each node, ring all-reduce across nodes (one ring per local rank, each on its GPU's own NIC), "
    "all-gather inside. How many bytes does one GPU's NIC send to other nodes?",
    expected=_hier,
    given={"size": 1 << 30, "nodes": 4, "gpus_per_node": 8},
    rtol=1e-3, unit="bytes", form="a number of bytes (4 significant figures will do, e.g. 1.234e8)",
    mistakes=[(lambda size, nodes, gpus_per_node: 2 * (nodes - 1) / nodes * size,
               "That is what a NIC would send if it carried the whole buffer across. After the reduce-scatter "
               "inside the node, how much of the buffer is each GPU responsible for?"),
              (lambda size, nodes, gpus_per_node: 2 * (nodes * gpus_per_node - 1) / (nodes * gpus_per_node) * size,
               "That is a flat ring's per-rank count over all the GPUs; only the cross-node phase uses the NIC, "
               "and it runs on one slice per GPU."),
              (lambda size, nodes, gpus_per_node: (nodes - 1) / nodes * size / gpus_per_node,
               "That counts only the cross-node reduce-scatter; the cross-node all-gather sends as much again."),
              (lambda size, nodes, gpus_per_node: 2 * size / gpus_per_node,
               "A ring across k nodes never sends the piece a node keeps: in each of its two phases a GPU sends "
               "(k-1)/k of its slice, not all of it."),
              (lambda size, nodes, gpus_per_node: 2 * (nodes - 1) / nodes * 1e9 / gpus_per_node,
               "S is 2**30 bytes (1 GiB), not 1e9: use the S the question gives.")],
    hints=["Only the middle phase crosses nodes. Which data does GPU l of a node hold after the "
           "reduce-scatter inside its node?",
           "Each GPU holds a 1/g slice; the ring across k nodes sends 2(k-1)/k of what it all-reduces."],
    solution="2 * (k - 1) / k * S / g  =  2 * 3/4 * 2**30 / 8 = 201,326,592 bytes: the 1/g slice, ring-all-reduced "
             "across k nodes. A flat ring would send 2(n-1)/n x S per rank instead, g times more through the NICs.",
    correct_example=2 * 3 / 4 * (1 << 30) / 8,
    wrong_examples=[2 * 3 / 4 * (1 << 30), 2 * 31 / 32 * (1 << 30), 3 / 4 * (1 << 30) / 8, 2 * (1 << 30) / 8,
                    2 * 3 / 4 * 1e9 / 8],
)


q_sharp_bytes = StatedValue(
    "SHARP: bytes up per NIC",
    "{nodes} nodes, one GPU each, all-reduce S = {size} bytes with in-network reduction (the switch adds "
    "what arrives and sends the sum back). How many bytes does each NIC send up into the switch?",
    expected=lambda size, nodes: float(size),
    given={"size": 1 << 20, "nodes": 16},
    rtol=1e-3, unit="bytes", form="a number of bytes (4 significant figures will do)",
    mistakes=[(lambda size, nodes: 2 * (nodes - 1) / nodes * size,
               "That is the ring's count: a ring must pass partial sums around. With the switch doing the "
               "adding, how many times does each byte of a rank's input need to leave it?"),
              (lambda size, nodes: 2.0 * size,
               "Up and down are two directions of the link: count only what goes up."),
              (lambda size, nodes: size / nodes,
               "The switch reduces whole buffers: no rank sends only a slice.")],
    hints=["Each rank's input goes to the switch; the switch's sum comes back.",
           "Every byte of the input crosses the NIC up once; nothing else goes up."],
    solution="S (and S down): 1,048,576 bytes each way, whatever the node count, against the ring's "
             "2(n-1)/n x S = 1.875 x S each way on 16 nodes. The wire bytes roughly halve.",
    correct_example=float(1 << 20),
    wrong_examples=[2 * 15 / 16 * (1 << 20), 2.0 * (1 << 20), (1 << 20) / 16],
)


q_nic_gbytes = StatedValue(
    "Gb/s to GB/s",
    "An NDR InfiniBand NIC is sold as {gbps} Gb/s. If about {efficiency:.0%} of the line rate is achievable, "
    "how many GB/s per direction should one NIC move in an all-reduce (GB = 1e9 bytes)?",
    expected=lambda gbps, efficiency: gbps / 8 * efficiency,
    given={"gbps": 400, "efficiency": 0.8},
    rtol=0.01, unit="GB/s",
    mistakes=[(lambda gbps, efficiency: gbps * efficiency, "Those are gigabits per second: a byte is 8 bits."),
              (lambda gbps, efficiency: gbps, "That is the line rate in gigabits: convert to bytes and to "
               "what is achievable."),
              (lambda gbps, efficiency: gbps / 8, "That is the line rate: protocols and headers leave less."),
              (lambda gbps, efficiency: gbps / 8 * efficiency * 2, "NIC rates are per direction already: "
               "do not add the two directions."),
              (lambda gbps, efficiency: gbps * 1e9 / 8 * efficiency / 2 ** 30,
               "That is in GiB/s (2**30 bytes); the question counts GB = 1e9 bytes, as nccl-tests does.")],
    hints=["Divide bits by 8 for bytes.", "Then multiply by the achievable fraction."],
    solution="400 Gb/s / 8 = 50 GB/s line rate per direction; x 0.8 = 40 GB/s. (GTC24 S62129 measured 48 GB/s "
             "busbw on one 400 Gb RDMA NIC, 96%; ~80% is the rule of thumb for a first estimate.)",
    correct_example=40.0,
    wrong_examples=[320.0, 400.0, 50.0, 80.0, 40e9 / 2 ** 30],
)


q_sharp_gain = StatedValue(
    "What SHARP bought",
    "GTC24 S62129 measured all_reduce busbw on DGX H100 nodes with 8 x 400 Gb/s InfiniBand: {ring:g} GB/s "
    "with NCCL's rings, {sharp:g} GB/s with SHARP. By what factor did SHARP raise busbw?",
    expected=lambda ring, sharp: sharp / ring,
    given={"ring": 380.0, "sharp": 480.0},
    rtol=0.01,
    mistakes=[(2.0, "2x is what halving the NIC bytes would give if nothing else took time. Use the two "
                    "measured figures."),
              (lambda ring, sharp: ring / sharp, "That is below 1: SHARP made it faster, not slower."),
              (lambda ring, sharp: (sharp - ring) / ring, "That is the gain as a fraction; the question asks "
                                                          "for the factor (new / old)."),
              (lambda ring, sharp: 100 * (sharp - ring) / ring, "That is the gain in percent; the question asks "
                                                                "for the factor (new / old).")],
    hints=["A factor says how many times larger the new figure is than the old one.",
           "Divide the SHARP figure by the ring figure."],
    solution="480 / 380 = 1.26: +26%, not 2x. The NIC bytes halve, but the reduce-scatter and all-gather inside "
             "each node still cross NVLink, and the fixed costs per step do not shrink; NVIDIA's and "
             "ml-engineering's measurements put SHARP's gain at +25-30%.",
    correct_example=480 / 380,
    wrong_examples=[2.0, 380 / 480, 100 / 380, 10000 / 380],
)


q_nic_per_gpu = StatedValue(
    "NIC throughput behind busbw",
    "A hierarchical all-reduce on {nodes} nodes of {gpus_per_node} GPUs (one NIC per GPU) reaches busbw {busbw:g} "
    "GB/s. How many GB/s does each GPU's NIC move? (ml-engineering: per-accelerator = busbw x (k-1)/(n-1); "
    "decide what k and n count.)",
    expected=lambda busbw, nodes, gpus_per_node: busbw * (nodes - 1) / (nodes * gpus_per_node - 1),
    given={"busbw": 380.0, "nodes": 4, "gpus_per_node": 8},
    rtol=0.01, unit="GB/s",
    mistakes=[(lambda busbw, nodes, gpus_per_node: busbw * (gpus_per_node - 1) / (nodes * gpus_per_node - 1),
               "k is not the GPUs per node: the NIC carries the cross-node ring, whose length is the node count."),
              (lambda busbw, nodes, gpus_per_node: busbw / gpus_per_node,
               "busbw / g is what NCCL's rings put on each NIC (2(n-1)/n of a GPU's share). The hierarchical "
               "algorithm's NICs run only the ring across nodes, on a 1/g slice."),
              (lambda busbw, nodes, gpus_per_node: busbw,
               "busbw counts every byte a rank moves, NVLink included; only part of it crosses the NIC."),
              (lambda busbw, nodes, gpus_per_node: busbw * (nodes - 1) / (gpus_per_node - 1),
               "n is not the GPUs per node: busbw's 2(n-1)/n counts the ranks of the whole all-reduce."),
              (lambda busbw, nodes, gpus_per_node: busbw * (nodes - 1) / (nodes * gpus_per_node),
               "Close, but one factor of your formula is off. Write the NIC's bytes per second and busbw's "
               "definition out in full, with every factor, and divide one by the other before simplifying.")],
    hints=["Each GPU sends 2(k-1)/k x S/g over its NIC (hierarchically), with k nodes and g GPUs per node.",
           "busbw = S/t x 2(n-1)/n with n GPUs in all: divide the NIC bytes per second by it."],
    solution="380 x (4-1)/(32-1) = 36.8 GB/s per GPU's NIC: k = nodes, n = all GPUs. (2(k-1)/k x S/g)/t "
             "= busbw x (k-1)/(n-1) since g = n/k.",
    correct_example=380 * 3 / 31,
    wrong_examples=[380 * 7 / 31, 380 / 8, 380.0, 380 * 3 / 7, 380 * 3 / 32],
)


@functools.lru_cache(maxsize=None)
def fastest_small_message(nodes: int = 64, nbytes: int = 8 << 10) -> str:
    """The fastest of ring, hierarchical and double_tree for ``nbytes`` on ``nodes`` DGX H100 nodes (simulated)."""
    import labcore.sim as sim
    from labcore.sim.machines.presets import topology

    topo = topology("dgx_h100_ib", nodes=nodes)
    times = {a: sim.simulate("all_reduce", a, topo.ranks, nbytes, topology=topo, values=False).time_s
             for a in ("ring", "hierarchical", "double_tree")}
    return min(times, key=times.get)


# how learners name the three algorithms: "tree" and "binary tree" can only mean the double binary tree here
_ALGORITHM_NAMES = {"ring": "ring", "flat ring": "ring", "hierarchical": "hierarchical",
                    "double tree": "double_tree", "double binary tree": "double_tree", "tree": "double_tree",
                    "binary tree": "double_tree", "doubletree": "double_tree"}


def _small_message(answer) -> None:
    text = as_text(answer)
    if text is None:
        raise Incorrect("your answer is not an algorithm's name: answer with text, e.g. 'ring'.")
    name = _ALGORITHM_NAMES.get(spelling(text))
    if name is None:
        raise Incorrect(f"{text!r} is not one of 'ring', 'hierarchical', 'double_tree' (any case; 'tree' or "
                        "'double binary tree' name the last).")
    if name == fastest_small_message():
        return None
    if name == "ring":
        raise Incorrect("not the fastest here: the flat ring takes 2(n-1) = 1022 steps on 512 GPUs, each paying a "
                        "latency, and at 8 KiB that is nearly all of its time. Simulate the three and compare time_s.")
    raise Incorrect("not the fastest here: count the steps on the hierarchical algorithm's longest path (inside "
                    "the nodes and across them), each paying a latency, or simulate the three and compare time_s.")


q_small_message = CustomExercise(
    "8 KiB on 64 nodes",
    "On 64 DGX H100 nodes (512 GPUs; lc.sim.presets.topology('dgx_h100_ib', nodes=64)), which all-reduce is "
    "fastest for an 8 KiB message: 'ring', 'hierarchical' or 'double_tree'? Simulate with values=False. "
    "(Answer with the name as text, in any case.)",
    checker=_small_message,
    expects="an algorithm's name as text",
    hints=["At 8 KiB the time is nearly all latency: count the steps each algorithm takes.",
           "A ring takes 2(n-1) steps; a tree about 2 log2(n)."],
    solution="topo = lc.sim.presets.topology('dgx_h100_ib', nodes=64)\n"
             "{a: lc.sim.simulate('all_reduce', a, 512, 8192, topology=topo, values=False).time_s\n"
             " for a in ('ring', 'hierarchical', 'double_tree')}\n"
             "# the double binary tree: ~2 log2(n) latency-bound steps instead of the ring's 1022",
    correct_example="double_tree",
    wrong_examples=["ring", "hierarchical", 3],
)
