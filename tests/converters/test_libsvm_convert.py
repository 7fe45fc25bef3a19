"""LibSVM files -> shard set: round trips through real TensorFlow, determinism across workers, shard
limits, GZIP, compressed inputs, skip accounting, errors, kill/rerun and bounded memory."""
import bz2
import gzip
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tfread import read_back

from converters.libsvm.convert import convert_libsvm
from converters.libsvm.options import LibsvmOptions
from converters.libsvm.synthetic import criteo_arrays, criteo_lines
from converters.libsvm.workers import byte_ranges, read_range
from converters.shardset.manifest import MANIFEST_NAME
from converters.shardset.naming import ShardName
from converters.shardset.options import ShardOutputOptions
from converters.shardset.reader import read_manifest
from converters.shardset.verify import verify
from converters.util.errors import InputError, OutputExistsError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def criteo_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("in") / "criteo.libsvm"
    p.write_bytes(criteo_lines(3000, seed=0))
    return p


def dir_bytes(path):
    return {n: open(os.path.join(path, n), "rb").read() for n in sorted(os.listdir(path))}


# -- round trips -----------------------------------------------------------------------------------------

def test_round_trip_through_tensorflow(criteo_file, tmp_path):
    m = convert_libsvm(criteo_file, tmp_path / "out", field_size=39, shard_size=200_000, workers=1, index_base=1)
    a = criteo_arrays(3000, seed=0)  # zero-based ids: the one-based text shifted on request (--index-base 1)
    got = read_back(m)
    assert np.array_equal(got["label"], a["label"])
    assert np.array_equal(got["ids"], a["ids"])
    assert np.array_equal(got["values"].view(np.uint32), a["values"].view(np.uint32))
    assert m.records == 3000 and len(m.shards) > 1
    assert all(s.bytes <= 200_000 for s in m.shards)
    assert m.options["index_base_used"] == 1 and m.kind == "libsvm"
    assert m.inputs[0].records_read == m.inputs[0].records_written == 3000
    assert verify(str(tmp_path / "out")).records == 3000
    assert read_manifest(tmp_path / "out").to_json() == m.to_json()


def test_edge_cases_equal_sklearn_through_tensorflow(tmp_path):
    from sklearn.datasets import load_svmlight_file
    from test_libsvm import EDGE_FILE

    p = tmp_path / "edge.libsvm"
    p.write_bytes(EDGE_FILE)
    m = convert_libsvm(p, tmp_path / "out", field_size=3, workers=1, label_key="y", ids_key="i",
                       values_key="v", index_base="auto", strict_ids=True)  # scikit-learn's rules, on request
    X, y = load_svmlight_file(str(p), dtype=np.float64)  # index base 'auto' in both
    got = read_back(m)
    assert np.array_equal(got["y"].view(np.uint32), y.astype(np.float32).view(np.uint32))
    assert np.array_equal(got["i"].ravel(), X.indices)
    assert np.array_equal(got["v"].ravel().view(np.uint32), X.data.astype(np.float32).view(np.uint32))
    assert m.inputs[0].blank_lines == 3 and m.extra["blank_lines"] == 3
    assert sorted(m.schema.to_json()["features"]) == ["i", "v", "y"]


@pytest.mark.parametrize("sizes,block,expected", [
    ([1000], 4096, 1),                       # one byte range
    ([10_000], 4096, 3),                     # 4096 + 4096 + 1808
    ([8192], 4096, 2),                       # exactly two blocks
    ([100, 200, 300], 4096, 1),              # small files packed into one task
    ([3000, 3000], 4096, 2),                 # two packs: the second file does not fit beside the first
    ([100, 10_000, 100], 4096, 5),           # pack, three ranges, pack
    ([0], 4096, 1),                          # an empty file is a pack of its own
])
def test_task_count_counts_packs_and_byte_ranges(tmp_path, sizes, block, expected):
    from converters.libsvm.workers import task_count

    paths = []
    for i, n in enumerate(sizes):
        paths.append(str(tmp_path / f"f{i}.txt"))
        open(paths[-1], "wb").write(b"x" * n)
    assert task_count(paths, block) == expected
    assert min(expected, 2) <= task_count(paths, block, at_most=2) <= expected


