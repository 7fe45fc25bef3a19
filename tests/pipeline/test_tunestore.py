"""pipeline.tunestore: fingerprints, the stored result's round trip, and every reason a stored result is not
used (another machine, other data or batch size, tune='off', a planned core count, a damaged file)."""
from __future__ import annotations

import json
import os

import pytest
from pipeline_data import labels_of, write_indexed_set

from converters.util.system import cpu_count
from pipeline import PipelineSpec, build_dataset, describe
from pipeline.read import ReadConfig, data_fingerprint, read_plan, rule_config
from pipeline.tunestore import (
    TUNE_FORMAT,
    load_result,
    lookup,
    machine_fingerprint,
    result_path,
    save_result,
    store_dir,
)

N = 600
B = 32
WINNER = ReadConfig("sequential", chunk_records=0, parse_parallelism=1, buffer_size=1 << 20)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("indexed")
    write_indexed_set(d, N)
    return str(d)


def _doc(spec, winner=WINNER, machine=None):
    rule = rule_config(spec)[0]
    return {"format": TUNE_FORMAT, "created": "2026-11-30T12:00:00+00:00", "machine": machine or machine_fingerprint(),
            "data": data_fingerprint(spec), "rounds": 7,
            "reference": {"label": rule.label(), "config": rule.to_json()},
            "winner": {"label": winner.label(), "config": winner.to_json(), "vs_rule": 1.08},
            "candidates": []}


def test_machine_fingerprint():
    m = machine_fingerprint()
    assert set(m) == {"cpu_count", "cpu_model", "tensorflow"}
    assert m["cpu_count"] == cpu_count() and m["cpu_model"] and m["tensorflow"][:1].isdigit()


def test_round_trip_and_the_default_build_uses_it(data, store):
    spec = PipelineSpec.from_manifest(data, B)
    assert spec.tuning.config is None and "not tuned for this data and batch size" in spec.tuning.note
    path = save_result(_doc(spec))
    assert path == result_path(data_fingerprint(spec), machine_fingerprint()) and path.startswith(str(store))
    assert os.listdir(store) == [os.path.basename(path)]           # written atomically: no temp file left
    assert load_result(path)["winner"]["config"] == WINNER.to_json()

    tuned = PipelineSpec.from_manifest(data, B)                     # read="auto", tune="stored": the defaults
    assert tuned.tuning.config == WINNER and tuned.tuning.path == path
    plan = read_plan(tuned)
    assert plan.source == "tuned" and plan.config == WINNER
    text = describe(tuned)
    assert "chosen_by=tuned" in text and "read=sequential" in text and "1.08× the built-in rule" in text
    assert labels_of(build_dataset(tuned)) == list(range(N))        # the sequential winner: manifest order


@pytest.mark.parametrize("change,needle", [
    ({"batch_size": 64}, "not tuned for this data and batch size"),
    ({"tune": "off"}, "tune='off'"),
    ({"cores": 64}, "planning for 64 cores"),
    ({"shuffle_buffer": 10}, "shuffle"),
    ({"read": "interleave"}, "asked for"),
    ({"tune": "on-first-use", "batch_size": 64}, "the first build_dataset measures"),
])
def test_not_used_and_why(data, store, change, needle):
    save_result(_doc(PipelineSpec.from_manifest(data, B)))
    batch = change.pop("batch_size", B)
    spec = PipelineSpec.from_manifest(data, batch, **change)
    assert spec.tuning.config is None and needle in spec.tuning.note
    assert read_plan(spec).source != "tuned"
    if "shuffle_buffer" not in change and "read" not in change:
        assert needle in describe(spec)


def test_another_machine(data, store):
    spec = PipelineSpec.from_manifest(data, B)
    other = {**machine_fingerprint(), "tensorflow": "1.15.0", "cpu_count": 96}
    save_result(_doc(spec, machine=other))
    note = lookup(spec).note
    assert "measured on another" in note and "tensorflow 1.15.0 vs" in note and "cpu_count 96 vs" in note
    assert lookup(spec).config is None


def test_other_data(data, store, tmp_path):
    save_result(_doc(PipelineSpec.from_manifest(data, B)))
    other = tmp_path / "other"
    write_indexed_set(other, N + 1)
    assert PipelineSpec.from_manifest(str(other), B).tuning.config is None


def test_damaged_result_is_ignored_not_fatal(data, store):
    spec = PipelineSpec.from_manifest(data, B)
    path = save_result(_doc(spec))
    with open(path, "w") as f:
        f.write("{not json")
    again = PipelineSpec.from_manifest(data, B)
    assert again.tuning.config is None and "unreadable" in again.tuning.note
    assert sorted(labels_of(build_dataset(again))) == list(range(N))
    with open(path, "w") as f:
        json.dump({**_doc(spec), "format": 99}, f)
    assert "unreadable" in lookup(spec).note


def test_store_dir_follows_tfpipe_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("TFPIPE_CACHE", str(tmp_path))
    assert store_dir() == str(tmp_path / "tune")
    monkeypatch.delenv("TFPIPE_CACHE")
    assert store_dir() == os.path.join(os.path.expanduser("~"), ".cache", "tfpipe", "tune")
