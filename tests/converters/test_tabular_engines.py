"""One job on every engine, the same bytes: run_job in this process, the local engine's process pool and Beam
(a tiny input: Beam is slow to start); and the pre-pass's (counting's) bounded memory: sorted runs spilled past the
limit and merged in chunks give the exact counts."""
from __future__ import annotations

import logging
from collections import Counter

import numpy as np
import pytest
import tabularref as R

from converters.engines.inprocess import run_job
from converters.shardset.options import ShardOutputOptions
from converters.tabular import convert
from converters.tabular.convert import run
from converters.tabular.job import TabularJob
from converters.tabular.options import TabularOptions
from converters.tabular.vocab import ColumnCounter, merge_runs
from converters.tabular.vocabwrite import write_vocabulary


def _files(out):
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and p.name != "index.json"}


@pytest.fixture(scope="module")
def days(tmp_path_factory):
    d = tmp_path_factory.mktemp("days")
    for k in range(3):
        R.write_day(d / f"day_{k}", R.day_lines(20 + k, 150))
    return d


def _opts(**kw):
    return TabularOptions(output=ShardOutputOptions(shard_size=9000), negative_rate=0.7, seed=1, **kw)


@pytest.mark.parametrize("split", [False, True], ids=["whole-shards", "shards-in-parts"])
@pytest.mark.parametrize("kw", [{}, {"target": "dlrm", "min_count": 2}])
def test_local_pool_and_inprocess_write_the_same_bytes(days, tmp_path, kw, split, monkeypatch, caplog):
    """Two processes: the vocabulary step's columns on both, and (``split``) every shard written in parts at
    once (``engines.splitwrite``, here from any size): the bytes of one process."""
    from converters.engines import splitwrite

    inputs = [str(days / f"day_{k}") for k in range(3)]
    a = run_job(TabularJob.create(inputs, str(tmp_path / "a"), _opts(**kw), chunk_rows=50))
    monkeypatch.setattr(convert, "BYTES_PER_WORKER", 1)  # these small days would get one process
    if split:
        monkeypatch.setattr(splitwrite, "SPLIT_MIN_BYTES", 1)
    with caplog.at_level(logging.DEBUG, logger="converters.engines"):
        b = run(inputs, str(tmp_path / "b"), _opts(**kw), workers=2, chunk_rows=50)
    assert "starting 1 worker process(es)" in caplog.text
    assert ("written in 2 parts at once" in caplog.text) == split
    fa, fb = _files(tmp_path / "a"), _files(tmp_path / "b")
    assert len(a.shards) > 2 and fa == fb and any(k.startswith("vocab/") for k in fa)
    assert [(s.records, s.bytes, s.sha256) for s in a.shards] == [(s.records, s.bytes, s.sha256) for s in b.shards]
    assert not [p for p in (tmp_path / "b").iterdir() if p.name.startswith(".tfpipe-tmp")]


M = 1 << 20


def test_a_gzip_shard_is_written_whole(days, tmp_path, monkeypatch, caplog):
    from converters.engines import splitwrite

    inputs = [str(days / f"day_{k}") for k in range(3)]
    opts = TabularOptions(output=ShardOutputOptions(shard_size=9000, compression="gzip"), seed=1)
    a = run_job(TabularJob.create(inputs, str(tmp_path / "a"), opts))
    monkeypatch.setattr(convert, "BYTES_PER_WORKER", 1)
    monkeypatch.setattr(splitwrite, "SPLIT_MIN_BYTES", 1)
    with caplog.at_level(logging.DEBUG, logger="converters.engines"):
        run(inputs, str(tmp_path / "b"), opts, workers=2)
    assert "parts at once" not in caplog.text
    assert _files(tmp_path / "a") == _files(tmp_path / "b") and len(a.shards) > 1


@pytest.mark.parametrize("processes, sizes, unit", [
    (1, [700 * M], None),              # one process reads each file whole
    (2, [700 * M], 175 * M),         # two processes, about four units
    (2, [40 * M] * 3, 32 * M),       # never below 32 M
    (4, [10 * M, 400 * M], 51 * M + 256 * 1024),
])
def test_a_run_of_n_processes_reads_about_2n_units(processes, sizes, unit):
    from converters.engines.units import Unit
    from converters.tabular.job import WHOLE

    units = [Unit(k, k, f"f{k}", 0, n, False) for k, n in enumerate(sizes)]
    assert convert.unit_bytes_for(units, processes) == (WHOLE if unit is None else unit)


