"""pipeline.plan.tuning: paired-round statistics on synthetic timings, the round runner on a fake clock, and a
tiny real tuning run (store, lookup, on-first-use, never by surprise in the default)."""
from __future__ import annotations

import contextlib
import json
import os

import numpy as np
import pytest
from pipeline_data import labels_of, write_indexed_set

from converters.util.errors import TfpipeError
from pipeline import PipelineSpec, build_dataset, tune
from pipeline.plan import tuning as T
from pipeline.plan.readplan import candidates
from pipeline.plan.tunestore import load_result

N = 800
B = 32


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("indexed")
    write_indexed_set(d, N)
    return str(d)


# -- statistics ---------------------------------------------------------------------------------------

def test_median_and_rotation():
    assert T.median([3, 1, 2]) == 2 and T.median([4, 1, 3, 2]) == 2.5
    with pytest.raises(ValueError):
        T.median([])
    names = ["a", "b", "c"]
    orders = [T.rotation(names, r) for r in range(3)]
    assert orders == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]]
    for pos in range(3):                       # every candidate takes every position once
        assert sorted(o[pos] for o in orders) == names


def test_paired_scores_cancel_noise_shared_by_a_round():
    slow = [1.0, 0.3, 2.0, 0.5, 1.7]          # the whole machine's speed, per round (other jobs come and go)
    rates = {"rule": [100 * s for s in slow], "b": [110 * s for s in slow], "c": [95 * s for s in slow]}
    scores = T.paired_scores(rates, "rule")
    assert scores == pytest.approx({"rule": 1.0, "b": 1.1, "c": 0.95})
    assert T.pick_winner(scores) == "b"
    # unpaired medians would rank c above b: c's runs happened to land in the fast rounds
    lucky = {"rule": rates["rule"], "b": rates["b"], "c": [95 * s for s in (2.0, 1.7, 2.0, 1.7, 2.0)]}
    assert T.median(lucky["c"]) > T.median(lucky["b"])
    assert T.pick_winner(T.paired_scores({**lucky, "c": [95 * s for s in slow]}, "rule")) == "b"


def test_one_lucky_round_does_not_win():
    rates = {"rule": [100, 100, 100, 100, 100], "steady": [105, 104, 106, 105, 105], "spiky": [300, 90, 95, 92, 94]}
    assert max(rates["spiky"]) > max(rates["steady"])      # best-of-rounds would pick "spiky"
    assert T.pick_winner(T.paired_scores(rates, "rule")) == "steady"


@pytest.mark.parametrize("ratios, noise", [
    ([1.01] * 7, T.NOISE_FLOOR),                       # no scatter: the floor
    ([1.0, 1.1, 0.9, 1.2, 0.8], 0.1),                  # median 1.0, deviations 0, .1, .1, .2, .2
    ([], T.NOISE_FLOOR),
])
def test_round_noise(ratios, noise):
    assert T.round_noise(ratios) == pytest.approx(noise)


def test_ties_go_to_the_first_and_errors():
    assert T.pick_winner({"rule": 1.0, "x": 1.0}) == "rule"
    with pytest.raises(ValueError, match="paired"):
        T.paired_scores({"rule": [1.0, 2.0], "x": [1.0]}, "rule")
    with pytest.raises(ValueError, match="reference"):
        T.paired_scores({"x": [1.0]}, "rule")
    with pytest.raises(ValueError):
        T.pick_winner({})


# -- the round runner, on a fake clock ------------------------------------------------------------------

class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _fake_factories(clock, cost_ms, round_speed, log, startup_ms=0.0):
    """Each candidate's batches cost ``cost_ms`` (× the current round's slowdown) on the fake clock."""
    calls = {"n": 0}

    def make(name):
        def factory():
            r = calls["n"] // len(cost_ms)
            calls["n"] += 1
            log.append((r, name))
            clock.t += startup_ms / 1000

            def batches():
                while True:
                    clock.t += cost_ms[name] * round_speed[r % len(round_speed)] / 1000
                    yield np.zeros((B, 1))
            return batches()
        return factory
    return {n: make(n) for n in cost_ms}


def test_run_rounds_rates_order_and_pairing():
    clock, log = FakeClock(), []
    cost = {"rule": 2.0, "fast": 1.0, "slow": 4.0}
    facs = _fake_factories(clock, cost, round_speed=[1.0, 3.0, 1.5], log=log)
    rates = T.run_rounds(facs, rounds=3, window=10, warmup=2, clock=clock)
    assert [name for r, name in log] == ["rule", "fast", "slow", "fast", "slow", "rule", "slow", "rule", "fast"]
    assert rates["fast"][1] == pytest.approx(B / (1.0 * 3.0 / 1000))
    assert T.paired_scores(rates, "rule") == pytest.approx({"rule": 1.0, "fast": 2.0, "slow": 0.5})


