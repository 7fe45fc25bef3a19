"""Which graph a spec builds (``pipeline.resume.state.resume_choice``): ``resumable=None`` (the default) reads a
seeded, shuffled File-mode set in the resumable order and keeps the default graph, saying why, for everything
else; ``resumable=False`` opts out; ``resumable=True`` demands it and refuses in one line where it cannot. The
build, ``describe`` and ``tfpipe pipeline explain`` follow the one decision, and a default seeded spec resumes
exactly (the Keras and custom-loop helpers take it as it is)."""
from __future__ import annotations

import pytest
from columnar_data import indexed_columns, write_columnar_set
from pipeline_data import batches_of, write_indexed_set

from converters.libsvm.options import libsvm_schema
from pipeline import PipelineSpec, ResumeError, build_dataset, describe, fit_calls, input_state, plan_stages
from pipeline.resume.state import resume_choice

N, BATCH = 600, 32
SEEDED = dict(shuffle_buffer=100, seed=7)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("choice")
    write_indexed_set(d, N, shard_bytes=4 << 10)
    return str(d)


def _pure(**kw):
    """A spec made without a manifest (no I/O): two files of 300 records."""
    return PipelineSpec(libsvm_schema(3), BATCH, **{"files": ("a", "b"), "file_records": (300, 300), **kw})


@pytest.mark.parametrize("kw, builds, why", [
    (SEEDED, True, "seeded File-mode set"),
    ({**SEEDED, "epochs": 3}, True, "seeded File-mode set"),                # cache='auto': no cache stage then
    ({**SEEDED, "part_weights": ((1, 0.5), (1, 0.5))}, True, "seeded File-mode set"),   # a balanced group
    (dict(shuffle_buffer=100), False, "needs a seed"),
    (dict(seed=7), False, "no shuffle (shuffle_buffer=0)"),
    ({**SEEDED, "resumable": False}, False, "resumable=False (asked for)"),
    ({**SEEDED, "resumable": True}, True, "resumable=True (asked for)"),
    (dict(seed=7, resumable=True), True, "resumable=True"),                   # no shuffle: the files in order
    ({**SEEDED, "cache": "memory"}, False, "cache='memory' would freeze one order"),
    ({**SEEDED, "cache": "file:/tmp/x"}, False, "cache='file:/tmp/x' would freeze"),
    ({**SEEDED, "num_shards": 2, "shard_index": 1}, False, "2 ranks share one order"),
    ({**SEEDED, "num_shards": 2, "resumable": True}, True, "resumable=True"),
    ({**SEEDED, "file_records": ()}, False, "record count of every file"),
    ({**SEEDED, "service": "grpc://localhost:5050"}, False, "tf.data service"),
    ({**SEEDED, "files": (), "mode": "pipe", "channel": "train"}, False, "Pipe mode cannot resume mid-epoch"),
    ({**SEEDED, "resume_refusal": "needs the whole plan"}, False, "needs the whole plan"),
])
def test_the_choice(kw, builds, why):
    got, reason = resume_choice(_pure(**kw))
    assert got is builds and why in reason and "\n" not in reason


@pytest.mark.parametrize("kw, match", [
    (dict(shuffle_buffer=100), "resumable=True: shuffle_buffer > 0 needs a seed"),
    ({**SEEDED, "files": (), "mode": "pipe", "channel": "train"}, "resumable=True: Pipe mode cannot resume"),
    ({**SEEDED, "file_records": ()}, "resumable=True: it needs the record count of every file"),
])
def test_resumable_true_where_impossible_is_one_line(kw, match):
    spec = _pure(**kw, resumable=True)
    for call in (resume_choice, plan_stages, build_dataset):
        with pytest.raises(ResumeError, match=match) as e:
            call(spec)
        assert "\n" not in str(e.value)


