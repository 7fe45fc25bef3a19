"""bench.core.busyhost: each rank's graph (tfpipe's default or the hand-tuned one) reads every other file of the
set, both the same records; two ranks started together read the whole set between them; the neighbours a
measurement runs beside, per kind, and the foreign TensorFlow matmul loop keeps computing."""
import os

import pytest
from pipeline_data import labels_of, write_indexed_set

from bench.core.busyhost import rank_graph, two_ranks

tf = pytest.importorskip("tensorflow")

N = 600


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("loaded")
    write_indexed_set(d, N)
    return str(d)


def test_rank_graphs_read_the_same_half_and_the_halves_partition_the_set(data):
    halves = []
    for index in (0, 1):
        default = sorted(labels_of(rank_graph(data, 32, "default", index)))
        tuned = sorted(labels_of(rank_graph(data, 32, "hand_tuned", index)))
        assert default == tuned and default
        halves.append(default)
    assert sorted(halves[0] + halves[1]) == list(range(N))
    assert sorted(labels_of(rank_graph(data, 32, "hand_tuned", 0, epochs=2))) == sorted(halves[0] * 2)


def test_unknown_rank_graph_is_named(data):
    with pytest.raises(ValueError, match="'fast'"):
        rank_graph(data, 32, "fast", 0)


def test_two_ranks_report_an_aggregate_rate_per_graph(data):
    r = two_ranks(data, 32, rounds=1)
    assert r["default_rec_s"] > 0 and r["hand_tuned_rec_s"] > 0
    assert r["ratio"] == pytest.approx(r["default_rec_s"] / r["hand_tuned_rec_s"])


@pytest.mark.parametrize("kind, count, marker", [("none", 0, None), ("busy", 2, "while True: pass"),
                                                 ("reader", 1, "build_dataset"), ("matmul", 1, "matmul")])
def test_neighbour_codes_per_kind(data, kind, count, marker):
    from bench.core.busyhost import neighbour_codes

    codes = neighbour_codes(kind, data, 32)
    assert len(codes) == count and all(marker in c for c in codes)


def test_unknown_neighbours_are_named(data):
    from bench.core.busyhost import neighbour_codes

    with pytest.raises(ValueError, match="matmul.*'gpu'"):
        neighbour_codes("gpu", data, 32)


def test_the_matmul_neighbour_keeps_computing():
    """The foreign TensorFlow process runs its loop (a broken loop would exit): alive, and its CPU time grows
    after TensorFlow's import."""
    import time

    from bench.core.busyhost import MATMUL_LOOP, neighbour_processes

    def cpu_s(pid):
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    with neighbour_processes([MATMUL_LOOP], settle_s=0) as (proc,):
        deadline = time.monotonic() + 120
        while proc.poll() is None and cpu_s(proc.pid) < 8 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert proc.poll() is None and cpu_s(proc.pid) >= 8
