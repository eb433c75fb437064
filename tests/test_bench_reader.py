"""read_nccl_tests on real nccl-tests outputs quoted in public issues (tests/data/nccl_tests_*.txt)."""
import math
from pathlib import Path

import pandas as pd
import pytest

import labcore as lc
from labcore.bench.ops import OPS

DATA = Path(__file__).parent / "data"
FILES = sorted(DATA.glob("nccl_tests_*.txt"))
TABLES = [p for p in FILES if "nccl_debug_info" not in p.name]  # the other is a run's start: NCCL's log


def read(name, **kw):
    return lc.read_nccl_tests(DATA / name, **kw)


def quote(name):
    """A sample's quoted text alone (without its %% source lines), to join two real quotes."""
    return (DATA / name).read_text().split("---- quoted text below, unedited (trailing blanks removed) ----\n")[1]


def test_every_sample_cites_its_source_and_is_a_real_quote():
    assert len(FILES) >= 5
    nvidia = 0
    for path in FILES:
        head = path.read_text().splitlines()[0]
        assert head.startswith("%% Source: ") and ("issue" in head or "pull request" in head), path
        text = path.read_text()
        assert "https://github.com/" in text and "---- quoted text below" in text, path
        nvidia += "github.com/NVIDIA/nccl" in text
    assert nvidia >= 5


# The collective of samples whose text does not name it (one per table where several are pasted).
GIVEN = {"nccl-tests-128": "reduce_scatter", "nccl-tests-78": ["all_reduce", "alltoall"]}


@pytest.mark.parametrize("path", TABLES, ids=lambda p: p.stem)
def test_every_sample_reads_into_the_sweep_columns(path):
    op = None if "Collective test" in path.read_text() or "_perf" in path.read_text() else "all_reduce"
    op = next((given for key, given in GIVEN.items() if key in path.name), op)
    df = lc.read_nccl_tests(path, op=op)
    assert list(df.columns) == [*lc.bench.COLUMNS, "run"] and len(df) >= 2 and len(df) % 2 == 0
    assert set(df["placement"]) == set(lc.bench.PLACEMENTS) and (df["backend"] == "nccl").all()
    # The printed numbers agree with each other: algbw = size / time, to the printed precision
    # (but in the 2020 all_gather run, whose nccl-tests printed (n-1)/n of that as algbw).
    if "nccl-tests-37" in path.name:
        assert df["algbw"].iloc[0] == pytest.approx(4294967296 / 29122 / 1e3 * 7 / 8, abs=0.01)
        return
    moving = df[(df["size"] > 0) & (df["algbw"] >= 1)]
    assert ((moving["size"] / moving["time_us"] / 1e3 - moving["algbw"]).abs()
            <= 0.006 + 2e-3 * moving["algbw"]).all(), path.name


def test_current_layout_with_devices_version_and_mpi_ranks():
    df = read("nccl_tests_dgx-spark-playbooks-103_gb10_2node_v2_20.txt")
    assert df.attrs["version"] == "2.20.0"
    assert [d["host"] for d in df.attrs["devices"]] == ["spark-d708", "spark-dbf4"]  # two nodes
    assert df.attrs["params"]["warmup"] == 10 and df.attrs["params"]["iters"] == 100
    assert (df["ranks"] == 2).all() and df["size"].unique().tolist() == [8192, 16384, 32768, 65536]
    assert df.attrs["skipped"] == ["131072"]  # the quote ends inside this line
    assert df.loc[df["placement"] == "in-place", "time_us"].tolist() == [30.33, 30.75, 37.44, 64.71]


def test_wrong_elements_are_read_and_elided_lines_skipped():
    df = read("nccl_tests_nccl-1184_dgx_h100_wrong_elements.txt")
    assert df["op"].eq("all_reduce").all()  # from the all_reduce_perf command quoted above
    assert df["size"].unique().tolist() == [8, 262144, 524288]
    bad = df[df["size"] == 524288].set_index("placement")["wrong"]
    assert bad.to_dict() == {"out-of-place": 237858, "in-place": 238038}
    assert (df["ranks"] == 2).all()  # busbw = algbw: 2(n-1)/n = 1 only for n = 2


def test_nccl_info_lines_and_a_cut_line_are_skipped():
    df = read("nccl_tests_nccl-1161_h100_pcie_nvlink_pair.txt")
    assert df["size"].unique().tolist() == [1 << 30, 2 << 30] and (df["ranks"] == 2).all()
    assert df.loc[1, "time_us"] == 9291.5 and df.loc[2, "time_us"] == 18535.0
    assert len(df.attrs["skipped"]) == 1 and df.attrs["skipped"][0].endswith("116.")


