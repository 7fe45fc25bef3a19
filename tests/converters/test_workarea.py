"""The Processing instances' work area (markers, waiting, failures, removal) on a local directory and in S3,
and the finalizer's output checks and idempotent publish (``converters.engines.processing.finalize``)."""
from __future__ import annotations

import pytest
from moto_s3 import keys

from converters.shardset.manifest import MANIFEST_NAME
from converters.storage import open_storage
from converters.util.errors import OutputExistsError, TfpipeError
from converters.engines.processing.finalize import check_output, publish
from converters.engines.processing.workarea import WaitError, WorkArea


class FakeClock:
    def __init__(self):
        self.t = 0.0
        self.sleeps = []

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.sleeps.append(s)
        self.t += s


@pytest.fixture(params=["local", "s3"])
def out(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "out")
    return f"{request.getfixturevalue('s3').url}/out"


def test_markers_are_stamped_with_the_job(out):
    a1, a2 = WorkArea(out, "r1", job="job-1"), WorkArea(out, "r1", job="job-2")
    a1.mark("parts", "algo-1", {"n": 1})
    assert a1.marker("parts", "algo-1")["n"] == 1
    assert a2.marker("parts", "algo-1") is None  # an earlier job's marker is not this job's
    assert a2.marker("parts", "algo-1", any_job=True)["job"] == "job-1"  # ... but may be reused
    a2.unmark("parts", "algo-1")
    assert a1.marker("parts", "algo-1") is None
    a1.unmark("parts", "algo-9")  # nothing to remove: fine


def test_wait_returns_every_marker(out):
    area = WorkArea(out, "r1", job="j")
    for h in ("algo-1", "algo-2"):
        area.mark("parts", h, {"h": h})
    got = area.wait("parts", ["algo-1", "algo-2"], timeout=1, poll=0.01)
    assert {h: m["h"] for h, m in got.items()} == {"algo-1": "algo-1", "algo-2": "algo-2"}


def test_wait_times_out_naming_the_missing_hosts(tmp_path):
    area = WorkArea(str(tmp_path / "out"), "r1", job="j")
    area.mark("parts", "algo-1", {})
    WorkArea(str(tmp_path / "out"), "r1", job="old").mark("parts", "algo-3", {})  # stale: does not count
    clock = FakeClock()
    with pytest.raises(WaitError, match=r"gave up after 30 s waiting for the part of algo-2, algo-3 \(1 of 3") as e:
        area.wait("parts", ["algo-1", "algo-2", "algo-3"], timeout=30, poll=7, clock=clock, sleep=clock.sleep)
    assert e.value.hosts == ("algo-2", "algo-3")
    assert sum(clock.sleeps) == 30 and max(clock.sleeps) == 7  # polls every 7 s, never past the deadline


def test_wait_stops_at_a_failure_of_this_job(tmp_path):
    out = str(tmp_path / "out")
    WorkArea(out, "r1", job="old").fail("algo-3", "an old failure")  # an earlier job's: ignored
    area = WorkArea(out, "r1", job="j")
    area.mark("parts", "algo-1", {})
    area.fail("algo-2", "in/train/b.txt:2: bad label")
    clock = FakeClock()
    with pytest.raises(WaitError, match=r"algo-2 failed: in/train/b.txt:2: bad label") as e:
        area.wait("parts", ["algo-1", "algo-2", "algo-3"], timeout=3600, clock=clock, sleep=clock.sleep)
    assert e.value.hosts == ("algo-2",) and clock.t == 0


def test_a_damaged_marker_is_named(tmp_path):
    area = WorkArea(str(tmp_path / "out"), "r1")
    area.storage("parts").write_bytes_atomic("algo-1.json", b"{half")
    with pytest.raises(TfpipeError, match=r"parts/algo-1.json is not valid JSON .*: remove it and rerun"):
        area.marker("parts", "algo-1")


def test_remove_deletes_the_whole_area_and_nothing_else(s3):
    out = f"{s3.url}/set"
    open_storage(out).write_bytes_atomic("keep.txt", b"x")
    area = WorkArea(out, "r1")
    for i in range(3):
        area.mark(f"phase{i}", "algo-1", {})
    area.storage("part-algo-1").write_bytes_atomic("train-00000-of-00001.tfrecord", b"y")
    assert len(keys(s3, "set/.tfpipe-tmp-r1/")) == 4
    area.remove()
    assert keys(s3) == ["set/keep.txt"]


@pytest.mark.parametrize("names, overwrite, planned, match, left", [
    ([], False, None, None, []),
    (["train-00000-of-00002.tfrecord"], False, None, None, ["train-00000-of-00002.tfrecord"]),
    ([MANIFEST_NAME, "train-00000-of-00001.tfrecord"], False, None, "not empty .*overwrite=True", None),
    (["notes.txt"], True, None, "files tfpipe did not write \\(notes.txt\\)", None),
    (["train-00000-of-00002.tfrecord"], False, ["train-00000-of-00002.tfrecord"], None,
     ["train-00000-of-00002.tfrecord"]),  # published by an interrupted finalize of this run
    (["train-00000-of-00003.tfrecord"], False, ["train-00000-of-00002.tfrecord"], "not empty", None),
    ([MANIFEST_NAME, "train-00000-of-00003.tfrecord", "train-00000-of-00002.tfrecord"], True,
     ["train-00000-of-00002.tfrecord"], None, ["train-00000-of-00002.tfrecord"]),
])
def test_check_output(tmp_path, names, overwrite, planned, match, left):
    storage = open_storage(str(tmp_path / "out"))
    for n in names:
        storage.write_bytes_atomic(n, b"x")
    WorkArea(str(tmp_path / "out"), "r1").mark("parts", "algo-1", {})  # the work area never counts
    if match:
        with pytest.raises(OutputExistsError, match=match):
            check_output(storage, overwrite=overwrite, planned=planned)
        return
    before = storage.list()
    obsolete = check_output(storage, overwrite=overwrite, planned=planned)
    assert storage.list() == before  # nothing goes before the new set commits (shardset.commit)
    assert [n for n in names if n != MANIFEST_NAME and n not in obsolete] == left


def test_publish_is_idempotent(out):
    storage = open_storage(out)
    area = WorkArea(out, "r1")
    area.storage("part-algo-1").write_bytes_atomic("a", b"12345")
    area.storage("part-algo-1").write_bytes_atomic("b", b"678")
    moves = [(f"{area.name}/part-algo-1/a", "final-a", 5), (f"{area.name}/part-algo-1/b", "final-b", 3)]
    publish(storage, moves[:1])  # interrupted after the first move
    publish(storage, moves)  # the rerun finishes it
    assert storage.read_bytes("final-a") == b"12345" and storage.read_bytes("final-b") == b"678"
    with pytest.raises(TfpipeError, match="is missing and final-c does not hold it"):
        publish(storage, [(f"{area.name}/part-algo-1/c", "final-c", 1)])