def test_a_seeded_shuffled_columnar_set_resumes_by_default(tmp_path):
    """The resumable order over rows is the columnar set's shuffle: input_state and build_dataset(resume=...)
    work with no extra argument; unshuffled, it keeps its own graph; resumable=False opts out."""
    write_columnar_set(tmp_path, indexed_columns(200), block_rows=16)
    spec = PipelineSpec.from_manifest(str(tmp_path), BATCH, epochs=2, **SEEDED)
    builds, why = resume_choice(spec)
    assert builds and "columnar set: the order runs over its decoded rows" in why
    assert [s.name for s in plan_stages(spec)] == [s.name for s in plan_stages(spec.with_(resumable=True))]
    assert not resume_choice(spec.with_(resumable=False))[0]
    assert not resume_choice(spec.with_(shuffle_buffer=0))[0]
    full = batches_of(build_dataset(spec))
    assert batches_of(build_dataset(spec, resume=input_state(spec, 5))) == full[5:]


def test_a_default_seeded_spec_resumes_exactly(data):
    spec = PipelineSpec.from_manifest(data, BATCH, epochs=2, **SEEDED)
    assert spec.resumable is None and resume_choice(spec)[0]
    full = batches_of(build_dataset(spec))
    assert full == batches_of(build_dataset(spec.with_(resumable=True)))    # the same graph as asked for
    for steps in (5, 19, 30):
        assert batches_of(build_dataset(spec, resume=input_state(spec, steps))) == full[steps:]
    state = input_state(spec, 25)                                            # Keras: fit_calls with the spec
    calls = fit_calls(spec, state, epochs=3, steps_per_epoch=10)
    assert [(c["initial_epoch"], c["epochs"], c["steps_per_epoch"]) for c in calls] == [(2, 3, 5)]
    assert batches_of(calls[0]["x"].take(5)) == full[25:30]


def test_an_unseeded_spec_stays_on_the_default_graph_and_refuses_a_state(data):
    spec = PipelineSpec.from_manifest(data, BATCH, shuffle_buffer=100)
    assert [s.name for s in plan_stages(spec)][:4] == ["source", "shard", "cache", "shuffle"]
    with pytest.raises(ResumeError, match="needs a spec that builds the resumable order, and this one does not: "
                                          "shuffle_buffer > 0 needs a seed"):
        input_state(spec, 3)


@pytest.mark.parametrize("kw, line", [
    (SEEDED, "graph: resumable order: seeded File-mode set"),
    (dict(shuffle_buffer=100), "graph: default: not resumable because shuffle_buffer > 0 needs a seed"),
    ({**SEEDED, "resumable": False}, "graph: default: not resumable because resumable=False (asked for)"),
    ({**SEEDED, "cache": "memory", "epochs": 2}, "graph: default: not resumable because cache='memory'"),
])
def test_describe_says_which_graph_and_why(data, kw, line):
    text = describe(PipelineSpec.from_manifest(data, BATCH, **kw))
    assert text.splitlines()[1].startswith(line)
    assert ("resumable=True" in text) == line.startswith("graph: resumable")   # the stages follow the choice


@pytest.mark.parametrize("argv, line", [
    (["--shuffle-buffer", "100", "--seed", "3"], "graph: resumable order: seeded File-mode set"),
    (["--shuffle-buffer", "100", "--seed", "3", "--no-resumable"], "because resumable=False (asked for)"),
    (["--shuffle-buffer", "100"], "graph: default: not resumable because shuffle_buffer > 0 needs a seed"),
    (["--mode", "pipe", "--channel", "train", "--shuffle-buffer", "100", "--seed", "3"],
     "graph: default: not resumable because Pipe mode cannot resume mid-epoch"),
])
def test_explain_says_which_graph_and_why(data, capsys, argv, line):
    from converters.cli import main

    assert main(["pipeline", "explain", data, "--batch-size", "8", *argv]) == 0
    assert line in capsys.readouterr().out.splitlines()[1]
