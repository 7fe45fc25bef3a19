"""util.shmbytes: a worker's records handed over through a file in memory, never lost when that fails."""
import os

import numpy as np
import pytest

from converters.libsvm.options import LibsvmOptions
from converters.libsvm.synthetic import criteo_lines
from converters.libsvm.tasks import work_block
from converters.libsvm.workers import Pool, received
from converters.util.shmbytes import (
    MIN_SCRATCH_BYTES,
    SHM_ROOT,
    ScratchArray,
    from_scratch,
    remove_scratch,
    scratch_dir,
    to_scratch,
)

needs_shm = pytest.mark.skipif(scratch_dir() is None, reason=f"no writable {SHM_ROOT}")


@pytest.fixture
def scratch(tmp_path):
    d = str(tmp_path / "scratch")
    os.mkdir(d)
    return d


@pytest.mark.parametrize("dtype,shape", [(np.uint8, (MIN_SCRATCH_BYTES + 12_345,)), (np.int64, (5_000,)),
                                         (np.float32, (700, 39)), (">i4", (3_000,))])
def test_a_large_array_goes_through_a_file_and_comes_back_equal(scratch, dtype, shape):
    a = np.random.default_rng(0).integers(0, 200, shape).astype(dtype)
    sent = to_scratch(a, scratch)
    assert isinstance(sent, ScratchArray) and sent.nbytes == a.nbytes
    assert os.path.getsize(sent.path) == a.nbytes
    back = from_scratch(sent)
    assert back.dtype == a.dtype and back.shape == a.shape and np.array_equal(back, a)
    assert os.listdir(scratch) == []          # unlinked once mapped: its memory goes with the array
    assert not back.flags.writeable


@pytest.mark.parametrize("value,directory", [
    (np.zeros(MIN_SCRATCH_BYTES - 1, np.uint8), "dir"),    # small: one write into the pipe
    (np.zeros(0, np.int64), "dir"),
    (np.zeros(MIN_SCRATCH_BYTES, np.uint8), None),         # no scratch directory on this host
    (np.zeros(MIN_SCRATCH_BYTES, np.uint8), "gone"),       # the directory cannot take it: the slow way, not lost
    (np.array([object()] * 1_000), "dir"),                 # not plain numbers
    (None, "dir"),                                          # a result's missing labels
])
def test_the_value_itself_is_sent_when_no_file_is_made(scratch, value, directory):
    where = {"dir": scratch, "gone": os.path.join(scratch, "missing"), None: None}[directory]
    sent = to_scratch(value, where)
    assert sent is value
    assert from_scratch(sent) is value
    assert os.listdir(scratch) == []


@pytest.mark.parametrize("shape,dtype,error", [((-1,), "u1", ValueError), ((3,), "no such type", TypeError)])
def test_a_scratch_array_is_validated(shape, dtype, error):
    with pytest.raises(error, match=r"-1|no such type"):
        ScratchArray("x", dtype, shape)


def test_scratch_dir_is_private_and_removed_with_what_is_left(tmp_path):
    d = scratch_dir(str(tmp_path))
    assert d is not None and os.path.dirname(d) == str(tmp_path)
    assert os.stat(d).st_mode & 0o777 == 0o700
    to_scratch(np.zeros(MIN_SCRATCH_BYTES, np.uint8), d)     # a result a failed run never took
    remove_scratch(d)
    assert not os.path.exists(d)
    assert scratch_dir(str(tmp_path / "no-such-root")) is None


@needs_shm
def test_the_pools_records_come_through_scratch_equal_to_inline():
    """A LibSVM worker's result leaves its records in the pool's scratch directory; ``received`` maps them,
    equal byte for byte to the same block serialized in this process; closing the pool removes the directory."""
    opts = LibsvmOptions(field_size=39)
    popts, block = opts.parse_options(1), criteo_lines(2000, seed=3)
    inline = work_block(block, 1, popts, opts.keys, True)
    assert inline.framed.nbytes >= MIN_SCRATCH_BYTES
    pool = Pool(2, popts, opts.keys, ring=False)     # forked or not, the scratch directory only
    try:
        assert os.path.dirname(pool.scratch) == SHM_ROOT
        res = pool.submit(work_block, block, 1, popts, opts.keys, True).result()
        assert all(isinstance(getattr(res, a), ScratchArray) for a in ("framed", "lengths", "labels"))
        res = received(res)
        for a in ("framed", "lengths", "labels"):
            assert np.array_equal(getattr(res, a), getattr(inline, a))
        assert os.listdir(pool.scratch) == []
    finally:
        pool.close()
    assert not os.path.exists(pool.scratch)


def _mine():
    return sorted(n for n in os.listdir(SHM_ROOT) if n.startswith(f"tfpipe-{os.getpid()}-"))


@needs_shm
@pytest.mark.parametrize("bad", [False, True])
def test_a_conversion_leaves_nothing_in_shared_memory(tmp_path, bad):
    """Finished or stopped at a bad line, a run on two workers removes its scratch directory."""
    from converters.libsvm.convert import convert_libsvm
    from converters.util.errors import InputError

    p = tmp_path / "in.libsvm"
    p.write_bytes(criteo_lines(3000, seed=1) + (b"1 nonsense\n" if bad else b""))
    before = _mine()
    if bad:
        with pytest.raises(InputError, match=":3001: bad_token"):
            convert_libsvm(p, tmp_path / "o", field_size=39, workers=2, block_bytes=400 << 10)
    else:
        convert_libsvm(p, tmp_path / "o", field_size=39, workers=2, block_bytes=400 << 10)
    assert _mine() == before


def _dead_pid() -> int:
    """The pid of a process that has ended."""
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_leftovers_of_a_killed_run_are_removed_and_nothing_else(tmp_path):
    """A killed run's directory (its process gone, untouched for STALE_SECONDS) goes; a live process's, a
    recent one, another name and a file stay."""
    import time

    from converters.util.shmbytes import STALE_SECONDS, remove_stale

    dead = _dead_pid()
    made = {}
    for name in (f"tfpipe-{dead}-old", f"tfpipe-{dead}-recent", f"tfpipe-{os.getpid()}-live", "other-1-x"):
        made[name] = tmp_path / name
        made[name].mkdir()
        (made[name] / "0-1").write_bytes(b"x" * 10)
    (tmp_path / f"tfpipe-{dead}-file").write_bytes(b"not a directory")
    now = time.time()
    for name in (f"tfpipe-{dead}-old", f"tfpipe-{os.getpid()}-live", "other-1-x"):
        os.utime(made[name], (now - STALE_SECONDS - 5, now - STALE_SECONDS - 5))
    assert remove_stale(str(tmp_path), now=now) == [str(made[f"tfpipe-{dead}-old"])]
    assert sorted(os.listdir(tmp_path)) == sorted([f"tfpipe-{dead}-recent", f"tfpipe-{os.getpid()}-live",
                                                   "other-1-x", f"tfpipe-{dead}-file"])
    # a new scratch directory clears such leftovers first
    os.utime(made[f"tfpipe-{dead}-recent"], (now - STALE_SECONDS - 5, now - STALE_SECONDS - 5))
    d = scratch_dir(str(tmp_path))
    assert not made[f"tfpipe-{dead}-recent"].exists() and os.path.isdir(d)
