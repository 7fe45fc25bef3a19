"""``tfpipe bench layout``: a tiny run reports both layouts of both workloads and cleans up (not the speed);
``SET`` is re-laid both ways; the text windows are stored as uint16; the shuffle table has both layouts; the seeded
shuffled rounds time both defaults against the hand-tuned shuffle(B) graph."""
from __future__ import annotations

import json

import numpy as np
import pytest

from bench.commands.layout import format_report, run_benchmark
from bench.core.layoutbench import relay_set, shuffle_table, text_sets
from converters.cli import main
from converters.shardset.reader import read_manifest
from pipeline import PipelineSpec, build_dataset


def test_smoke_run(tmp_path):
    r = run_benchmark(rows=3_000, windows=200, rounds=1, workdir=str(tmp_path))
    for name in ("libsvm", "text"):
        w = r["workloads"][name]
        assert w["columnar_rec_s"] > 0 and w["best_example_rec_s"] > 0 and w["ratio"] > 0
        assert w["example_bytes"] > 0 and w["columnar_bytes"] > 0
        assert w["check_ratio"] > 0 and w["check_cpu_ratio"] >= 0 and w["unchecked_decode_rec_s"] > 0
    text = format_report(r)
    assert "columnar vs best Example" in text and "libsvm" in text and "text" in text
    marked = [line for line in text.splitlines() if "<- tfpipe's default" in line]   # the user's row, per workload
    assert len(marked) == 2 and all(line.lstrip().startswith("tfpipe default, Example") for line in marked)
    assert "block checks: checked decode vs unchecked" in text
    assert list(tmp_path.iterdir()) == []


def test_cli_json_with_busy_loops(capsys):
    assert main(["bench", "layout", "--rows", "2000", "--windows", "0", "--repeats", "1", "--busy", "1",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["benchmark"] == "layout" and out["busy_loops"] == 1 and list(out["workloads"]) == ["libsvm"]


def test_cli_beside_a_tensorflow_matmul_loop(capsys):
    assert main(["bench", "layout", "--rows", "2000", "--windows", "0", "--repeats", "1", "--beside", "matmul"]) == 0
    assert "(0 busy loop(s), a TensorFlow matmul loop beside)" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["bench", "layout", "--beside", "reader"])
    assert "invalid choice: 'reader'" in capsys.readouterr().err


def _rows(path):
    spec = PipelineSpec.from_manifest(path, 4096, output="dict", read="sequential")
    batches = list(build_dataset(spec))
    return {k: np.concatenate([b[k].numpy() for b in batches]) for k in batches[0]}


@pytest.mark.parametrize("start", ["example", "columnar"])
def test_a_set_is_relaid_both_ways_with_the_same_rows(tmp_path, start):
    from bench.core.layoutbench import criteo_sets

    ex, col = criteo_sets(str(tmp_path / "made"), 1_500, block_rows=64, shard_rows=700)
    given = ex if start == "example" else col
    ex2, col2 = relay_set(given, str(tmp_path / "relaid"), block_rows=64)
    assert (ex2 if start == "example" else col2) == given
    a, b = _rows(ex2), _rows(col2)
    for k in a:
        assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), k
    assert [s.records for s in read_manifest(col2).shards] == [700, 700, 100]


def test_text_windows_are_uint16_in_the_columnar_set(tmp_path):
    ex, col = text_sets(str(tmp_path), 30, seq_len=64)
    assert dict(read_manifest(col).layout.stored) == {"input_ids": "uint16"}
    a, b = _rows(ex), _rows(col)
    assert a["input_ids"].shape == (30, 65) and np.array_equal(a["input_ids"], b["input_ids"])


def test_shuffle_table_has_both_layouts(tmp_path):
    rows = shuffle_table(str(tmp_path), 4_000, [500], seeds=(1,))
    assert rows[0]["example_displacement"] > 0 and rows[0]["columnar_displacement"] > 0
    assert -1 <= rows[0]["columnar_rank_correlation"] <= 1


