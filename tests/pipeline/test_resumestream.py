"""pipeline.graph.resumestream: ``resumable=True`` on a set streamed from S3 (moto's server, fixtures ``s3`` /
``moto_endpoint``) through a cache smaller than the set: the uninterrupted streamed run equals the local one,
a resume in the first and in the second epoch equals the uninterrupted run batch for batch, and the S3
server never sees a request for a shard before the entry point (requests recorded by a proxy in front of it);
ranks on two simulated hosts (a cache each) resume from rank 0's state, and one rank resumes a state of two."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest
from pipeline_data import batches_of, cache_bytes, write_indexed_set

from bench.infra.netlink import Link
from pipeline import PipelineSpec, build_dataset, input_state
from pipeline.resume.delayorder import chunk_size, delay_key, resume_point
from pipeline.resume.offsets import compute_offsets, ensure_index
from pipeline.graph.resumable import CHUNK_KEY, _file_order, _seed
from pipeline.spec.blocks import locate
from pipeline.graph.resumestream import entry

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
N, BATCH, SHARD = 3000, 64, 16 << 10      # 16 shards of ~16 KiB; 47 steps an epoch (the last one 56 records)
KW = dict(shuffle_buffer=100, seed=7, epochs=2, resumable=True)


class Recorder(Link):
    """A proxy in front of moto that records the shard names of the GET requests it passes on."""

    def __init__(self, port: int):
        super().__init__(port)
        self.gets: list[str] = []
        self._names = threading.Lock()

    def _fault(self, head: bytes):
        if head.startswith(b"GET ") and b".tfrecord" in head.split(b" ", 2)[1]:
            with self._names:
                self.gets.append(os.path.basename(head.split(b" ", 2)[1].decode().split("?")[0]))
        return super()._fault(head)


@pytest.fixture(scope="module")
def local_set(tmp_path_factory):
    """The set on local disk (written once, read only) and its Manifest."""
    local = tmp_path_factory.mktemp("local")
    return write_indexed_set(local, N, shard_bytes=SHARD), local


@pytest.fixture(scope="module")
def local_runs(local_set):
    """``local_runs(ranks)``: each rank's batches of the uninterrupted local run (``KW``), read once per module."""
    _, local = local_set
    done = {}

    def runs(ranks):
        if ranks not in done:
            done[ranks] = [batches_of(build_dataset(PipelineSpec.from_manifest(
                str(local), BATCH, num_shards=ranks, shard_index=i, **KW))) for i in range(ranks)]
        return done[ranks]
    return runs


@pytest.fixture
def remote(s3, local_set, monkeypatch):
    """The local set uploaded to a fresh bucket, and a ``Recorder`` in front of moto (AWS_ENDPOINT_URL)."""
    m, local = local_set
    for name in sorted(os.listdir(local)):
        s3.client.upload_file(str(local / name), s3.bucket, f"set/{name}")
    rec = Recorder(int(s3.endpoint.rsplit(":", 1)[1]))
    monkeypatch.setenv("AWS_ENDPOINT_URL", rec.endpoint)
    yield m, f"{s3.url}/set", str(local), rec
    rec.close()


def _streamed(url, m, stream_cache_dir, **extra):
    limit = 3 * max(s.bytes for s in m.shards)          # below the set's size: shards are evicted and re-fetched
    assert limit < sum(s.bytes for s in m.shards)
    return PipelineSpec.from_manifest(url, BATCH, stream_cache_dir=str(stream_cache_dir), stream_cache_limit=limit, read_ahead=1,
                                      **{**KW, **extra})


def _entry_files(spec, m, state) -> list[str]:
    """Shard names of the resumed epoch's files from the entry point on, in read order (the plan, recomputed)."""
    e, pos = state["epoch"], state["position"]
    order = [int(x) for x in _file_order(spec, e).numpy()]
    key = delay_key(_seed(spec.seed, e, CHUNK_KEY))
    q0, _, _ = resume_point(key, spec.shuffle_buffer, N, pos)
    j, _ = locate([spec.file_records[f] for f in order], q0 * chunk_size(spec.shuffle_buffer))
    return [m.shards[f].name for f in order[j:]]


def test_resumed_streams_equal_the_uninterrupted_run_and_fetch_from_the_entry_point_on(remote, local_runs, tmp_path):
    m, url, local, rec = remote
    full = local_runs(1)[0]
    assert len(full) == 94
    spec = _streamed(url, m, tmp_path / "c0")
    assert batches_of(build_dataset(spec)) == full                  # uninterrupted: streamed == local
    assert cache_bytes(str(tmp_path / "c0")) <= spec.stream.stream_cache_limit
    for i, steps in enumerate((35, 80)):                             # one in each epoch
        rec.gets.clear()
        spec = _streamed(url, m, tmp_path / f"c{i + 1}")             # a fresh host: nothing cached
        state = input_state(spec, steps)
        assert state["epoch"] == steps // 47
        assert batches_of(build_dataset(spec, resume=state)) == full[steps:]
        want = _entry_files(spec, m, state)
        assert len(want) < len(m.shards)                             # the entry point is past the first file
        assert rec.gets[:len(want)] == want                          # from the entry point on, in read order
        skipped = {s.name for s in m.shards} - set(want)
        if state["epoch"] == 1:                                      # the last epoch: nothing else is fetched
            assert rec.gets == want
        else:                                                        # the next epoch reads them all again
            assert not skipped & set(rec.gets[:len(want)])
        assert cache_bytes(str(tmp_path / f"c{i + 1}")) <= spec.stream.stream_cache_limit