@pytest.mark.parametrize("layout", ["example", "columnar"])
def test_shard_bytes_do_not_depend_on_the_chunk_size(days, tmp_path, layout):
    inputs = [str(days / f"day_{k}") for k in range(3)]
    blocks = {"block_rows": 16} if layout == "columnar" else {}
    opts = TabularOptions(output=ShardOutputOptions(shard_size=9000, layout=layout, **blocks),
                          negative_rate=0.7, seed=1)
    files = []
    for k, rows in enumerate([7, 50, None]):  # chunks smaller than, cut across and larger than the shards
        job = TabularJob.create(inputs, str(tmp_path / f"o{k}"), opts, chunk_rows=rows)
        m = run_job(job)
        files.append(_files(tmp_path / f"o{k}"))
    assert len(m.shards) > 2 and job.rows_per_chunk > m.records
    assert files[0] == files[1] == files[2]


def test_beam_writes_the_same_bytes(days, tmp_path):
    pytest.importorskip("apache_beam")
    from converters.engines import beam

    inputs = [str(days / "day_0"), str(days / "day_1")]
    run_job(TabularJob.create(inputs, str(tmp_path / "a"), _opts(), chunk_rows=50))
    m = beam.convert("tabular", inputs, str(tmp_path / "b"), _opts(), chunk_rows=50)
    assert m.extra["negatives_kept"] > 0
    assert _files(tmp_path / "a") == _files(tmp_path / "b")
    assert (tmp_path / "a" / "index.json").read_text().replace("/a", "/b") == \
        (tmp_path / "b" / "index.json").read_text()


class _Area:
    """The temporary area's array calls on a dict (what ColumnCounter and merge_runs use)."""

    def __init__(self):
        self.files: dict[str, bytes] = {}

    def put_array(self, name, a):
        self.files[name] = np.ascontiguousarray(a).tobytes()

    def get_range(self, name, a, b):
        return self.files[name][a:b]


def test_spilled_runs_merge_to_the_exact_counts(tmp_path):
    rng = np.random.default_rng(0)
    area, counters, truth = _Area(), [], Counter()
    for task in range(3):
        c = ColumnCounter(area, f"u{task}", hold=1 << 15)  # the least a share gives: blocks spill
        for _ in range(6):
            vals = np.array([b"%x" % v for v in rng.zipf(1.3, 6000) % 50_000] + [b""] * 10, dtype="S")
            truth.update(v for v in vals.tolist() if v)
            c.add(vals)
        counters.append(c)
    runs = [r for c in counters for r in c.finish()]
    assert len(runs) >= 6  # more than one run per task
    seen = 0
    for v, n in merge_runs(area, runs, chunk=500):  # small chunks: many rounds of the k-way merge
        assert (v[1:] > v[:-1]).all()
        assert all(truth[bytes(x)] == int(k) for x, k in zip(v.tolist(), n))
        seen += v.size
    assert seen == len(truth)
    write_vocabulary(lambda: merge_runs(area, runs, chunk=500), 3, str(tmp_path / "vocab"), lambda k, i: None)
    want = [v for v, k in sorted(truth.items(), key=lambda kv: (kv[1], kv[0]), reverse=True) if k >= 3]
    assert (tmp_path / "vocab").read_bytes().splitlines() == want


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 8])
def test_long_values_merge_in_byte_order_with_the_short_ones(chunk):
    """Values of more than ``vocablong.LONG`` bytes (their own runs and merge) among short ones, many sharing
    their first LONG + 1 bytes or ending in NULs once cut there: one ascending stream of exact counts, in
    chunks of a few values (the two merges woven at every step)."""
    rng = np.random.default_rng(1)
    pool = [b"a" * n + tail for n in (5, 127, 128, 129, 300) for tail in (b"", b"b", b"\x00c", b"\x00" * 200 + b"d")]
    area, truth, runs = _Area(), Counter(), []
    for task in range(3):
        c = ColumnCounter(area, f"u{task}", hold=1 << 30)
        for _ in range(4):
            vals = [pool[i] for i in rng.integers(0, len(pool), 50)]
            truth.update(vals)
            c.add(np.array(vals, dtype="S"))
            c.spill()  # a run per block
        runs += c.finish()
    assert sum(r.long > 0 for r in runs) == 12
    got = [(bytes(x), int(n)) for v, c in merge_runs(area, runs, chunk=chunk) for x, n in zip(v.tolist(), c)]
    assert got == sorted(truth.items())