def test_task_count_up_to_a_bound_looks_no_further(tmp_path):
    """Counted up to the workers there are: inputs past that point are not looked up (an S3 object each)."""
    from converters.libsvm.workers import task_count

    (tmp_path / "big.txt").write_bytes(b"x" * 10_000)
    paths = [str(tmp_path / "big.txt"), str(tmp_path / "gone.txt")]
    assert task_count(paths, 4096, at_most=2) == 3
    with pytest.raises(OSError):
        task_count(paths, 4096)


def test_task_count_of_a_compressed_input_is_unknown(tmp_path):
    from converters.libsvm.workers import task_count

    (tmp_path / "a.txt").write_bytes(b"1 1:1\n")
    (tmp_path / "b.txt.gz").write_bytes(gzip.compress(b"1 1:1\n"))
    assert task_count([str(tmp_path / "a.txt"), str(tmp_path / "b.txt.gz")], 4096) is None


@pytest.mark.parametrize("layout,workers,block,expected", [
    ("example", None, 4 << 20, None),   # by default: one task, so no worker process at all
    ("example", None, 64 << 10, 2),     # by default: all cores (2 here, set below), as many tasks as that
    ("example", 2, 4 << 20, None),      # asked for: no more than the tasks either
    ("example", 3, 64 << 10, 3),
    ("columnar", None, 64 << 10, None),  # the two-pass job's tasks are its units: one for a small input
    ("columnar", 2, 64 << 10, None),
])
def test_workers_are_at_most_the_tasks(criteo_file, tmp_path, monkeypatch, layout, workers, block, expected):
    """The pool a conversion starts (the real one, recorded on its way), and the same bytes whatever it was."""
    from converters.libsvm import convert

    started = []

    class Recorded(convert.Pool):
        def __init__(self, n, *args):
            started.append(n)
            super().__init__(n, *args)

    monkeypatch.setattr(convert, "Pool", Recorded)
    monkeypatch.setattr(convert, "cpu_count", lambda: 2)
    kw = dict(field_size=39, shard_size=150_000, layout=layout)
    convert_libsvm(criteo_file, tmp_path / "o", workers=workers, block_bytes=block, **kw)
    assert started == ([] if expected is None else [expected])
    convert_libsvm(criteo_file, tmp_path / "one", workers=1, **kw)
    assert dir_bytes(tmp_path / "o") == dir_bytes(tmp_path / "one")


def test_byte_identical_whatever_the_workers(criteo_file, tmp_path):
    """Small blocks' records come back through the pool's pipe, larger ones (400 KiB of text) through its
    scratch directory in memory (``util.shmbytes``): the same shards either way."""
    runs = []
    for workers, block in ((1, 64 << 10), (2, 64 << 10), (2, 200 << 10), (2, 400 << 10), (1, 1 << 20)):
        out = tmp_path / f"w{workers}-{block}"
        convert_libsvm(criteo_file, out, field_size=39, shard_size=150_000, workers=workers, block_bytes=block)
        runs.append(dir_bytes(out))
    assert len(runs[0]) > 3
    assert all(r == runs[0] for r in runs[1:])


@pytest.mark.parametrize("limit", [1_000, 50_000, 333_333])
def test_shards_are_closed_before_the_limit(criteo_file, tmp_path, limit):
    m = convert_libsvm(criteo_file, tmp_path / "o", field_size=39, shard_size=limit, workers=1)
    sizes = [s.bytes for s in m.shards]
    assert all(b <= limit or s.records == 1 for b, s in zip(sizes, m.shards))
    assert sum(s.records for s in m.shards) == 3000
    names = [ShardName.parse(s.name) for s in m.shards]
    assert len(names) == len(m.shards)


def test_gzip_shards(criteo_file, tmp_path):
    m = convert_libsvm(criteo_file, tmp_path / "gz", field_size=39, compression="gzip", workers=1,
                       shard_size=300_000, index_base=1)
    assert all(s.name.endswith(".tfrecord.gz") for s in m.shards)
    assert np.array_equal(read_back(m)["ids"], criteo_arrays(3000, seed=0)["ids"])
    assert verify(str(tmp_path / "gz")).records == 3000


