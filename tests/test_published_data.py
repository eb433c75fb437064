"""The published nccl-tests tables (tests/data/published_index.json): cited, read, split before any fit.

Every table is quoted from a public thread, document or repository, names its source in its header and
is listed once in the index with its collective, machine and set; each split follows the rule written in
the index (and tests/data/README.md): the all_reduce tables' (held out at least a third, in every machine
family) and the other collectives' (per collective and family); every quote's numbers agree with themselves
(busbw = S / t x the collective's factor), so a copy slip or a misread column fails.
"""
import json
import math
import re
from pathlib import Path

import pytest

import published
from labcore.readers.nccl_log import parse

DATA = Path(__file__).parent / "data"
ENTRIES = published.index_entries()
BY_FILE = {e["file"]: e for e in ENTRIES}
ALL_REDUCE = published.index_entries(collective="all_reduce")
OTHERS = [e for e in ENTRIES if published.collective_of(e) != "all_reduce"]
README = (DATA / "README.md").read_text()
# a result line, launcher labels aside: size, count, type, [redop,] [root,] time, algbw, busbw, ... (old layouts
# print no redop column, or a blank one, for collectives that move data only)
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(float|double|half|bfloat16)\s+(?:(?:sum|none)\s+)?(?:-?\d+\s+)?([\d.]+)"
                  r"\s+([\d.]+)\s+([\d.]+)\s")
# what launchers put before and inside a line: whatever an orchestrator prints before Open MPI's first tag,
# then srun's " 0: " and Open MPI's tags
_PREFIX = re.compile(r"^.*?(?=\[\d+,\d+\]<std(?:out|err)>:)")
_LABEL = re.compile(r"^\s*\d+:\s|\[\d+,\d+\]<std(?:out|err)>:")


def test_at_least_fifteen_tables_and_every_published_file_is_indexed_once():
    assert len(ALL_REDUCE) >= 15 and len(OTHERS) >= 25
    assert len(BY_FILE) == len(ENTRIES), "a file is listed twice"
    on_disk = {p.name for p in DATA.glob("published_*.txt")}
    assert on_disk <= set(BY_FILE), f"not in the index: {sorted(on_disk - set(BY_FILE))}"
    for f in BY_FILE:
        assert (DATA / f).is_file(), f


@pytest.mark.parametrize("name", sorted(BY_FILE))
def test_every_table_cites_its_source_before_the_quote(name):
    entry = BY_FILE[name]
    lines = (DATA / name).read_text().splitlines()
    head = [ln for ln in lines[:12] if ln.startswith(("%%", "#"))]
    assert any(entry["source"] in ln for ln in head), f"{name}: the header does not name {entry['source']}"
    assert entry["source"].startswith("https://github.com/")
    if lines[0].startswith("%%"):
        assert lines[0].startswith("%% Source: "), name
        assert any(ln.startswith("%% ---- quoted text below") for ln in lines), name
    for key in ("gpu", "nodes", "gpus_per_node", "ranks", "network", "preset", "family"):
        assert entry[key] not in (None, ""), (name, key)
    assert entry["ranks"] <= entry["nodes"] * entry["gpus_per_node"], name


def test_each_table_is_in_exactly_one_set_and_a_third_is_held_out_in_every_family():
    assert {e["set"] for e in ENTRIES} <= set(published.SETS)
    assert {published.collective_of(e) for e in ENTRIES} <= {"all_reduce",
                                                             *published.split_of_collectives()["collectives"]}
    before = [e for e in ALL_REDUCE if e.get("added", "") <= published.split_rule()["date"]]
    held = sum(e["set"] == "held-out" for e in before)
    assert 3 * held >= len(before), f"{held} of {len(before)} held out"
    for family in published.split_rule()["families"]:
        group = [e for e in ALL_REDUCE if e["family"] == family]
        assert any(e["set"] == "held-out" for e in group), family
        assert any(e["set"] == "calibration" for e in group), family
    assert all(e["set"] == "calibration" for e in ENTRIES if e["fitted_before_split"])