def test_size_zero_lines_follow_the_16_byte_rule_of_the_real_run():
    df = read("nccl_tests_nccl-tests-128_reduce_scatter_size0_rows.txt", op="reduce_scatter")
    assert (df["ranks"] == 8).all()  # size / (count x 4 bytes)
    printed = df.loc[df["placement"] == "in-place", "size"].tolist()
    assert printed == [0, 0, 0, 0, 0, 128, 256]
    # The lab's port of nccl-tests' counts gives the same lines for -b 4 -e 256 -f 2 on 8 ranks.
    ours = [OPS["reduce_scatter"].printed_size(s, 8, 4) for s in (4, 8, 16, 32, 64, 128, 256)]
    assert ours == printed
    assert [OPS["reduce_scatter"].layout(s, 8, 4).count for s in (128, 256)] == [4, 8]
    assert df["repeat"].eq(0).all()  # growing sizes: one pass, even with five size-0 lines


def test_header_less_quote_needs_the_collective_and_infers_16_ranks():
    name = "nccl_tests_nccl-1244_h20_2node_nvls_rows_only.txt"
    with pytest.raises(ValueError, match="pass op="):
        read(name)
    df = read(name, op="all_reduce")
    assert (df["ranks"] == 16).all() and df["size"].iloc[-1] == 536870912
    assert df.loc[df["size"] == 536870912, "busbw"].tolist() == [312.75, 314.10]


def test_old_layout_without_root_and_with_error_column():
    df = read("nccl_tests_nccl-1244_h20_nvlstree_no_root_column.txt", op="all_reduce")
    assert (df["root"] == -1).all() and (df["redop"] == "sum").all()
    assert (df["wrong"] == -1).all() and df["note"].str.contains("largest deviation").all()
    assert (df["ranks"] == -1).all()  # tiny sizes print 0.00-0.02 GB/s: the rank count is not implied
    assert (read("nccl_tests_nccl-1244_h20_nvlstree_no_root_column.txt", op="all_reduce", ranks=16)
            ["ranks"] == 16).all()


def test_oldest_layout_without_redop_and_root():
    df = read("nccl_tests_nccl-tests-37_all_gather_v100_old_format.txt")
    assert df["op"].eq("all_gather").all() and (df["ranks"] == 8).all() and (df["redop"] == "none").all()
    assert df.attrs["footer"] == dict(out_of_bounds=2, ok=False, avg_busbw=128.942)


def test_several_reductions_in_one_output():
    df = read("nccl_tests_nccl-tests-167_max_then_min.txt", op="all_reduce")
    assert df["redop"].unique().tolist() == ["max", "min"] and df["repeat"].eq(0).all()
    assert (df["ranks"] == 16).all()


def test_launcher_tags_are_removed():
    df = read("nccl_tests_nccl-1453_mpirun_rank_tags.txt", op="all_reduce")
    assert len(df) == 20 and df["size"].iloc[0] == 1048576 and df.loc[0, "time_us"] == 1626.5
    assert (df["ranks"] == 24).all()
    df = read("nccl_tests_aws-k8s-tester-503_p5_openmpi_tags.txt", op="all_reduce")
    assert df["size"].unique().tolist() == [8, 16, 32] and (df["ranks"] == -1).all()


def test_open_mpi_tags_inside_a_line_are_taken_out_when_they_name_the_lines_rank():
    # Open MPI repeats "[1,0]<stdout>:" where a rank's line was flushed in pieces (KeitaW's p5 log)
    df = read("published_allreduce_keitaw_p5_h100_2node_efa.txt", op="all_reduce")
    assert len(df) == 64 and (df["ranks"] == 16).all() and df.attrs["skipped"] == []
    assert df.loc[df["placement"] == "in-place", "time_us"].iloc[:2].tolist() == [74.97, 63.31]
    # another rank's tag inside the line is two ranks' output interleaved: the line is not a result
    line = "[1,0]<stdout>:     1048576   262144  float  sum  -1[1,3]<stdout>:  122.1  8.59  16.10  0  122.3  8.58  16.08  0"
    header = "[1,0]<stdout>:#  size  count  type  redop  root  time  algbw  busbw  #wrong  time  algbw  busbw  #wrong"
    good = line.replace("[1,3]", "[1,0]")
    assert len(lc.read_nccl_tests(f"{header}\n{good}\n", op="all_reduce")) == 2
    with pytest.raises(ValueError, match="no nccl-tests result lines"):
        lc.read_nccl_tests(f"{header}\n{line}\n", op="all_reduce")