def test_compressed_inputs_give_the_same_shards(criteo_file, tmp_path):
    import zstandard

    raw = criteo_file.read_bytes()
    (tmp_path / "in").mkdir()
    (tmp_path / "in/a.libsvm.gz").write_bytes(gzip.compress(raw))
    (tmp_path / "in/b.libsvm.bz2").write_bytes(bz2.compress(raw))
    (tmp_path / "in/c.libsvm.zst").write_bytes(zstandard.ZstdCompressor().compress(raw[:100_000])
                                               + zstandard.ZstdCompressor().compress(raw[100_000:]))
    m = convert_libsvm(tmp_path / "in", tmp_path / "out", field_size=39, workers=2, block_bytes=100_000)
    plain = convert_libsvm([criteo_file] * 1, tmp_path / "plain", field_size=39, workers=1)
    assert m.records == 9000
    assert [i.records_written for i in m.inputs] == [3000, 3000, 3000]
    got = read_back(m)
    want = read_back(plain)
    for k in got:
        assert np.array_equal(got[k], np.concatenate([want[k]] * 3))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")), max_size=20), st.booleans(),
       st.integers(1, 64))
def test_worker_ranges_partition_the_file_into_whole_lines(tmp_path_factory, lines, final_newline, block):
    data = b"\n".join(lines) + (b"\n" if final_newline and lines else b"")
    p = tmp_path_factory.mktemp("r") / "f.txt"
    p.write_bytes(data)
    pieces = [read_range(str(p), a, b) for a, b in byte_ranges(str(p), block)]
    assert b"".join(pieces) == data
    full = [x for x in pieces if x]
    assert all(x.endswith(b"\n") for x in full[:-1])


def test_long_lines_and_many_workers_number_lines_like_one_worker(tmp_path):
    long = b"1 " + b" ".join(b"%d:1" % i for i in range(1, 400)) + b"\n"   # longer than a block
    p = tmp_path / "x.txt"
    p.write_bytes(b"1 1:1\n" * 7 + long + b"1 2:1 1:1\n" + long * 3 + b"abc\n" + b"1 1:1\n" * 5)
    ms = [convert_libsvm(p, tmp_path / f"o{w}", field_size=1, workers=w, block_bytes=300, on_error="skip",
                         truncate=True, strict_ids=True) for w in (1, 3)]
    assert ms[0].inputs[0].examples == ms[1].inputs[0].examples == [
        f"{p}:9: unsorted_index: indices are not sorted in increasing order ('1:1')",
        f"{p}:13: bad_label: label is not a number ('abc')"]
    assert dir_bytes(tmp_path / "o1") == dir_bytes(tmp_path / "o3")


# -- positional ids (the fixed-width default) -----------------------------------------------------------

DEEPFM = b"1 1:0.5 2:0.1 3:0 13:0.2 13:1.0 580:1\n0 1:1 2:2 3:3 13:4 14:1 600:1\n"


@pytest.mark.parametrize("workers,block", [(1, 1 << 20), (2, 40), (2, 1 << 20)])
def test_fixed_width_ids_are_positional_by_default(tmp_path, workers, block):
    """Ids as written (no base shift), in line order, repeats kept; the rows with a repeat counted per input
    (small files go through packs, a larger one through blocks); --strict-ids refuses them as before."""
    (tmp_path / "in").mkdir()
    for k in range(3):
        (tmp_path / f"in/d{k}.txt").write_bytes(DEEPFM * (k + 1))
    m = convert_libsvm(tmp_path / "in", tmp_path / "o", field_size=6, workers=workers, block_bytes=block)
    assert m.options["index_base"] == m.options["index_base_used"] == "asis"
    assert m.options["ids"].startswith("positional") and m.options["strict_ids"] is False
    assert read_back(m)["ids"].tolist()[:2] == [[1, 2, 3, 13, 13, 580], [1, 2, 3, 13, 14, 600]]
    assert [i.notes for i in m.inputs] == [{"ids_unordered": k + 1} for k in range(3)]
    assert m.records == 12 and m.skipped == {}
    stored = json.loads((tmp_path / "o" / MANIFEST_NAME).read_text())
    assert stored["inputs"][2]["notes"] == {"ids_unordered": 3}
    assert read_manifest(tmp_path / "o").inputs[2].notes == {"ids_unordered": 3}
    with pytest.raises(InputError, match=r"d0.txt:1: duplicate_index"):
        convert_libsvm(tmp_path / "in", tmp_path / "s", field_size=6, workers=workers, strict_ids=True)
    one = convert_libsvm(tmp_path / "in", tmp_path / "b1", field_size=6, workers=1, index_base=1)
    assert read_back(one)["ids"].tolist()[0] == [0, 1, 2, 12, 12, 579]  # a shift only on request


