"""The %%ranks cell magic in a real IPython shell."""
import pytest
from IPython.testing.globalipapp import start_ipython

from labcore.live import magic

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def ip():
    shell = start_ipython()
    shell.run_line_magic("load_ext", "labcore")
    yield shell
    magic.close_all()


def test_cells_share_a_namespace_per_rank_and_pull_back(ip, capsys):
    ip.run_cell_magic("ranks", "2 --backend gloo", "x = torch.tensor([rank + 1.0])\n")
    ip.run_cell_magic("ranks", "2 --backend gloo --out x",
                      "dist.all_reduce(x)\nprint('sum', x.item())\nx.item() * 10\n")
    out = capsys.readouterr().out
    assert "[rank 0] sum 3.0" in out and "[rank 1] sum 3.0" in out
    assert "Out[rank 1]: 30.0" in out
    assert [t.item() for t in ip.user_ns["x"]] == [3.0, 3.0]


def test_each_rank_knows_its_place(ip):
    cluster = magic.get_cluster(2, "gloo")
    cluster.exec("me = (rank, world_size, str(device))")
    assert cluster.pull("me") == [(0, 2, "cpu"), (1, 2, "cpu")]
    cluster.push(n=5)
    assert cluster.exec("n * 2") == ["10", "10"]


def test_bad_line_shows_usage():
    with pytest.raises(ValueError, match="usage"):
        magic.parse_line("four")
    with pytest.raises(ValueError, match="at least 1 rank"):
        magic.parse_line("0")


def test_error_in_a_cell_names_the_rank(ip):
    from labcore.live import RankError

    with pytest.raises(RankError, match="rank 1 raised ZeroDivisionError"):
        magic.ranks("2 --backend gloo", "1 / (1 - rank)")


def test_pull_of_unknown_name_is_clear(ip):
    from labcore.live import RankError

    with pytest.raises(RankError, match="name 'nope' is not defined on rank 0"):
        magic.get_cluster(2, "gloo").pull("nope")


def test_hang_in_a_cell_points_at_the_cell():
    from labcore.live import CollectiveTimeout

    with pytest.raises(CollectiveTimeout) as err:
        magic.ranks("2 --backend gloo --timeout 2", "if rank == 0:\n    dist.recv(torch.zeros(1), src=1)\n")
    where = err.value.report.stuck[0]
    assert where.collective == "recv" and "%%ranks cell" in where.user_frame and "line 2" in where.user_frame


def test_ranks_on_a_named_cluster(ip, capsys):
    import labcore as lc

    with lc.Cluster(2, backend="gloo") as cl:
        ip.user_ns["mine"] = cl
        ip.run_cell_magic("ranks", "--on mine --out r", "r = rank + 100\n")
        assert ip.user_ns["r"] == [100, 101]
        with pytest.raises(ValueError, match="that cluster has 2 ranks"):
            magic.ranks("3 --on mine", "pass", ip.user_ns)
    with pytest.raises(ValueError, match="no cluster named 'nothing'"):
        magic.ranks("--on nothing", "pass", ip.user_ns)
    with pytest.raises(ValueError, match="needs the number of ranks"):
        magic.parse_line("--timeout 3")


def test_a_bad_out_name_or_backend_with_on_stops_the_cell_before_it_runs(ip, capsys):
    import labcore as lc

    ip.user_ns.pop("y", None)
    with pytest.raises(ValueError, match="--out needs a Python name"):
        ip.run_cell_magic("ranks", "2 --backend gloo --out 'not a name'", "print('the cell ran')\n")
    with pytest.raises(ValueError, match="--backend nccl cannot apply with --on"):
        ip.run_cell_magic("ranks", "--on mine2 --backend nccl", "print('the cell ran')\n")
    assert "the cell ran" not in capsys.readouterr().out
    with lc.Cluster(2, backend="gloo") as cl:
        ip.user_ns["mine2"] = cl
        ip.run_cell_magic("ranks", "--on mine2", "x = rank\n")
        ip.user_ns["x"] = "before"
        with pytest.raises(Exception, match="'y' is not defined"):
            ip.run_cell_magic("ranks", "--on mine2 --out x --out y", "x = rank + 10\n")
        assert ip.user_ns["x"] == "before" and "y" not in ip.user_ns   # all or nothing