def test_an_orchestrators_prefix_before_open_mpis_tag_is_the_launchers():
    # SkyPilot streams every line as "(head, rank=0, pid=3808) [1,0]<stdout>:..." (skypilot-org/skypilot's GCP page)
    name = "published_allgather_skypilot_a3ultra_h200_2node_roce.txt"
    line = next(ln for ln in (DATA / name).read_text().splitlines() if ln.endswith("28.07    0.04    0.03      0"))
    assert line.startswith("(head, rank=0, pid=3808) [1,0]<stdout>:        1024")
    df = read(name, op="all_gather")
    assert len(df) == 48 and (df["ranks"] == 16).all() and df.attrs["skipped"] == []
    assert df.loc[df["placement"] == "in-place", "time_us"].iloc[0] == 28.07
    assert len(df.attrs["devices"]) == 16


def test_a_header_that_lost_its_hash_before_wrong_is_read_as_nccl_tests_prints_it():
    # dstack's GCP page drops the '#' of '#wrong'; before, the in-place group was read one column off
    df = read("published_allreduce_dstack_gcp_a4_b200_2node_roce.txt", op="all_reduce")
    inplace = df[df["placement"] == "in-place"]
    assert inplace["time_us"].iloc[0] == 167.6 and inplace["busbw"].iloc[0] == 93.86
    assert (df["wrong"] == 0).all()


def test_footer_is_read_and_step_bytes_sizes_kept():
    df = read("nccl_tests_nccl-tests-119_step_bytes_footer.txt", op="all_reduce")
    assert df.attrs["footer"] == dict(out_of_bounds=0, ok=True, avg_busbw=84.8558)
    sizes = df["size"].unique()
    assert ((sizes[1:] - sizes[:-1]) == 1048576).all()


def test_repeated_cycles_and_several_runs_are_told_apart():
    sample = (DATA / "nccl_tests_dgx-spark-playbooks-103_gb10_2node_v2_20.txt").read_text()
    body = [line for line in sample.splitlines() if not line.startswith("%%") and line != "      131072"]
    rows = [line for line in body if line.startswith(" ")]
    cycles = "\n".join(body + rows)  # nccl-tests -N 2: the size lines again
    df = lc.read_nccl_tests(cycles)
    assert df.groupby("repeat").size().tolist() == [8, 8]
    two = lc.read_nccl_tests("\n".join(body + [line.replace("all_reduce", "all_gather") for line in body]))
    assert two["op"].unique().tolist() == ["all_reduce", "all_gather"] and len(two.attrs["sections"]) == 2


def test_read_back_output_feeds_the_lab_like_a_sweep():
    df = read("nccl_tests_nccl-1244_h20_2node_nvls_rows_only.txt", op="all_reduce")
    table = lc.bench.format_table(df)
    assert "# Collective test concluded: all_reduce_perf" in table
    summary = lc.evidence.summarize(df)
    assert summary.attrs["time"] == "time_us" and (summary["repeats"] == 1).all()  # no medians: means
    assert math.isnan(df["median_us"].iloc[0])


def test_a_run_cut_before_its_first_result_is_refused_but_its_nccl_log_reads():
    from labcore.readers.nccl_log import parse

    path = DATA / "nccl_tests_nccl-tests-131_nccl_debug_info.txt"
    with pytest.raises(ValueError, match="no nccl-tests result lines"):
        lc.read_nccl_tests(path)
    log = parse(path.read_text())
    assert log.version == "2.16.5+cuda11.8"


def test_input_that_is_not_nccl_tests_output_is_refused():
    with pytest.raises(ValueError, match="no nccl-tests result lines"):
        lc.read_nccl_tests("hello\nworld\n")
    with pytest.raises(ValueError, match="neither nccl-tests output nor a file"):
        lc.read_nccl_tests("/no/such/file.txt")
    with pytest.raises(ValueError, match="unknown collective"):
        lc.read_nccl_tests("# Collective test starting: alltoallv_perf\n  8 2 float none -1 "
                                 "1.0 0.0 0.0 0 1.0 0.0 0.0 0\n")
    assert isinstance(read("nccl_tests_nccl-1161_h100_pcie_nvlink_pair.txt"), pd.DataFrame)


def test_srun_label_prefixes_are_removed():
    # srun --label puts " 0: " before every line; before, no result line was read at all.
    df = read("nccl_tests_rccl-1490_srun_label_all_gather.txt")
    assert df["op"].eq("all_gather").all()                  # from the srun ... all_gather_perf command
    assert (df["ranks"] == 32).all()                         # size / (count x 4 bytes): 4 nodes x 8 tasks
    assert df["size"].unique().tolist() == [65536, 131072, 262144, 524288, 1048576]
    assert df.loc[df["placement"] == "in-place", "time_us"].tolist() == [105.6, 202.6, 200.9, 678.9, 1304.0]
    assert len(df.attrs["skipped"]) == 1 and df.attrs["skipped"][0].startswith("2097152")