def test_run_rounds_fits_the_budget():
    clock, log = FakeClock(), []
    cost = {"rule": 2.0, "b": 2.0}
    facs = _fake_factories(clock, cost, round_speed=[1.0], log=log, startup_ms=50)
    # a 1000-batch window takes 4 s per round: 7 of them fit 30 s once the windows shrink after round 1
    rates = T.run_rounds(facs, rounds=7, window=1000, clock=clock, budget_s=30.0, min_rounds=3)
    assert len(rates["rule"]) == len(rates["b"]) == 7 and 29.0 < clock.t <= 30.5
    # a budget the first round already overruns: the minimum rounds, with the smallest windows after it
    clock.t = 0.0
    facs = _fake_factories(clock, cost, round_speed=[1.0], log=log, startup_ms=50)
    rates = T.run_rounds(facs, rounds=7, window=1000, clock=clock, budget_s=3.0, min_rounds=3)
    assert len(rates["rule"]) == 3 and clock.t < 4.5
    assert T.next_window(100, timed=2.0, overhead=0.5, target=1.5) == 50
    assert T.next_window(100, timed=1.0, overhead=0.0, target=100) == 400     # grows at most 4×
    assert T.next_window(100, timed=1.0, overhead=5.0, target=1.0) == T.MIN_WINDOW


def test_time_one_stops_at_max_seconds():
    clock = FakeClock()
    facs = _fake_factories(clock, {"x": 100.0}, [1.0], log=[])
    records, seconds = T.time_one(facs["x"], window=1000, warmup=1, max_seconds=0.5, clock=clock)
    assert records == 5 * B and seconds == pytest.approx(0.5)


# -- a real (tiny) tuning run ---------------------------------------------------------------------------

def test_tune_stores_a_winner_the_default_then_uses(data, store):
    report = tune(data, B, seconds=4, rounds=3)
    cands = candidates(PipelineSpec.from_manifest(data, B, tune="off"))
    assert len(report.rows) == len(cands) and report.winner in cands and report.reference == cands[0]
    assert {r["phase"] for r in report.rows} == {"final", "screen"}
    finals = [r for r in report.rows if r["phase"] == "final"]
    assert len(finals) == report.finalists == 4
    assert next(r["vs_winner"] for r in finals if r["label"] == report.winner.label()) == pytest.approx(1.0)
    assert [r["vs_rule"] for r in finals] == sorted((r["vs_rule"] for r in finals), reverse=True)  # the ranking
    assert all(len(r["rates"]) == report.rounds for r in finals) and report.rounds >= 3
    doc = load_result(report.path)
    assert doc["winner"]["config"] == report.winner.to_json() and os.path.dirname(report.path) == str(store)
    text = T.format_report(report, manifest=data)
    assert T.RANKING_NOTE in text and "vs rule" in text and "<- winner" in text and "(built-in rule)" in text
    assert f"to pin it anywhere: PipelineSpec.from_manifest({data!r}, {B}, read=" in text
    spec = PipelineSpec.from_manifest(data, B)
    assert spec.tuning.config == report.winner
    assert sorted(labels_of(build_dataset(spec))) == list(range(N))


def test_default_never_tunes_by_surprise(data, store):
    spec = PipelineSpec.from_manifest(data, B)
    assert sorted(labels_of(build_dataset(spec))) == list(range(N))
    assert not store.exists()


def test_on_first_use_tunes_once(data, store, monkeypatch):
    monkeypatch.setattr(T, "ON_FIRST_USE_SECONDS", 2.0)
    monkeypatch.setattr(T, "ON_FIRST_USE_ROUNDS", 3)
    spec = PipelineSpec.from_manifest(data, B, tune="on-first-use")
    assert "the first build_dataset measures" in spec.tuning.note
    assert sorted(labels_of(build_dataset(spec))) == list(range(N))
    files = os.listdir(store)
    assert len(files) == 1
    mtime = os.path.getmtime(store / files[0])
    again = PipelineSpec.from_manifest(data, B, tune="on-first-use")
    assert again.tuning.config is not None
    assert sorted(labels_of(build_dataset(again))) == list(range(N))
    assert os.path.getmtime(store / files[0]) == mtime                  # not tuned again


@pytest.mark.parametrize("kw,msg", [({"shuffle_buffer": 10}, "nothing to tune"),
                                    ({"read": "sequential"}, "nothing to tune"),
                                    ({"cores": 64}, "plans for 64 cores")])
def test_tune_refuses(data, store, kw, msg):
    with pytest.raises(TfpipeError, match=msg):
        tune(data, B, seconds=1, **kw)
    spec = PipelineSpec.from_manifest(data, B).with_(manifest_sha256=None)
    with pytest.raises(TfpipeError, match="from_manifest"):
        T.tune_read(spec, build_dataset, seconds=1)


def test_report_json_is_serializable(data, store):
    report = tune(data, B, seconds=2, rounds=1, store=False)
    assert report.path is None and not store.exists()
    json.dumps(report.to_json())


# -- a winner must beat the rule by more than the rounds' noise (tuning on a fake clock) -----------------

READ_FIELDS = ("read", "num_parallel_reads", "chunk_records", "parse_parallelism", "buffer_size")


def _spec_key(s) -> tuple:
    """The read options of a spec the tuner built (a candidate's; the rule's are unset)."""
    return tuple(getattr(s, k) for k in READ_FIELDS)