def test_entered_shard_seeks_when_its_index_is_cached(remote, local_runs, tmp_path):
    m, url, local, _ = remote
    full = local_runs(1)[0]
    for s in m.shards:                   # indexes named by the shard's sha256: as `tfpipe pipeline offsets` makes
        ensure_index(os.path.join(local, s.name), records=s.records, sha256=s.sha256)
    shard = m.shards[3]
    path = os.path.join(local, shard.name)
    offset, skip = entry(path, 10, shard.records, shard.sha256, compressed=False)
    assert (offset, skip) == (int(compute_offsets(path)[10]), 0)
    assert entry(path, 10, shard.records, shard.sha256, compressed=True) == (0, 10)
    spec = _streamed(url, m, tmp_path / "c")
    for steps in (5, 52):
        assert batches_of(build_dataset(spec, resume=input_state(spec, steps))) == full[steps:]


def test_uncached_shard_is_read_from_its_start(tmp_path, monkeypatch):
    monkeypatch.setenv("TFPIPE_CACHE", str(tmp_path / "cache"))     # no index cached for it
    m = write_indexed_set(tmp_path / "s", 500, shard_bytes=SHARD)
    shard = m.shards[0]
    assert entry(str(tmp_path / "s" / shard.name), 7, shard.records, shard.sha256, compressed=False) == (0, 7)


def test_ranks_on_two_hosts_resume_from_rank_0s_state_and_a_new_world_size_keeps_the_order(remote, local_runs,
                                                                                             tmp_path):
    """Two hosts share nothing but the bucket (a cache each); rank 0's state resumes both; one rank resumes a
    state of two: the rest of the epoch is the same records in the same global order."""
    m, url, local, rec = remote
    two = local_runs(2)
    assert len(two[0]) == 46                                         # 23 steps an epoch on each of 2 ranks
    hosts = [_streamed(url, m, tmp_path / f"host{i}", num_shards=2, shard_index=i) for i in range(2)]
    state = input_state(hosts[0], 40)                                # saved by rank 0 (epoch 1)
    assert state == input_state(hosts[1], 40)                        # every rank computes the same state
    want = _entry_files(hosts[0], m, state)
    assert len(want) < len(m.shards)
    for i, host in enumerate(hosts):
        rec.gets.clear()
        assert batches_of(build_dataset(host, resume=state)) == two[i][40:]
        assert rec.gets == want                                      # each host fetches from the entry point on
        assert 0 < cache_bytes(str(tmp_path / f"host{i}")) <= host.stream.stream_cache_limit
    order = [x for b in local_runs(1)[0] for x in b]                 # epoch 0's global order, then epoch 1's
    early = input_state(hosts[0], 10)                                # 1,280 records of epoch 0 consumed
    resumed = _streamed(url, m, tmp_path / "host2")                  # a third host, one rank
    got = [x for b in batches_of(build_dataset(resumed, resume=early)) for x in b]
    assert got == order[10 * 2 * BATCH:]


RANK = """
import json, sys
from converters.cli.quiet import lean_tensorflow_import
lean_tensorflow_import()                # a rank needs no Keras (TensorFlow then starts in about a third less CPU)
from pipeline import PipelineSpec, build_dataset
a = json.loads(sys.argv[1])
spec = PipelineSpec.from_manifest(a["url"], a["batch"], stream_cache_dir=a["stream_cache_dir"], stream_cache_limit=a["limit"],
                                  read_ahead=1, num_shards=2, shard_index=a["rank"], **a["kw"])
out = [[int(x) for x in label.numpy()] for _, label in build_dataset(spec, resume=a["state"])]
open(a["out"], "w").write(json.dumps(out))
"""


def test_two_rank_processes_on_two_hosts_resume_together(remote, local_runs, tmp_path):
    """Two processes, a cache directory each (two hosts sharing only the bucket), started together on rank 0's
    state, read their uninterrupted batches."""
    m, url, local, _ = remote
    two = local_runs(2)
    state = input_state(_streamed(url, m, tmp_path / "saver", num_shards=2, shard_index=0), 15)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.path.join(ROOT, "tests")])}
    limit = 3 * max(s.bytes for s in m.shards)
    procs = [subprocess.Popen([sys.executable, "-c", RANK, json.dumps(
        {"url": url, "batch": BATCH, "stream_cache_dir": str(tmp_path / f"host{i}"), "limit": limit, "rank": i,
         "kw": KW, "state": state, "out": str(tmp_path / f"rank{i}.json")})], env=env) for i in range(2)]
    for p in procs:
        assert p.wait(timeout=600) == 0
    for i in range(2):
        assert json.loads((tmp_path / f"rank{i}.json").read_text()) == two[i][15:]
        assert 0 < cache_bytes(str(tmp_path / f"host{i}")) <= limit
