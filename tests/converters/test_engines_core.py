"""The engine core's pure parts: the streamed cut rule equals the local writer's, errors survive as values,
outcomes survive JSON, work units partition the input, and the run's area is cleaned up."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from converters.engines.area import RunArea, prepare_run
from converters.engines.core import (
    Cutter,
    ErrorRecord,
    Outcome,
    SetPlan,
    ShardResult,
    ShardSpec,
)
from converters.engines.units import InputFile, Unit, input_files, plan_units, read_unit, unit_count
from converters.shardset.cuts import plan_cuts
from converters.shardset.manifest import InputStats
from converters.util.errors import InputError


def _reference_ranges(lengths, limit):
    cuts = plan_cuts(np.asarray(lengths, np.int64), 0, limit)
    starts = [0] + cuts if lengths else []
    return list(zip(starts, starts[1:] + [len(lengths)]))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(16, 400), max_size=80), st.integers(1, 1500),
       st.lists(st.tuples(st.integers(0, 30), st.booleans()), max_size=40))
def test_cutter_streams_the_writers_cut_rule(lengths, limit, parts):
    """Fed in arbitrary units, some whole (``add_run``, no lengths), the cuts equal ``plan_cuts`` over all."""
    cutter = Cutter(limit)
    i = 0
    for k, whole in parts + [(len(lengths), False)]:
        part = lengths[i:i + k]
        if not whole or not cutter.add_run(len(part), sum(part)):
            cutter.add(np.array(part, np.int64))
        i += len(part)
    assert cutter.records == len(lengths)
    assert cutter.ranges() == _reference_ranges(lengths, limit)


def test_add_run_refuses_what_may_not_fit():
    c = Cutter(100)
    assert c.add_run(2, 60) and not c.add_run(1, 41) and c.records == 2
    c.add(np.array([41]))
    assert c.ranges() == [(0, 2), (2, 3)]


@pytest.mark.parametrize("exc", [
    InputError("bad_label: label is not a number", path="a.txt", line=7, reason="bad_label"),
    InputError("cannot decompress (x); the file is truncated", path="b.gz", offset=1234),
    InputError("no records to write", reason="empty_input"),
    InputError("odd: 'a.txt:7: ' inside", path="a.txt", line=7),
])
def test_error_record_raises_the_same_error(exc):
    back = ErrorRecord.of(exc).exception()
    assert type(back) is InputError and str(back) == str(exc)
    assert (back.path, back.line, back.offset, back.reason) == (exc.path, exc.line, exc.offset, exc.reason)


def test_outcome_round_trips_through_json():
    st_ = InputStats("a.txt", 5, 4, 1, {"bad_label": 1}, ["a.txt:3: bad_label: ..."])
    plan = SetPlan((ShardSpec(0, 3, ()), ShardSpec(1, 1, ())), 4, (st_,), {"field_size": 39}, {"blank_lines": 1})
    res = [ShardResult(1, ".tfpipe-tmp-r-train-00001.tfrecord", 1, 300, "ab"),
           ShardResult(0, ".tfpipe-tmp-r-train-00000.tfrecord", 3, 900, "cd")]
    o = Outcome.of(plan, res)
    assert [r.index for r in o.results] == [0, 1] and o.expected == (3, 1)
    assert Outcome.from_json(json.loads(o.dumps())) == o
    failed = Outcome.of(SetPlan.failed(ErrorRecord("x", "a", 2, reason="r")), [])
    assert Outcome.from_json(json.loads(failed.dumps())) == failed


@pytest.mark.parametrize("files, size, expect", [
    ([InputFile("a", 10, True)], 4, [(0, 0, 4), (0, 4, 8), (0, 8, 10)]),
    ([InputFile("a", 0, True)], 4, [(0, 0, 0)]),
    ([InputFile("a", 9, False), InputFile("b", 8, True)], 8, [(0, 0, 9), (1, 0, 8)]),
    ([InputFile("a", 3, True), InputFile("b", 5, False), InputFile("c", 5, True)], 5,
     [(0, 0, 3), (1, 0, 5), (2, 0, 5)]),
])
def test_plan_units(files, size, expect):
    units = plan_units(files, size)
    assert [(u.input_index, u.start, u.stop) for u in units] == expect
    assert [u.index for u in units] == list(range(len(units)))
    assert all(u.whole == (not files[u.input_index].splittable) for u in units)


@pytest.mark.parametrize("files, size, expect", [
    ([InputFile("a", 10, True)], 4, [(0, 0, 4), (0, 4, 8), (0, 8, 10)]),    # 3 ranges: 4, 4, 2
    ([InputFile("a", 252, True)], 189, [(0, 0, 126), (0, 126, 252)]),        # not 189 and a sliver of 63
    ([InputFile("a", 11, True)], 5, [(0, 0, 4), (0, 4, 8), (0, 8, 11)]),
    ([InputFile("a", 0, True), InputFile("b", 9, False)], 4, [(0, 0, 0), (1, 0, 9)]),
])
def test_even_units_are_as_many_ranges_of_equal_size(files, size, expect):
    units = plan_units(files, size, even=True)
    assert [(u.input_index, u.start, u.stop) for u in units] == expect
    assert len(units) == len(plan_units(files, size))



@pytest.mark.parametrize("sizes", [[0], [5], [10], [11, 0, 30], [3, 3, 3, 3]])
@pytest.mark.parametrize("gz", [False, True])
def test_unit_count_is_the_planned_units_counted_no_further_than_asked(tmp_path, sizes, gz):
    import gzip

    paths = []
    for i, n in enumerate(sizes):
        paths.append(str(tmp_path / (f"f{i}.txt.gz" if gz and i == 0 else f"f{i}.txt")))
        data = b"x" * n
        open(paths[-1], "wb").write(gzip.compress(data) if paths[-1].endswith(".gz") else data)
    planned = len(plan_units(input_files(paths), 10))
    assert unit_count(paths, 10) == planned
    assert min(planned, 2) <= unit_count(paths, 10, at_most=2) <= planned
    # past the bound nothing is looked up: a missing file after it is not noticed
    assert unit_count([paths[0], str(tmp_path / "gone")], 10, at_most=1) == unit_count([paths[0]], 10)
    with pytest.raises(InputError, match="cannot read"):
        unit_count([paths[0], str(tmp_path / "gone")], 10)


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_plan_units_rejects_a_bad_size(bad):
    with pytest.raises(ValueError, match="unit_size"):
        plan_units([InputFile("a", 1, True)], bad)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from([b"1 1:1", b"", b"# c", b"0 2:3 4:5", b"x" * 40, b"\r"]), max_size=40),
       st.booleans(), st.integers(1, 60))
def test_range_units_partition_a_file_into_whole_lines(tmp_path_factory, lines, final_newline, size):
    data = b"\n".join(lines) + (b"\n" if final_newline and lines else b"")
    p = tmp_path_factory.mktemp("u") / "f.txt"
    p.write_bytes(data)
    parts = [read_unit(u) for u in plan_units([InputFile(str(p), len(data), True)], size)]
    assert b"".join(parts) == data
    full = [part for part in parts if part]
    assert all(part.endswith(b"\n") for part in full[:-1])


def test_read_unit_of_a_missing_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="cannot read") as e:
        read_unit(Unit(0, 0, str(tmp_path / "gone"), 0, 10, False))
    assert e.value.path == str(tmp_path / "gone")


def test_run_area_layout_and_cleanup(tmp_path):
    area = prepare_run(tmp_path / "out", overwrite=False, run_id="r1")
    assert area.temp_url == f"{tmp_path / 'out'}/.tfpipe-tmp-r1"
    area.put_array("u0000000.len", np.arange(5, dtype=np.int32))
    assert area.get_array("u0000000.len", np.int32).tolist() == [0, 1, 2, 3, 4]
    (tmp_path / "out" / ".tfpipe-tmp-r1-train-00000.tfrecord").write_bytes(b"x")
    (tmp_path / "out" / ".tfpipe-tmp-r2-train-00000.tfrecord").write_bytes(b"other run")
    area.cleanup()                  # the run's files go; the claim on the output stays until release()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [".tfpipe-tmp-claim",
                                                                    ".tfpipe-tmp-r2-train-00000.tfrecord"]
    area.release()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [".tfpipe-tmp-r2-train-00000.tfrecord"]
    with pytest.raises(ValueError, match="run_id"):
        RunArea(str(tmp_path), "a/b")