def _fake_tune(data, gain, busy_gain=None, built=None):
    """tune_read with graphs that cost 1 ms a batch (the rule), 1/gain ms (one other candidate) or 2 ms; beside
    the (fake) busy neighbours the other candidate costs 1/busy_gain ms (default: as quiet)."""
    spec = PipelineSpec.from_manifest(data, B, tune="off")
    cands = candidates(spec)
    rule, fast = cands[0], cands[-1]
    clock = FakeClock()

    def key(options):
        return tuple(options[k] for k in READ_FIELDS)

    costs = {key(rule.options()): 1.0, key(fast.options()): 1.0 / gain}
    busy = []

    @contextlib.contextmanager
    def contend():
        busy.append(True)
        costs[key(fast.options())] = 1.0 / (busy_gain or gain)
        yield 2

    class Graph:   # a batch costs what the graph's candidate costs now (beside the busy neighbours or not)
        def __init__(self, cost):
            self.cost = cost

        def repeat(self):
            def batches():
                while True:
                    clock.t += self.cost() / 1000
                    yield np.zeros((B, 1))
            return batches()

    def build(s):
        if built is not None:
            built.append(s)
        if s.read == "auto":   # the rule is timed as build_dataset builds it: no read options set
            return Graph(lambda: 1.0)
        k = _spec_key(s)
        return Graph(lambda: costs.get(k, 2.0))

    report = T.tune_read(spec, build, seconds=5, rounds=5, store=False, clock=clock, contend=contend)
    assert bool(busy) == (report.contended is not None)
    return report, rule, fast


def test_a_one_percent_winner_does_not_replace_the_rule(data):
    report, rule, fast = _fake_tune(data, 1.01)
    assert report.winner == rule and report.best == fast and report.noise == pytest.approx(T.NOISE_FLOOR)
    doc = report.to_json()
    assert doc["winner"]["config"] == rule.to_json() and doc["best"]["vs_rule"] == pytest.approx(1.01)
    text = T.format_report(report)
    assert f"kept the built-in rule: the best candidate, {fast.label()}, scored 1.01x, within the rounds' noise" in text
    assert "kept the built-in rule (" in report.lookup().note and report.lookup().config == rule
    top = text.splitlines()[2]
    assert top.startswith(fast.label()) and "<- winner" not in top      # ranked first, yet not the winner


def test_a_clear_winner_is_stored(data):
    report, rule, fast = _fake_tune(data, 1.5)
    assert report.winner == fast and report.best is None and report.vs_rule == pytest.approx(1.5)
    assert "winner: " + fast.label() + ": 1.50x the built-in rule (noise ±2.0%" in T.format_report(report)


def test_each_candidate_is_built_once_and_timed_in_every_round(data):
    """Rounds time new iterators of one dataset per candidate: the graph's functions are traced once."""
    built = []
    report, rule, fast = _fake_tune(data, 1.5, busy_gain=1.2, built=built)
    keys = [_spec_key(s) for s in built]
    assert len(keys) == len(set(keys)) == len(candidates(PipelineSpec.from_manifest(data, B, tune="off")))
    assert report.rounds > 1 and report.contended["rounds"] > 1


def test_a_winner_that_collapses_under_contention_is_not_stored(data):
    """1.5x the rule quiet but 0.6x beside the busy neighbours: the rule is kept, and the report and the
    stored note (which explain prints) say why with both scores."""
    report, rule, fast = _fake_tune(data, 1.5, busy_gain=0.6)
    assert report.winner == rule and report.rejected == fast and report.best is None
    assert report.contended["vs_rule"] == pytest.approx(0.6) and report.contended["neighbours"] == 2
    doc = report.to_json()
    assert doc["winner"]["config"] == rule.to_json() and doc["rejected"]["contended_vs_rule"] == pytest.approx(0.6)
    assert (f"kept the built-in rule: {fast.label()} read 1.50x the rule quiet but 0.60x beside 2 busy process(es)"
            in T.format_report(report))
    note = report.lookup().note
    assert report.lookup().config == rule and f"{fast.label()} beat it quiet but read 0.60× it beside 2" in note


def test_a_winner_that_also_wins_under_contention_is_stored(data):
    report, rule, fast = _fake_tune(data, 1.5, busy_gain=1.2)
    assert report.winner == fast and report.rejected is None and report.contended["vs_rule"] == pytest.approx(1.2)
    assert "and 1.20x beside 2 busy process(es)" in T.format_report(report)
    assert "1.50× the built-in rule quiet and 1.20× beside 2 busy process(es)" in report.lookup().note


def _children() -> set[int]:
    """Pids of this process's live children (Linux /proc)."""
    out = set()
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == os.getpid() and fields[0] != "Z":
            out.add(int(d))
    return out


def test_busy_neighbours_spin_while_the_block_runs_and_end_after_it():
    from pipeline.plan.contention import busy_neighbours

    before = _children()
    with busy_neighbours(2, settle_s=0.2) as n:
        assert n == 2 and len(_children() - before) == 2
    assert _children() - before == set()
    with pytest.raises(RuntimeError), busy_neighbours(1, settle_s=0):
        raise RuntimeError("a failed phase")
    assert _children() - before == set()
