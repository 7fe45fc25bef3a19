"""bench.core.variants: every variant reads the whole set; the speed suite's rows and ratios (smoke run)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest
from columnar_data import indexed_columns, write_columnar_set
from pipeline_data import write_indexed_set

from bench.core.variants import (
    HAND_TUNED,
    VARIANTS,
    format_table,
    run_speed_suite,
    throughput,
)

N = 600
B = 32
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("indexed")
    write_indexed_set(d, N)
    return str(d)


@pytest.fixture(scope="module")
def columnar(tmp_path_factory):
    """The same rows as a columnar set: blocks of 16 rows, 3 files of 250 rows (each ends in a short block)."""
    d = tmp_path_factory.mktemp("columnar")
    write_columnar_set(d, indexed_columns(N), block_rows=16, shard_rows=250)
    return str(d)


@pytest.mark.parametrize("layout", ["example", "columnar"])
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variant_reads_every_record(request, layout, name):
    data = request.getfixturevalue({"example": "data", "columnar": "columnar"}[layout])
    seen = Counter()
    for batch in VARIANTS[name](data, B):
        features, label = batch
        assert sorted(features) == ["ids", "values"] and 0 < len(label) <= B
        seen.update(int(x) for x in label.numpy())
    epochs = 2 if name.startswith("cache_") else 1
    assert sorted(seen) == list(range(N)) and set(seen.values()) == {epochs}


def test_throughput_counts(data):
    res = throughput(VARIANTS["vectorized"](data, B), warmup=2)
    assert res["records"] == N - 2 * B and res["batches"] == -(-N // B) - 2
    assert res["records_per_s"] > 0 and res["seconds"] > 0
    assert res["cpu_seconds"] > 0 and res["records_per_cpu_s"] == pytest.approx(res["records"] / res["cpu_seconds"])
    assert throughput(VARIANTS["vectorized"](data, B), warmup=0, max_batches=3)["batches"] == 3


def test_speed_suite_rows_and_ratios(data):
    names = ["naive", "vectorized", "sequential_batch_parse_prefetch", "interleave_per_file_batched", "pipe",
             "shuffle"]
    rows = run_speed_suite(data, B, names, warmup=1)
    assert [r["variant"] for r in rows] == names
    by = {r["variant"]: r for r in rows}
    assert by["naive"]["vs_naive"] == pytest.approx(1.0)
    tuned = max(by[n]["records_per_s"] for n in HAND_TUNED if n in by)
    for r in rows:
        assert r["vs_naive"] == pytest.approx(r["records_per_s"] / by["naive"]["records_per_s"])
        assert r["vs_best_hand_tuned"] == pytest.approx(r["records_per_s"] / tuned)
    assert "vectorized" in format_table(rows)


def test_speed_suite_without_references(data):
    rows = run_speed_suite(data, B, ["vectorized"], warmup=0, max_batches=2)
    assert rows[0]["vs_naive"] is None and rows[0]["vs_best_hand_tuned"] is None


@pytest.mark.parametrize("kw,msg", [({"variants": ["fast"]}, "unknown variant"), ({"repeats": 0}, "repeats")])
def test_speed_suite_errors(data, kw, msg):
    with pytest.raises(ValueError, match=msg):
        run_speed_suite(data, B, **kw)


def test_module_entry_point(data):
    r = subprocess.run([sys.executable, "-m", "bench.core.variants", data, "--batch-size", "32", "--variants",
                        "naive,vectorized", "--json"], cwd=ROOT, capture_output=True, text=True, timeout=180,
                       env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [x["variant"] for x in rows] == ["naive", "vectorized"] and rows[1]["vs_naive"] > 0
