"""pipeline.graph.cutkernel and its op: the column kernel cuts, widens and permutes exactly what TensorFlow's
ops give (every stored type into every output dtype, short and empty blocks, rows picked by ordinal), refuses a
row outside its block, and every columnar read gives the same batches with it as without it. It is compiled
once into its cache (one process compiles while another waits), named by what it was built from, and where it
cannot be built the read falls back with one warning that says why."""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from columnar_data import indexed_columns, write_columnar_set

from pipeline import PipelineSpec, build_dataset
from pipeline.graph import cutkernel

HAVE_CXX = bool(os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++"))
needs_cxx = pytest.mark.skipif(not HAVE_CXX, reason="no C++ compiler: the column kernel cannot be built here")


@pytest.fixture
def kernel(monkeypatch):
    """Switch the kernel on or off for this test (the process's state decided again, and again after it)."""
    def use(on: bool):
        monkeypatch.setenv(cutkernel.KERNEL_ENV, "1" if on else "0")
        cutkernel.reset()
        assert cutkernel.kernel_state().on is on, cutkernel.kernel_state()

    yield use
    cutkernel.reset()


def _blocks(stored: str, width: int, rows: list[int], rng):
    """Blocks of random values of ``stored`` at a random offset after some junk bytes; the values in order."""
    blocks, offsets, values = [], [], []
    info = np.iinfo(stored) if stored != "float32" else None
    for r in rows:
        v = (rng.integers(info.min, info.max, (r, width), dtype=stored, endpoint=True) if info
             else rng.standard_normal((r, width)).astype(np.float32))
        lead = int(rng.integers(0, 7))
        blocks.append(bytes(rng.integers(0, 256, lead, dtype=np.uint8)) + v.astype(f"<{v.dtype.str[1:]}").tobytes()
                      + b"\xff" * int(rng.integers(0, 5)))
        offsets.append(lead)
        values.append(v)
    return blocks, offsets, np.concatenate(values) if values else np.zeros((0, width), stored)


# every stored type into int64 and float32 (float32 is stored only for float32 features)
TYPES = [(s, o) for s in ("uint8", "int8", "uint16", "int16", "int32", "int64") for o in ("int64", "float32")]


@needs_cxx
@pytest.mark.parametrize("stored, out", TYPES + [("float32", "float32")])
@pytest.mark.parametrize("width", [1, 5])
def test_the_op_cuts_widens_and_picks_as_numpy_does(kernel, stored, out, width):
    import tensorflow as tf

    kernel(True)
    cut = cutkernel.column_cut()
    rng = np.random.default_rng(width)
    rows = [8, 0, 3, 8, 8, 1]                     # an empty block, short blocks in the middle
    blocks, offsets, values = _blocks(stored, width, rows, rng)
    want = values.astype(out)
    args = (tf.constant(blocks), tf.constant(offsets, tf.int64), tf.constant(rows, tf.int64))
    tt = tf.as_dtype(out)
    got = cut(*args, tf.zeros([0], tf.int64), block_rows=8, width=width, ordered=True, S=tf.as_dtype(stored), T=tt)
    assert got.dtype == tt and got.shape == (len(want), width)
    np.testing.assert_array_equal(got.numpy(), want)
    pick = rng.permutation(len(want))[: len(want) - 5]
    got = cut(*args, tf.constant(pick, tf.int64), block_rows=8, width=width, ordered=False,
              S=tf.as_dtype(stored), T=tt)
    np.testing.assert_array_equal(got.numpy(), want[pick])


@needs_cxx
@pytest.mark.parametrize("case, match", [
    ("row past the chunk", "row 6 asked of a chunk of 6 rows"),
    ("negative row", "row -1 asked"),
    ("offset past the block", "block 1 of the chunk: 3 rows of 8 bytes at byte 10 run past its 30 bytes"),
    ("more rows than a block", "block 0 of the chunk has 4 rows, not 0..3"),
])
def test_the_op_refuses_a_row_outside_its_block(kernel, case, match):
    import tensorflow as tf

    kernel(True)
    cut = cutkernel.column_cut()
    blocks = [b"\0" * 30, b"\0" * 30]
    offsets, rows, sel = [0, 0], [3, 3], [0, 5]
    if case == "row past the chunk":
        sel = [6]
    elif case == "negative row":
        sel = [-1]
    elif case == "offset past the block":
        offsets = [0, 10]
    else:
        rows = [4, 2]
    with pytest.raises(tf.errors.InvalidArgumentError, match=match):
        cut(tf.constant(blocks), tf.constant(offsets, tf.int64), tf.constant(rows, tf.int64),
            tf.constant(sel, tf.int64), block_rows=3, width=2, ordered=False, S=tf.int32, T=tf.int64)


SHARDS = [100, 60, 37]


@pytest.fixture(scope="module")
def cset(tmp_path_factory):
    out = tmp_path_factory.mktemp("cut") / "c"
    write_columnar_set(out, indexed_columns(sum(SHARDS)), block_rows=16, shard_rows=SHARDS)
    return str(out)


def _batches(path, resume_after: int | None = None, **kw):
    """The batches of the read (flattened), or of the read resumed after its first ``resume_after`` steps."""
    import tensorflow as tf

    from pipeline import input_state

    spec = PipelineSpec.from_manifest(path, 24, **kw)
    state = None if resume_after is None else input_state(spec, resume_after)
    return [[t.numpy() for t in tf.nest.flatten(b)] for b in build_dataset(spec, state)]


READS = {
    "unshuffled": {},
    "seeded": {"shuffle_buffer": 40, "seed": 3},
    "seeded across files": {"shuffle_buffer": 100, "seed": 4},
    "resumed": {"shuffle_buffer": 40, "seed": 3, "resume_after": 3},
    "not resumable": {"shuffle_buffer": 40, "seed": 5, "resumable": False},
    "block-level shard": {"num_shards": 3, "shard_index": 2},
    "two epochs": {"shuffle_buffer": 40, "seed": 6, "epochs": 2},
}


@needs_cxx
@pytest.mark.parametrize("read", sorted(READS))
def test_every_read_gives_the_same_batches_with_and_without_the_kernel(cset, kernel, read):
    kw = READS[read]
    kernel(False)
    want = _batches(cset, **kw)
    kernel(True)
    got = _batches(cset, **kw)
    assert len(got) == len(want) > 0
    for g, w in zip(got, want):
        for a, b in zip(g, w):
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_array_equal(a, b)
    labels = np.concatenate([b[-1] for b in got])            # (features, label): the label comes last
    if read in ("unshuffled", "seeded", "seeded across files", "not resumable"):
        assert sorted(labels.tolist()) == list(range(sum(SHARDS)))


@needs_cxx
@pytest.mark.parametrize("picked", [False, True])
def test_a_read_without_file_identity_decodes_the_same_with_the_kernel(cset, kernel, picked):
    """Streamed and piped blocks (no file numbers): the parsed columns go through the kernel too."""
    import tensorflow as tf

    from converters.tfrecord.reader import read_records
    from pipeline.graph.blockcheck import block_decoder, tag_stream

    spec = PipelineSpec.from_manifest(cset, 8)
    records = list(read_records(spec.files[0]))
    pick = (lambda n: tf.reverse(tf.range(n), [0])[3:]) if picked else None

    def decoded():
        ds = tag_stream(tf.data.Dataset.from_tensor_slices(records), 3)
        dec = block_decoder(spec, None)
        return [{k: v.numpy() for k, v in c.items()} for c in ds.map(lambda *c: dec(*c, pick=pick))]

    kernel(False)
    want = decoded()
    kernel(True)
    got = decoded()
    for g, w in zip(got, want):
        assert g.keys() == w.keys()
        for k in g:
            assert g[k].dtype == w[k].dtype
            np.testing.assert_array_equal(g[k], w[k])
    first = got[0]["label"].tolist()
    assert first == (list(range(47, -1, -1))[3:] if picked else list(range(48)))


def _kernel_cli(env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "converters.cli", "pipeline", "kernel"], env=env,
                          capture_output=True, text=True, timeout=600)