# -- options, index base ------------------------------------------------------------------------------

def test_index_base_auto_is_decided_over_all_inputs(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"1 1:1 2:1\n" * 3)
    (tmp_path / "b.txt").write_bytes(b"0 0:1 5:1\n")
    m = convert_libsvm([tmp_path / "a.txt", tmp_path / "b.txt"], tmp_path / "o", field_size=2, workers=1,
                       index_base="auto")
    assert m.options["index_base"] == "auto" and m.options["index_base_used"] == 0
    assert read_back(m)["ids"].tolist() == [[1, 2]] * 3 + [[0, 5]]
    m1 = convert_libsvm(tmp_path / "a.txt", tmp_path / "o1", field_size=2, workers=1, index_base="auto")
    assert m1.options["index_base_used"] == 1
    assert read_back(m1)["ids"].tolist() == [[0, 1]] * 3


@pytest.mark.parametrize("window", [1, 7, 16, 1 << 20])
@pytest.mark.parametrize("text,want", [
    (b"1 1:1\n" * 9 + b"1 2:1 0:1\n" + b"1 1:1\n" * 9, True),
    (b"1 1:1\n" * 9 + b"1 2:1 10:1\n", False),
    (b"1 3:1 # 0:1\n1 1:1", False),
    (b"1 1:1\n1 1:1 0:5", True),            # no final newline
    (b"1" + b" " * 40 + b"0:1\n", True),     # one line longer than the window
    (b"", False),
])
def test_index_base_pre_pass_over_a_mapped_file(tmp_path, text, window, want):
    """The pre-pass maps plain files and scans them in windows of whole lines (pages dropped after each)."""
    import mmap

    from converters.libsvm.workers import _file_has_zero_index, _mapped_has_zero_index

    (tmp_path / "in.txt").write_bytes(text)
    assert _file_has_zero_index(str(tmp_path / "in.txt"), 1 << 20) == want
    if text:
        with open(tmp_path / "in.txt", "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            assert _mapped_has_zero_index(mm, window) == want


@pytest.mark.parametrize("kw", [
    {"index_base": 2}, {"on_error": "ignore"}, {"field_size": 0}, {"compression": "zstd"},
    {"label_key": "x", "ids_key": "x"}, {"max_index": -2}, {"shard_size": 0}, {"prefix": ""},
])
def test_options_are_validated(kw):
    args = {"field_size": 3, **kw}
    output = {k: args.pop(k) for k in list(args) if k in ("on_error", "compression", "shard_size", "prefix")}
    with pytest.raises(ValueError):
        LibsvmOptions(**args, output=ShardOutputOptions(**output))


def test_options_compose_the_shard_output_options_into_one_flat_manifest_dict():
    o = LibsvmOptions(39, output=ShardOutputOptions(shard_size=1 << 20, compression="none", prefix="day1"))
    assert o.output.compression is None and o.schema["ids"].shape == (39,)
    assert o.to_json() == {"field_size": 39, "index_base": "asis", "pad": False, "truncate": False,
                           "allow_nonfinite": False, "max_index": None, "label_key": "label", "ids_key": "ids",
                           "values_key": "values", "strict_ids": False, "shard_size": 1 << 20, "compression": None,
                           "prefix": "day1", "on_error": "raise"}


def test_pad_and_truncate(tmp_path):
    p = tmp_path / "x.txt"
    p.write_bytes(b"1 1:1\n0 1:1 2:2 3:3 4:4\n1 1:5 2:6\n")
    m = convert_libsvm(p, tmp_path / "o", field_size=2, pad=True, truncate=True, workers=1, index_base=1)
    got = read_back(m)
    assert got["ids"].tolist() == [[0, 0], [0, 1], [0, 1]]
    assert got["values"].tolist() == [[1, 0], [1, 2], [5, 6]]
    with pytest.raises(InputError, match=r"x.txt:1: pair_count"):
        convert_libsvm(p, tmp_path / "o2", field_size=2, workers=1)


# -- bad input ----------------------------------------------------------------------------------------------

BAD_FILE = (b"1 1:1 2:1\n"
            b"\n"
            b"1 2:1 1:1\n"          # 3 unsorted
            b"# comment\n"
            b"abc 1:1 2:1\n"        # 5 bad_label
            b"1 1:1 2:nan\n"        # 6 nonfinite
            b"0 1:1 2:2\n")


@pytest.mark.parametrize("workers", [1, 2])
def test_raise_names_file_and_line_and_leaves_nothing(tmp_path, workers):
    p = tmp_path / "bad.txt"
    p.write_bytes(b"1 1:1 2:1\n" * 2000 + BAD_FILE)
    out = tmp_path / "out"
    with pytest.raises(InputError) as e:
        convert_libsvm(p, out, field_size=2, workers=workers, block_bytes=4096, shard_size=1000, strict_ids=True)
    assert str(e.value).startswith(f"{p}:2003: unsorted_index")
    assert e.value.line == 2003 and e.value.reason == "unsorted_index" and e.value.path == str(p)
    assert not out.exists() or os.listdir(out) == []


@pytest.mark.parametrize("workers", [1, 2])
def test_skip_counts_every_bad_line(tmp_path, workers):
    (tmp_path / "in").mkdir()
    (tmp_path / "in/a.txt").write_bytes(BAD_FILE)
    (tmp_path / "in/b.txt").write_bytes(b"1 1:1 2:1\n" * 100 + b"1 0:1 2:1\n" + b"1 1:1 2:x\n" * 30)
    m = convert_libsvm(tmp_path / "in", tmp_path / "out", field_size=2, on_error="skip", workers=workers, index_base=1,
                       block_bytes=512, strict_ids=True)
    a, b = m.inputs
    assert (a.records_read, a.records_written, a.blank_lines) == (5, 2, 2)
    assert a.skipped == {"bad_label": 1, "nonfinite": 1, "unsorted_index": 1}
    assert [e.split(": ")[0] for e in a.examples] == [f"{a.path}:3", f"{a.path}:5", f"{a.path}:6"]
    assert (b.records_read, b.records_written) == (131, 100)
    assert b.skipped == {"index_zero": 1, "bad_value": 30}
    assert len(b.examples) == 20 and b.examples[0].startswith(f"{b.path}:101: index_zero")
    assert m.skipped == {"bad_label": 1, "bad_value": 30, "index_zero": 1, "nonfinite": 1, "unsorted_index": 1}
    for s in m.inputs:
        assert s.records_read == s.records_written + s.records_skipped
    assert m.records == 102 == len(read_back(m)["label"])
    stored = json.loads((tmp_path / "out" / MANIFEST_NAME).read_text())
    assert stored["skipped"]["bad_value"] == 30


@pytest.mark.parametrize("content", [b"", b"\n\n# nothing here\n   \n"])
def test_empty_input_is_an_error(tmp_path, content):
    p = tmp_path / "empty.txt"
    p.write_bytes(content)
    with pytest.raises(InputError, match="no records to write") as e:
        convert_libsvm(p, tmp_path / "out", field_size=2, workers=1)
    assert e.value.reason == "empty_input"
    assert not (tmp_path / "out" / MANIFEST_NAME).exists()


def test_all_lines_skipped_is_an_error(tmp_path):
    p = tmp_path / "x.txt"
    p.write_bytes(b"a\nb\n")
    with pytest.raises(InputError, match="2 bad line"):
        convert_libsvm(p, tmp_path / "out", field_size=2, workers=1, on_error="skip")


def test_an_empty_file_among_others_is_fine(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in/a.txt").write_bytes(b"")
    (tmp_path / "in/b.txt").write_bytes(b"1 1:1\n")
    m = convert_libsvm(tmp_path / "in", tmp_path / "out", field_size=1, workers=1)
    assert [i.records_read for i in m.inputs] == [0, 1]


def test_non_empty_output_is_refused(criteo_file, tmp_path):
    convert_libsvm(criteo_file, tmp_path / "o", field_size=39, workers=1)
    with pytest.raises(OutputExistsError):
        convert_libsvm(criteo_file, tmp_path / "o", field_size=39, workers=1)
    convert_libsvm(criteo_file, tmp_path / "o", field_size=39, workers=1, overwrite=True)


def test_truncated_compressed_input_names_the_file(criteo_file, tmp_path):
    p = tmp_path / "t.libsvm.gz"
    p.write_bytes(gzip.compress(criteo_file.read_bytes())[:-100])
    with pytest.raises(InputError, match="t.libsvm.gz"):
        convert_libsvm(p, tmp_path / "out", field_size=39, workers=1)
    assert not (tmp_path / "out" / MANIFEST_NAME).exists()


# -- interruption and memory (real subprocesses) ----------------------------------------------------

CONVERT_SCRIPT = textwrap.dedent("""
    import sys
    from converters.libsvm.convert import convert_libsvm
    convert_libsvm(sys.argv[1], sys.argv[2], field_size=39, workers=1, index_base=1, overwrite=True,
                   shard_size=int(sys.argv[3]), block_bytes=int(sys.argv[4]))
    # VmHWM: this process's peak RSS (ru_maxrss would include the parent's peak from before exec)
    hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0]
    print(int(hwm.split()[1]) * 1024)
""")


def _big_file(path, copies, base=criteo_lines(10_000, seed=5)):
    with open(path, "wb") as f:
        for _ in range(copies):
            f.write(base)
    return path


def test_kill_mid_run_leaves_no_final_shard_and_rerun_is_identical(tmp_path):
    src = _big_file(tmp_path / "big.libsvm", 12)   # ~44 MB, 120k lines
    out = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": ROOT}
    proc = subprocess.Popen([sys.executable, "-c", CONVERT_SCRIPT, str(src), str(out), "300000", str(256 << 10)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    try:
        while time.time() < deadline:
            if out.exists() and len([n for n in os.listdir(out) if n.startswith(".tfpipe-tmp-")]) >= 3:
                break
            if proc.poll() is not None:
                pytest.fail(f"converter ended before it could be killed: {proc.stderr.read()[-500:]!r}")
            time.sleep(0.002)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    names = os.listdir(out)
    assert proc.returncode == -signal.SIGKILL
    assert MANIFEST_NAME not in names
    assert not any(n.startswith("train-") for n in names), names
    assert any(n.startswith(".tfpipe-tmp-") for n in names)
    with pytest.raises(OutputExistsError, match="interrupted"):
        convert_libsvm(src, out, field_size=39, workers=1)
    convert_libsvm(src, out, field_size=39, workers=2, index_base=1, overwrite=True, shard_size=300_000)
    convert_libsvm(src, tmp_path / "clean", field_size=39, workers=1, index_base=1, shard_size=300_000)
    assert dir_bytes(out) == dir_bytes(tmp_path / "clean")
    assert verify(str(out)).records == 120_000


def _peak_rss(src, out, block):
    env = {**os.environ, "PYTHONPATH": ROOT}
    r = subprocess.run([sys.executable, "-c", CONVERT_SCRIPT, str(src), str(out), str(64 << 20), str(block)],
                       env=env, capture_output=True, text=True, check=True)
    return int(r.stdout.strip().splitlines()[-1])


def test_memory_scales_with_block_size_not_input_size(tmp_path):
    small = _big_file(tmp_path / "s.libsvm", 4)    # ~15 MB
    large = _big_file(tmp_path / "l.libsvm", 16)   # ~59 MB
    rss_small = _peak_rss(small, tmp_path / "o1", 1 << 20)
    rss_large = _peak_rss(large, tmp_path / "o2", 1 << 20)
    rss_big_block = _peak_rss(small, tmp_path / "o3", 16 << 20)
    print(f"peak RSS: 15 MB input {rss_small >> 20} MiB, 59 MB input {rss_large >> 20} MiB, "
          f"15 MB input with 16 MiB blocks {rss_big_block >> 20} MiB")
    assert rss_large < 1 << 30
    assert rss_large - rss_small < 24 << 20        # 4x the input: about the same peak
    assert rss_big_block - rss_small > 24 << 20    # 16x the block: a visibly larger peak


def test_workers_in_a_multithreaded_process_use_forkserver_and_match(criteo_file, tmp_path):
    """A trainer process with threads running (TensorFlow, say) must not fork: forkserver gives the same bytes."""
    script = textwrap.dedent("""
        import sys, threading
        from converters.libsvm.convert import convert_libsvm
        from converters.libsvm.workers import start_method
        assert start_method() == "fork", start_method()
        stop = threading.Event()
        t = threading.Thread(target=stop.wait, daemon=True)
        t.start()
        print(start_method())
        m = convert_libsvm([sys.argv[1]], sys.argv[2], field_size=39, workers=2, block_bytes=1 << 16)
        stop.set()
        print(" ".join(s.sha256 for s in m.shards))
    """)
    r = subprocess.run([sys.executable, "-c", script, criteo_file, str(tmp_path / "fs")], capture_output=True,
                       text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    method, shas = r.stdout.split("\n")[:2]
    assert method == "forkserver"
    ref = convert_libsvm([criteo_file], str(tmp_path / "ref"), field_size=39, workers=1)
    assert shas.split() == [s.sha256 for s in ref.shards]


# -- many small files ----------------------------------------------------------------------------------------

def test_small_files_are_packed_with_the_same_bytes_and_accounting(tmp_path):
    """Runs of small files are read, parsed one by one and serialized together: the shards equal those of one
    file per task and of the files concatenated; every file keeps its own line numbers and accounting."""
    import gzip

    d = tmp_path / "in"
    d.mkdir()
    lines = criteo_lines(400, seed=3).split(b"\n")[:-1]
    for k in range(60):
        chunk = lines[k * 6:(k + 1) * 6]
        body = b"\n".join(chunk) + (b"" if k % 7 == 3 else b"\n")          # some without a final newline
        if k == 10:
            body = chunk[0] + b"\nabc 1:1\n\n# note\n" + b"\n".join(chunk[1:]) + b"\n"   # bad, blank, comment
        if k == 20:
            body = b""                                                     # empty file
        (d / f"f{k:03d}.libsvm").write_bytes(body)
    (d / "f030.libsvm").unlink()
    with gzip.open(d / "f030.libsvm.gz", "wb") as f:                       # a compressed file in the middle
        f.write(b"\n".join(lines[180:186]) + b"\n")
    (d / "f061.libsvm").write_bytes(criteo_lines(500, seed=9))             # one file larger than a block
    opts = dict(field_size=39, on_error="skip", shard_size=20_000, block_bytes=16_000)
    ms = [convert_libsvm(d, tmp_path / f"o{w}", workers=w, **opts) for w in (1, 2)]
    assert dir_bytes(tmp_path / "o1") == dir_bytes(tmp_path / "o2")
    assert ms[0].inputs == ms[1].inputs and len(ms[0].inputs) == 61
    by_name = {os.path.basename(i.path): i for i in ms[0].inputs}
    bad = by_name["f010.libsvm"]
    assert (bad.records_read, bad.records_written, bad.blank_lines, bad.skipped) == (7, 6, 2, {"bad_label": 1})
    assert bad.examples == [f"{d / 'f010.libsvm'}:2: bad_label: label is not a number ('abc')"]
    assert by_name["f020.libsvm"].records_read == 0 and by_name["f061.libsvm"].records_written == 500
    one = tmp_path / "one.libsvm"                                          # the same records in one file
    with open(one, "wb") as f:
        for i in ms[0].inputs:
            opener = gzip.open if i.path.endswith(".gz") else open
            with opener(i.path, "rb") as src:
                data = src.read()
            f.write(data if not data or data.endswith(b"\n") else data + b"\n")
    convert_libsvm(one, tmp_path / "one", workers=2, **opts)
    assert dir_bytes(tmp_path / "one") | {"index.json": b""} == dir_bytes(tmp_path / "o1") | {"index.json": b""}


# -- the keyword form takes the command line's options ------------------------------------------------------

def _shards(path):
    return {n: b for n, b in dir_bytes(path).items() if n.endswith(".tfrecord")}


@pytest.mark.parametrize("keywords,flags", [
    (dict(shuffle=True, seed=7, shard_size="64KiB"), ["--shuffle", "--seed", "7", "--shard-size", "64KiB"]),
    (dict(balance="equal", seed=3), ["--balance", "equal", "--seed", "3"]),
    (dict(balance={0: 0.5, 1: 1}, seed=3, shuffle=True, shuffle_memory="1MiB"),
     ["--balance", "0=0.5,1=1", "--seed", "3", "--shuffle", "--shuffle-memory", "1MiB"]),
])
def test_python_keywords_give_the_cli_bytes(criteo_file, tmp_path, keywords, flags):
    from converters.cli import main

    m = convert_libsvm(criteo_file, tmp_path / "py", field_size=39, workers=1, **keywords)
    assert main(["convert", "libsvm", str(criteo_file), "--out", str(tmp_path / "cli"), "--field-size", "39",
                 "--workers", "1", "--no-progress", *flags]) == 0
    assert _shards(tmp_path / "py") == _shards(tmp_path / "cli") != {}
    assert json.loads((tmp_path / "py" / MANIFEST_NAME).read_bytes())["options"] == \
        json.loads((tmp_path / "cli" / MANIFEST_NAME).read_bytes())["options"]
    assert m.records == read_manifest(tmp_path / "cli").records


def test_split_by_label_keyword(criteo_file, tmp_path):
    m = convert_libsvm(criteo_file, tmp_path / "o", field_size=39, workers=1, split_by_label=True)
    assert sorted(p.path for p in m.parts) == ["label=0", "label=1"]


def test_shard_size_string_equals_bytes(criteo_file, tmp_path):
    convert_libsvm(criteo_file, tmp_path / "a", field_size=39, workers=1, shard_size="100KiB")
    convert_libsvm(criteo_file, tmp_path / "b", field_size=39, workers=1, shard_size=100 * 1024)
    assert dir_bytes(tmp_path / "a") == dir_bytes(tmp_path / "b") and len(_shards(tmp_path / "a")) > 1


@pytest.mark.parametrize("keywords,message", [
    (dict(shuffle=True), "shuffle=True needs seed=S"),
    (dict(balance="equal"), "balance needs seed=S"),
    (dict(shuffle=True, seed=1, prep="x"), "prep must be a PrepOptions"),
    (dict(tmp_dir="/tmp"), "apply to shuffle=True"),
    (dict(shard_size="1 lightyear"), "shard_size must be .* got '1 lightyear'"),
    (dict(shard_size="0MiB"), "shard_size must be"),
    (dict(balance=["equal"], seed=1), "balance must be 'equal'"),
    (dict(shuffle="yes", seed=1), "shuffle must be True/False"),
])
def test_keyword_mistakes_are_one_clear_error(criteo_file, tmp_path, keywords, message):
    with pytest.raises(ValueError, match=message):
        convert_libsvm(criteo_file, tmp_path / "o", field_size=39, workers=1, **keywords)
    assert not (tmp_path / "o" / MANIFEST_NAME).exists()


def test_prep_and_keywords_together_are_refused(criteo_file, tmp_path):
    from converters.prep.options import PrepOptions
    from converters.prep.shuffle import WriteShuffleOptions

    with pytest.raises(ValueError, match="either prep=PrepOptions.* or the keywords shuffle, seed, not both"):
        convert_libsvm(criteo_file, tmp_path / "o", field_size=39, workers=1,
                       prep=PrepOptions(WriteShuffleOptions(1)), shuffle=True, seed=1)


def test_existing_output_advice_in_the_callers_spelling(criteo_file, tmp_path, capsys):
    from converters.cli import main

    convert_libsvm(criteo_file, tmp_path / "o", field_size=39, workers=1)
    with pytest.raises(OutputExistsError) as info:
        convert_libsvm(criteo_file, tmp_path / "o", field_size=39, workers=1)
    assert "pass overwrite=True" in str(info.value) and "--overwrite" not in str(info.value)
    assert main(["convert", "libsvm", str(criteo_file), "--out", str(tmp_path / "o"), "--field-size", "39",
                 "--no-progress"]) == 3
    err = capsys.readouterr().err
    assert "pass --overwrite" in err and "overwrite=True" not in err