def test_two_tables_pasted_keep_their_rows_footers_and_collectives():
    name = "nccl_tests_nccl-tests-78_allreduce_then_alltoall_old_layout.txt"
    df = read(name, op=["all_reduce", "alltoall"])
    assert df.groupby("run")["op"].unique().map(list).tolist() == [["all_reduce"], ["all_to_all"]]
    alltoall = df[df["run"] == 1]
    # The old layout leaves alltoall's redop blank: the rows are kept, read as "none".
    assert len(alltoall) == 4 and (alltoall["redop"] == "none").all() and (alltoall["ranks"] == 64).all()
    assert alltoall.loc[alltoall["placement"] == "out-of-place", "time_us"].tolist() == [520935.0, 1041974.0]
    assert df.attrs["skipped"] == []
    # Each table's average stays with it (before, the alltoall's 0.507636 was the all_reduce's).
    assert [s["footer"]["avg_busbw"] for s in df.attrs["sections"]] == [4.32178, 0.507636]
    assert df.attrs["footer"]["avg_busbw"] == 4.32178
    assert [s["op"] for s in df.attrs["sections"]] == ["all_reduce", "all_to_all"]


def test_a_table_whose_rows_contradict_its_collective_is_refused_in_one_line():
    name = "nccl_tests_nccl-tests-78_allreduce_then_alltoall_old_layout.txt"
    with pytest.raises(ValueError, match=r"^table 2 \(its first result at line 27\) is not all_reduce "
                                         r"\(read from op=\): its rows name no reduction") as caught:
        read(name, op="all_reduce")
    assert "a list in the order of the tables" in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(ValueError, match="op names 1 collectives but the text holds 2 table"):
        read(name, op=["all_reduce"])
    # The same alltoall table quoted under nccl/issues/1184's all_reduce_perf command (two real quotes
    # joined): it is not read as all_reduce without a word.
    under = quote("nccl_tests_nccl-1184_dgx_h100_wrong_elements.txt")
    alltoall = quote(name).split("alltoall result")[1]
    with pytest.raises(ValueError, match=r"is not all_reduce \(read from the command quoted above it\): its rows "
                                         r"name no reduction \(redop blank\)"):
        lc.read_nccl_tests(under + alltoall)
    assert lc.read_nccl_tests(under + alltoall, op=["all_reduce", "alltoall"])["run"].max() == 1
    # A broadcast-sized table is not all_gather's: its sizes equal its counts.
    with pytest.raises(ValueError, match="its rows name the reduction sum"):
        read("nccl_tests_nccl-1244_h20_2node_nvls_rows_only.txt", op="all_gather")
    with pytest.raises(ValueError, match="its size 268435456 is 64 times its count of 4-byte elements"):
        lc.read_nccl_tests(alltoall.replace("float    ", "float  sum"), op="all_reduce")


def test_a_table_named_by_its_own_header_beside_another_command_is_read_so_and_noted():
    # A real paste whose own footer names all_reduce_perf, after a real quote whose command is
    # all_gather_perf (two quotes joined): read as all_reduce, and the other name is noted.
    command = quote("nccl_tests_rccl-1490_srun_label_all_gather.txt").split("There is")[0]
    runs = quote("nccl_tests_mooncake-3484_two_runs_pasted.txt")
    df = lc.read_nccl_tests(command + runs)
    assert df["op"].eq("all_reduce").all()
    assert df.attrs["notes"] == ["table 1 (its first result at line 7): read as all_reduce from its own 'Collective test' line; "
                                 "the command quoted above it says all_gather"]


def test_runs_pasted_one_after_another_keep_their_own_footer_and_version():
    df = read("nccl_tests_mooncake-3484_two_runs_pasted.txt")
    # The second run was quoted up to its devices: no results, so one run, and its version is not the first's.
    assert df["run"].eq(0).all() and len(df) == 8 and (df["ranks"] == 8).all()
    assert df.attrs["version"] is None and df.attrs["footer"]["avg_busbw"] == 102.829
    assert len(df.attrs["sections"]) == 1


def test_nccl_info_lines_between_result_lines_are_skipped():
    df = read("nccl_tests_nccl-tests-331_nccl_info_between_rows.txt", op="all_reduce")
    assert df["size"].unique().tolist() == [8, 16] and df.loc[1, "wrong"] == -1   # N/A in place
    assert df.attrs["skipped"] == ["32 8 f"]