MiB = 1 << 20


@pytest.mark.parametrize("asked, sizes, used, suffix", [
    (4, [10 * MiB] * 3, 1, ""),         # 30 MiB: work for one process
    (4, [40 * MiB] * 3, 4, ""),         # 120 MiB in six units (a file over 32 MiB is read in 32 MiB ranges)
    (2, [100 * MiB], 2, ""),            # one file, four units
    (1, [40 * MiB] * 3, 1, ""),
    (8, [20 * MiB] * 5, 4, ""),         # 100 MiB: one process per 32 MiB started
    (3, [33 * MiB, 0], 2, ""),
    (4, [100 * MiB], 1, ".gz"),         # a compressed file is one unit
], ids=["small", "three-files", "one-file", "one-asked", "per-32-mib", "just-over", "compressed"])
def test_processes_follow_the_work_the_input_has(tmp_path, asked, sizes, used, suffix):
    from converters.tabular.job import TabularJob
    from converters.tabular.options import TabularOptions

    paths = []
    for k, n in enumerate(sizes):
        p = tmp_path / f"day_{k}{suffix}"
        with open(p, "wb") as f:
            f.truncate(n)  # sparse: the sizes count, not the bytes
        paths.append(str(p))
    job = TabularJob.create(paths, tmp_path / "out", TabularOptions())
    try:
        assert convert.worker_count(asked, job.units()) == used
    finally:
        job.area.cleanup()
        job.area.release()


def _manifest_inputs(out):
    import json

    return json.loads((out / "index.json").read_text())["inputs"]


@pytest.mark.parametrize("case", ["vocabulary", "hashing-no-counting", "skip-bad-rows", "csv", "raise"])
def test_a_file_read_in_byte_ranges_writes_the_same_bytes(tmp_path, case):
    """A file cut into many units (line-aligned byte ranges, read by independent steps) converts to the bytes
    and accounting of the file read whole: line numbers (errors, skip samples, --negative-rate's draw) count
    from the file's start."""
    from converters.util.errors import InputError

    lines = R.day_lines(31, 400)
    kw = {"negative_rate": 0.6, "seed": 3}
    if case in ("skip-bad-rows", "raise"):
        for k in (5, 170, 333):
            lines[k] = lines[k].replace("\t", "\t7x", 1)
        kw["output"] = ShardOutputOptions(shard_size=9000, on_error="skip" if case == "skip-bad-rows" else "raise")
    else:
        kw["output"] = ShardOutputOptions(shard_size=9000)
    if case == "hashing-no-counting":
        kw["hash_buckets"] = 1000
    path = tmp_path / ("day.csv" if case == "csv" else "day")
    if case == "csv":
        from converters.tabular.schema import CRITEO

        path.write_text(",".join(c.name for c in CRITEO.columns) + "\n" +
                        "\n".join(x.replace("\t", ",") for x in lines) + "\n")
    else:
        R.write_day(path, lines)
    opts = TabularOptions(**kw)
    outs = []
    for unit in (1 << 30, 4999, 20011):
        job = TabularJob.create([str(path)], str(tmp_path / f"o{unit}"), opts, chunk_rows=64, unit_bytes=unit)
        assert (len(job.units()) > 2) == (unit < 1 << 30)
        assert job.needs_prepass == (unit < 1 << 30 or case != "hashing-no-counting")
        if case == "raise":
            with pytest.raises(InputError) as e:
                run_job(job)
            outs.append((e.value.line, str(e.value)))
            continue
        run_job(job)
        outs.append((_files(tmp_path / f"o{unit}"), _manifest_inputs(tmp_path / f"o{unit}")))
    assert outs[0] == outs[1] == outs[2]
    if case == "raise":
        assert outs[0][0] == 6
    elif case == "skip-bad-rows":
        assert outs[0][1][0]["skipped"] == {"not_an_integer": 3, "sampled_out": outs[0][1][0]["skipped"]["sampled_out"]}
