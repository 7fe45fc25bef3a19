"""pipeline.plan.tunestore: fingerprints, the stored result's round trip, and every reason a stored result is not
used (another machine, other data or batch size, tune='off', a planned core count, a damaged file)."""
from __future__ import annotations

import json
import os

import pytest
from pipeline_data import labels_of, write_indexed_set

from converters.util.system import cpu_count
from pipeline import PipelineSpec, build_dataset, describe
from pipeline.plan.readplan import ReadConfig, data_fingerprint, read_plan, rule_config
from pipeline.plan.tunestore import (
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


# -- a hostile store: every file that is not a result tfpipe could have written is ignored with one warning ----

def _with_winner(**config):
    def doc(spec):
        return json.dumps({**_doc(spec), "winner": {"label": "x", "config": {**WINNER.to_json(), **config}}})
    return doc


@pytest.mark.parametrize("content, needle", [
    (_with_winner(buffer_size=64 << 30), "buffer_size 68719476736 is more than 1/64 of this machine's RAM"),
    (_with_winner(buffer_size=10**15), "buffer_size 1000000000000000"),
    (_with_winner(read="interleave", parallelism=10**9), "parallelism 1000000000 is more than 4×"),
    (_with_winner(parse_parallelism=10**9), "parse_parallelism 1000000000 is more than 4×"),
    (_with_winner(chunk_records=10**9), "chunk_records 1000000000 is more than 65536"),
    (_with_winner(buffer_size="8 MiB"), "the winner is not a read config"),
    (lambda spec: "[" * 100_000, "nests deeper than 32 levels"),
    (lambda spec: '{"a": ' * 100_000 + "1" + "}" * 100_000, "nests deeper than 32 levels"),
    (lambda spec: " " * (2 << 20) + json.dumps(_doc(spec)), "holds 2097"),
    (lambda spec: b"\xff\xfe{}", "is not valid JSON"),
    (lambda spec: "1" * 5000, "is not valid JSON"),
    (lambda spec: None, "is a directory, not a regular file"),
])
def test_hostile_result_is_ignored_with_one_warning(data, store, caplog, content, needle):
    spec = PipelineSpec.from_manifest(data, B)
    path = result_path(data_fingerprint(spec), machine_fingerprint())
    os.makedirs(store, exist_ok=True)
    body = content(spec)
    if body is None:
        os.mkdir(path)
    else:
        with open(path, "wb") as f:
            f.write(body if isinstance(body, bytes) else body.encode())
    caplog.set_level("WARNING", logger="pipeline.plan.tunestore")
    for _ in range(2):                                   # looked up twice: still one warning
        again = PipelineSpec.from_manifest(data, B)
        assert again.tuning.config is None and needle in again.tuning.note
    warnings = [r.getMessage() for r in caplog.records if r.name == "pipeline.plan.tunestore"]
    assert len(warnings) == 1 and path in warnings[0] and needle in warnings[0], warnings
    plan = read_plan(again)
    assert plan.source == "rule" and plan.config == rule_config(again)[0]
    assert "chosen_by=rule" in describe(again)
    assert sorted(labels_of(build_dataset(again))) == list(range(N))


_CHILD = """
import os, sys
from converters.cli.main import main
from pipeline import PipelineSpec, build_dataset
for cache in sys.argv[3:]:
    os.environ["TFPIPE_CACHE"] = cache
    rc = main(["pipeline", "explain", sys.argv[1], "--batch-size", sys.argv[2]])
    spec = PipelineSpec.from_manifest(sys.argv[1], int(sys.argv[2]))
    n = sum(int(label.shape[0]) for _, label in build_dataset(spec))
    print("records", n, "rc", rc, "tuned", spec.tuning.config is not None, flush=True)
"""


def _capped():
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))   # a run-away read hits this, not the host


def test_fifo_or_device_in_the_store_neither_hangs_nor_grows(data, tmp_path):
    """One child process (TensorFlow loads once) looks up three stores: a FIFO, a link to /dev/zero and a
    link to a FIFO where the result should be. Before the fix the first hung and the second grew without end."""
    import subprocess
    import sys

    spec = PipelineSpec.from_manifest(data, B)
    name = os.path.basename(result_path(data_fingerprint(spec), machine_fingerprint()))
    caches, paths = [], []
    for k, kind in enumerate(("fifo", "link to /dev/zero", "link to a fifo")):
        tune = tmp_path / f"cache{k}" / "tune"
        tune.mkdir(parents=True)
        path = tune / name
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "link to a fifo":
            os.mkfifo(tmp_path / "fifo")
            os.symlink(tmp_path / "fifo", path)
        else:
            os.symlink("/dev/zero", path)
        caches.append(str(tune.parent))
        paths.append(str(path))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run([sys.executable, "-c", _CHILD, data, str(B), *caches], env=env, capture_output=True,
                          text=True, timeout=300, preexec_fn=_capped)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count(f"records {N} rc 0 tuned False") == 3, done.stdout
    assert done.stdout.count("chosen_by=rule") == 3
    assert "is a FIFO (named pipe), not a regular file" in done.stdout
    assert "is a character device, not a regular file" in done.stdout
    warned = [ln for ln in done.stderr.splitlines() if "ignoring a stored tuning result" in ln]
    assert len(warned) == 3 and all(p in ln for p, ln in zip(paths, warned)), warned   # one per store
    assert "Traceback" not in done.stderr
