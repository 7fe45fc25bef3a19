"""bench.core.busyhost: each rank's graph (tfpipe's default or the hand-tuned one) reads every other file of the
set, both the same records; two ranks started together read the whole set between them."""
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