def test_shuffled_rounds_time_both_defaults_against_the_hand_tuned_shuffle(tmp_path):
    """``--shuffle-buffer``: the seeded shuffled default of both layouts and the hand-tuned shuffle(B) graph, per
    round; the hand-tuned graph reads every row once, shuffled."""
    from bench.core.layoutbench import compare_shuffled, criteo_sets, hand_shuffle

    ex, col = criteo_sets(str(tmp_path), 3_000, block_rows=64, shard_rows=1_000)
    labels = np.concatenate([y.numpy() for _, y in hand_shuffle(ex, 256, 500, seed=1)])
    stored = np.concatenate([y.numpy() for _, y in build_dataset(PipelineSpec.from_manifest(ex, 256))])
    assert len(labels) == 3_000 and np.array_equal(np.sort(labels), np.sort(stored))
    r = compare_shuffled(ex, col, 256, 500, rounds=2)
    for n in ("hand_shuffle", "example_default", "columnar_default"):
        assert r[f"{n}_rec_s"] > 0
    assert r["columnar_default_ratio_min"] <= r["columnar_default_ratio"] <= r["columnar_default_ratio_max"]
    text = format_report({"busy_loops": 0, "target_ratio": 2.5, "workloads": {"libsvm": {
        **run_benchmark(rows=2_000, windows=0, rounds=1, workdir=str(tmp_path))["workloads"]["libsvm"],
        "shuffled": r}}})
    assert "seeded shuffled read (shuffle_buffer 500" in text and "columnar default" in text


@pytest.mark.parametrize("given, marked", [("example", "tfpipe default, Example"), ("columnar", "columnar default")])
def test_the_row_of_the_given_sets_own_layout_is_marked_default(tmp_path, capsys, given, marked):
    """With SET the user's row is the default graph on SET's own layout (a columnar set: the columnar row)."""
    from bench.core.layoutbench import criteo_sets

    sets = dict(zip(("example", "columnar"), criteo_sets(str(tmp_path), 1_500, block_rows=64, shard_rows=700)))
    assert main(["bench", "layout", sets[given], "--windows", "0", "--repeats", "1", "--batch-size", "256"]) == 0
    rows = [line.strip() for line in capsys.readouterr().out.splitlines() if "<- tfpipe's default" in line]
    assert len(rows) == 1 and rows[0].startswith(marked) and "(the given set's layout, read with" in rows[0]


def test_the_limit_rows_put_the_bare_block_read_beside_both_defaults(tmp_path):
    """Every fixed-width workload shows the bare block read of its columnar set beside the unshuffled and the
    seeded shuffled default of both layouts, rows/s and rows per CPU-second with their ranges; text does not."""
    from bench.commands.layout import limit_lines
    from bench.core.layoutbench import LIMIT_READS, compare_limit, criteo_sets

    ex, col = criteo_sets(str(tmp_path), 6_000, block_rows=64, shard_rows=2_500)
    lim = compare_limit(ex, col, 256, 500, rounds=2)
    assert lim["rounds"] == 2 and lim["shuffle_buffer"] == 500 and lim["load_min"] <= lim["load_max"]
    for n in LIMIT_READS:
        x = lim[n]
        assert 0 < x["rows_s_min"] <= x["rows_s"] <= x["rows_s_max"], n
        assert 0 < x["rows_per_cpu_s_min"] <= x["rows_per_cpu_s"] <= x["rows_per_cpu_s_max"], n
    assert lim["bare_blocks"]["of_bare_cpu"] == 1.0 == lim["bare_block"]["of_bare1_cpu"]
    assert lim["shuffled_of_unshuffled_cpu"] > 0
    # one block an element steps Python 8 times as often as 8 blocks an element: fewer rows per CPU-second
    assert lim["bare_block"]["of_bare_cpu"] < 1.0
    text = "\n".join(limit_lines(lim))
    for want in ("bare block read, 8 an elem.", "bare block read, 1 an elem.", "columnar default, seeded", "Example default, seeded", "rows/CPU-s",
                 "the bare reads per CPU-s", "8 / of 1 block an element", "shuffle_buffer 500"):
        assert want in text, want
    (tmp_path / "run").mkdir()
    r = run_benchmark(rows=3_000, windows=100, rounds=1, workdir=str(tmp_path / "run"))
    assert "limit" in r["workloads"]["libsvm"] and "limit" not in r["workloads"]["text"]
    assert r["workloads"]["libsvm"]["limit"]["shuffle_buffer"] == 10_000     # without --shuffle-buffer
    assert "the machine's limit" in format_report(r)


def test_the_check_cost_compares_two_tensorflow_decodes(tmp_path, monkeypatch):
    """The checked decode is built without the column kernel (the bare decode has none): the kernel is never
    asked for."""
    from bench.core.layoutbench import check_cost, criteo_sets
    from pipeline.graph import cutkernel

    _, col = criteo_sets(str(tmp_path), 2_000, block_rows=64, shard_rows=1_000)
    asked = []
    real = cutkernel.column_cut

    def column_cut():
        asked.append(True)
        return real()

    monkeypatch.setattr(cutkernel, "column_cut", column_cut)
    r = check_cost(col, rounds=2)
    assert r["check_ratio"] > 0 and asked == []