def test_the_split_is_the_written_rule():
    """Re-derive the sets from the rule in the index: no table was moved by hand afterwards."""
    rule = published.split_rule()
    assert rule["date"] == "2026-12-01" and "starting with held-out" in rule["rule"]
    for family in rule["families"]:
        rest = sorted((e for e in ALL_REDUCE if e["family"] == family and not e["fitted_before_split"]
                       and "added" not in e), key=lambda e: (-e["sizes"], e["file"]))
        assert [e["set"] for e in rest] == [("held-out", "calibration")[i % 2] for i in range(len(rest))], family


def test_the_other_collectives_split_is_its_written_rule():
    """Per collective and family, most sizes first, alternating from held-out; tables added later are
    calibration (their split's "late" rule)."""
    rule = published.split_of_collectives()
    assert rule["date"] == "2026-12-05" and "starting with held-out" in rule["rule"]
    for collective in rule["collectives"]:
        for family in published.split_rule()["families"]:
            group = sorted((e for e in OTHERS if published.collective_of(e) == collective and e["family"] == family
                            and e["added"] <= rule["date"]), key=lambda e: (-e["sizes"], e["file"]))
            assert [e["set"] for e in group] == [("held-out", "calibration")[i % 2] for i in range(len(group))], \
                (collective, family)
    # broadcast and reduce have one table each: held out, and no calibration table of either exists
    for collective in ("broadcast", "reduce"):
        assert [e["set"] for e in OTHERS if published.collective_of(e) == collective] == ["held-out"]


def test_a_table_added_after_the_split_is_calibration_and_leaves_the_held_out_set_alone():
    rule = published.split_rule()
    assert "never enters it" in rule["late"] and "never enters it" in published.split_of_collectives()["late"]
    late = [e for e in ALL_REDUCE if "added" in e]
    assert all(e["added"] > rule["date"] and e["set"] == "calibration" for e in late), late
    later = [e for e in OTHERS if e["added"] > published.split_of_collectives()["date"]]
    assert later and all(e["set"] == "calibration" for e in later), later
    held = sorted(e["file"] for e in ALL_REDUCE if e["set"] == "held-out")
    assert len(held) == 8 and "published_allreduce_aws_p5_h100_2node_efa.txt" in held


def test_the_readme_lists_every_table_with_its_set():
    for e in ENTRIES:
        line = next((ln for ln in README.splitlines() if f"`{e['file']}`" in ln and ln.startswith("|")), None)
        assert line is not None, f"README.md does not list {e['file']}"
        assert f"| {e['set']} |" in line, f"README.md and the index disagree on {e['file']}"
    assert "2026-12-01" in README and published.split_rule()["rule"] in README
    assert published.split_rule()["late"] in README
    assert published.split_of_collectives()["rule"] in README and published.split_of_collectives()["late"] in README


def _quoted_rows(name):
    """Result lines of a quote with launcher labels taken off: (size, time, algbw, busbw)."""
    rows = []
    for line in (DATA / name).read_text().splitlines():
        m = _ROW.match(_LABEL.sub(" ", _PREFIX.sub("", line, count=1)))
        if m and not line.startswith("%%"):
            rows.append(tuple(float(m.group(i)) for i in (1, 4, 5, 6)))
    return rows


@pytest.mark.parametrize("name", sorted(f for f, e in BY_FILE.items() if e["format"] == "nccl-tests"))
def test_every_quote_agrees_with_itself(name):
    """algbw = S / t and busbw = algbw x the collective's factor (2(n-1)/n for all_reduce) on every quoted
    line (the printed 2 decimals and nccl-tests' own rounding allowed): the rank count in the index is right
    and nothing was mistyped."""
    factor = published.busbw_factor(BY_FILE[name])
    rows = _quoted_rows(name)
    assert len(rows) >= 3, name
    for size, t, algbw, busbw in rows:
        alg = size / (t * 1e3)
        assert abs(alg - algbw) <= 0.006 + 0.006 * alg + (0.05 * alg if t >= 1e4 else 0), (name, size, t, algbw)
        assert abs(alg * factor - busbw) <= 0.011 + 0.004 * busbw, (name, size, busbw)