@needs_cxx
def test_two_processes_compile_it_once_and_later_ones_load_it(tmp_path):
    env = {**os.environ, cutkernel.DIR_ENV: str(tmp_path / "k")}
    env.pop(cutkernel.KERNEL_ENV, None)
    procs = [subprocess.Popen([sys.executable, "-m", "converters.cli", "pipeline", "kernel"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    said = sorted("compiled now" if "compiled now" in o else "found in the cache" for o, _ in outs)
    assert said == ["compiled now", "found in the cache"], outs
    libs = sorted(p.name for p in (tmp_path / "k").iterdir() if p.suffix == ".so")
    assert len(libs) == 1 and libs[0].startswith("column_cut-"), libs
    again = _kernel_cli(env)
    assert again.returncode == 0 and "found in the cache" in again.stdout and libs[0] in again.stdout


@needs_cxx
def test_the_library_is_named_by_its_source(tmp_path, monkeypatch):
    cxx = cutkernel._compiler()
    first = cutkernel._library_path(cxx)
    changed = tmp_path / "column_cut.cc"
    changed.write_text(open(cutkernel.SOURCE).read() + "\n// changed\n")
    monkeypatch.setattr(cutkernel, "SOURCE", str(changed))
    assert cutkernel._library_path(cxx) != first
    monkeypatch.setenv(cutkernel.DIR_ENV, str(tmp_path / "elsewhere"))
    assert os.path.dirname(cutkernel._library_path(cxx)) == str(tmp_path / "elsewhere")


def test_without_a_compiler_the_read_falls_back_with_one_warning(cset, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv(cutkernel.DIR_ENV, str(tmp_path / "k"))
    monkeypatch.setenv("CXX", "false")
    monkeypatch.delenv(cutkernel.KERNEL_ENV, raising=False)
    cutkernel.reset()
    try:
        with caplog.at_level(logging.WARNING, logger=cutkernel.__name__):
            rows = sum(len(b[-1]) for b in _batches(cset))
            rows += sum(len(b[-1]) for b in _batches(cset, shuffle_buffer=40, seed=1))
        state = cutkernel.kernel_state()
    finally:
        cutkernel.reset()
    assert rows == 2 * sum(SHARDS)
    assert not state.on and "false exited 1" in state.why
    warned = [r.getMessage() for r in caplog.records if "column kernel is off" in r.getMessage()]
    assert len(warned) == 1 and "false exited 1" in warned[0] and "TFPIPE_KERNEL=0" in warned[0]
    assert not list((tmp_path / "k").glob("*.so"))      # nothing half-written left in the cache
    # the failure is remembered: later processes do not compile again, `tfpipe pipeline kernel` does
    assert len(list((tmp_path / "k").glob("*.so.failed"))) == 1
    later = cutkernel.build_kernel()
    assert not later.on and "an earlier compile" in later.why and "false exited 1" in later.why
    again = cutkernel.build_kernel(retry=True)
    assert not again.on and "an earlier compile" not in again.why and "false exited 1" in again.why


def test_turned_off_it_is_never_built_and_says_so(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv(cutkernel.DIR_ENV, str(tmp_path / "k"))
    env = {**os.environ, cutkernel.KERNEL_ENV: "0"}
    done = _kernel_cli(env)
    assert done.returncode == 1 and "column kernel: off (TFPIPE_KERNEL=0)" in done.stdout
    monkeypatch.setenv(cutkernel.KERNEL_ENV, "0")
    cutkernel.reset()
    try:
        with caplog.at_level(logging.WARNING, logger=cutkernel.__name__):
            assert cutkernel.column_cut() is None
    finally:
        cutkernel.reset()
    assert not caplog.records and not (tmp_path / "k").exists()