@pytest.mark.parametrize("name", sorted(f for f, e in BY_FILE.items() if e["reader"].startswith("ok")))
def test_the_labs_reader_reads_every_table_it_should(name):
    entry = BY_FILE[name]
    rows = published.published_rows(entry)
    assert len(rows) == entry["sizes"], (name, len(rows), entry["sizes"])
    assert published.arithmetic_slips(rows, entry["ranks"], published.collective_of(entry)) == [], name
    assert all(r["time_us"] > 0 for r in rows)


def test_a_misread_column_is_caught_by_the_arithmetic_check():
    """The A4 page's header says 'wrong' for '#wrong'; the reader (as of the split) takes its in-place
    group one column off. The check the report relies on notices instead of comparing garbage."""
    entry = BY_FILE["published_allreduce_dstack_gcp_a4_b200_2node_roce.txt"]
    good = [dict(size=1 << 20, time_us=100.0, busbw=1048576 / 1e5 * 2 * 15 / 16, from_times=True)]
    assert published.arithmetic_slips(good, 16) == []
    assert published.arithmetic_slips([dict(good[0], busbw=good[0]["busbw"] * 1.5)], 16) == [1 << 20]
    if entry["reader"].startswith("misreads"):
        result = published.table_ratios(entry)
        assert result["status"].startswith(("reader misreads", "ok")), result["status"]


@pytest.mark.parametrize("name", sorted(f for f, e in BY_FILE.items() if e["format"] == "busbw-table"))
def test_busbw_tables_hold_the_powers_of_two_from_1_kib(name):
    rows = published.published_rows(BY_FILE[name])
    assert [r["size"] for r in rows] == [1024 << i for i in range(len(rows))]
    assert len(rows) == BY_FILE[name]["sizes"] >= 20
    assert all(r["busbw"] > 0 for r in rows)


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("nccl_graph_*.log")))
def test_graph_logs_cite_an_issue_and_hold_the_graphs_nccl_printed(name):
    lines = (DATA / name).read_text().splitlines()
    assert lines[1].startswith("# source: NVIDIA/") and "https://github.com/" in lines[1], name
    log = parse("\n".join(lines))
    assert log.found and len(log.graphs) >= 1, name
    g = log.graphs.iloc[0]
    assert g["channels"] >= 1 and g["bw_intra"] > 0 and g["type_intra"] in ("NVL", "SYS", "PIX", "PXB", "PHB")


def test_the_p5_info_excerpt_gives_its_channels_and_nodes():
    log = parse((DATA / "infolog_aws_p5_h100_2node_efa.log").read_text())
    assert log.version == "2.22.3+cuda12.2"
    assert log.channels == 16 and len(log.rings) == 16
    assert "Internode latency set at 75.0 us" in (DATA / "infolog_aws_p5_h100_2node_efa.log").read_text()


def test_the_comparison_on_one_calibration_table():
    """Simulated / published busbw on the Azure ND H200 v5 table: every size compared, finite ratios,
    the band summary's counts add up."""
    entry = BY_FILE["published_allreduce_azure_nd_h200_v5.txt"]
    result = published.table_ratios(entry)
    assert result["status"] == "ok" and not result["errors"]
    assert len(result["rows"]) == 24
    assert all(math.isfinite(r[3]) and r[3] > 0 for r in result["rows"])
    summary = published.band_summary(result["rows"])
    assert sum(s["n"] for s in summary.values()) == 24
    assert all(s["min"] <= s["median"] <= s["max"] and s["within25"] <= s["within40"] <= s["n"]
               for s in summary.values())


def test_a_preset_the_registry_lacks_falls_back_to_the_stand_in_and_says_so():
    entry = dict(BY_FILE["published_allreduce_azure_nd_a100_v4.txt"])
    topo, how = published.topology_for(entry)
    if how.startswith("no preset yet"):
        assert topo is not None and "stand-in nvswitch(gpus=8)" in how
        assert topo.ranks == 8
    entry.update(preset="no_such_machine", stand_in=None)
    assert published.topology_for(entry) == (None, "no preset yet (no_such_machine)")


def test_the_index_is_plain_json_with_one_entry_per_line_of_facts():
    raw = json.loads((DATA / "published_index.json").read_text())
    assert set(raw) == {"split", "tables", "split_collectives"}
    with pytest.raises(ValueError, match="set must be one of"):
        published.index_entries("test")
