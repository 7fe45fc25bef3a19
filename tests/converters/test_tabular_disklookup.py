"""converters.tabular.disklookup: a sorted table read from disk block by block gives the hash table's ids, and a
process looking up a table far larger than its budget holds no more than the budget and the index."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from converters.tabular.disklookup import STRIDE, DiskLookup, stride_for, table_bytes
from converters.tabular.vocab import Lookup, sort_key


def table(tmp_path, keys: np.ndarray, ids: np.ndarray):
    order = np.argsort(keys)
    kp, ip = tmp_path / "t.skeys", tmp_path / "t.sids"
    kp.write_bytes(keys[order].astype(np.uint64).tobytes())
    ip.write_bytes(ids[order].astype(np.uint32).tobytes())
    return str(kp), str(ip)


@pytest.mark.parametrize("n,budget", [(0, 1 << 16), (1, 1 << 16), (STRIDE - 1, 1 << 16), (STRIDE, 1),
                                      (STRIDE + 1, 1 << 16), (9 * STRIDE + 7, 1), (9 * STRIDE + 7, 1 << 20)])
def test_the_table_on_disk_gives_the_hash_tables_ids(tmp_path, n, budget):
    """Every key, misses between and around them, the empty key 0; one block at a time or all at once."""
    rng = np.random.default_rng(n)
    keys = np.unique(rng.integers(1, 1 << 62, n + 10, dtype=np.uint64))[:n]
    ids = (rng.permutation(n) + 1).astype(np.uint32)
    disk = DiskLookup(*table(tmp_path, keys, ids), budget=budget)
    edges = np.array([0, 1, (1 << 64) - 1], np.uint64)
    queries = np.concatenate([keys, rng.integers(1, 1 << 62, 500, dtype=np.uint64), edges,
                              keys - np.uint64(1), keys + np.uint64(1)])
    assert queries.dtype == np.uint64 and np.isin(keys, queries).all()
    rng.shuffle(queries)
    got = Lookup.of_disk(disk)._get(queries)
    want = dict(zip(keys.tolist(), ids.tolist()))
    assert got.tolist() == [want.get(q, 0) for q in queries.tolist()]
    assert set(got[np.isin(queries, keys)].tolist()) == set(ids.tolist())     # every key found
    assert got.tolist() == Lookup.of_table(keys, ids)._get(queries).tolist()


@pytest.mark.parametrize("values,budget,stride", [
    (0, 1, 512), (10, 1, 512), (24 << 20, 8 << 20, 512),      # an index of 48 K blocks: 384 KiB < 2 MiB
    (1 << 30, 8 << 20, 4096),                                  # 1 G values: 2 MiB of index, blocks of 4,096 keys
    (4615, 1, 5120), (4615, 64, 2560),
])
def test_the_index_stays_within_a_quarter_of_the_budget(values, budget, stride):
    assert stride_for(values, budget) == stride and stride % STRIDE == 0
    assert -(-values // stride) * 8 <= max(budget // 4, 8)


def values_table(tmp_path, values: np.ndarray, ids: np.ndarray, width: int):
    order = np.argsort(values)
    kp, ip = tmp_path / "t.svals", tmp_path / "t.sids"
    kp.write_bytes(values[order].astype(f"S{width}").tobytes())
    ip.write_bytes(ids[order].astype(np.uint32).tobytes())
    return str(kp), str(ip)


@pytest.mark.parametrize("n,budget", [(0, 1 << 16), (1, 1 << 16), (STRIDE - 1, 1), (STRIDE, 1),
                                      (STRIDE + 1, 1 << 16), (9 * STRIDE + 7, 1), (9 * STRIDE + 7, 1 << 20)])
def test_a_table_of_long_values_gives_the_in_memory_ids(tmp_path, n, budget):
    """Values of 1 to 20 bytes in a table 20 bytes wide: every value, misses beside them (a byte more or less,
    longer than the table's width), the empty value; one block at a time or all at once."""
    rng = np.random.default_rng(n)
    raw = {bytes(rng.integers(33, 127, rng.integers(1, 21), dtype=np.uint8)) for _ in range(2 * n + 20)}
    pool = sorted(raw)
    vocab = [pool[i] for i in rng.permutation(len(pool))[:n]]
    values = np.array(vocab or [b""], "S20")[:n]
    ids = (rng.permutation(n) + 1).astype(np.uint32)
    disk = DiskLookup(*values_table(tmp_path, values, ids, 20), budget=budget, width=20)
    assert not disk.by_key and disk.size == n
    misses = [b"", b"~" * 21, b"!" * 25] + [v + b"!" for v in vocab[:50]] + [v[:-1] for v in vocab[:50]]
    queries = np.array(vocab + misses + [bytes(rng.integers(33, 127, 12, dtype=np.uint8)) for _ in range(200)],
                       "S25")
    rng.shuffle(queries)
    want = dict(zip(vocab, ids.tolist()))
    got = Lookup.of_disk(disk)(queries)
    assert got.tolist() == [want.get(q, 0) for q in queries.tolist()]
    assert set(got.tolist()) - {0} == set(ids.tolist())                     # every value found
    order = np.argsort(values)
    assert Lookup.of_sorted(values[order], ids[order])(queries).tolist() == got.tolist()


def test_a_cut_table_is_refused_naming_it(tmp_path):
    kp, ip = table(tmp_path, np.arange(1, 11, dtype=np.uint64), np.arange(1, 11, dtype=np.uint32))
    with open(ip, "r+b") as f:
        f.truncate(36)
    with pytest.raises(ValueError, match=r"t\.skeys: 80 bytes of keys and 36 bytes of ids"):
        DiskLookup(kp, ip, budget=1 << 16)


def test_a_column_with_long_values_finds_its_short_ones(tmp_path):
    """A block whose column has one value longer than 8 bytes still finds the others in a table of keys."""
    vocab = np.array([b"aa", b"bbbbbbbb", b"c"], "S8")
    keys = sort_key(vocab)
    disk = Lookup.of_disk(DiskLookup(*table(tmp_path, keys, np.arange(1, 4)), budget=1 << 16))
    column = np.array([b"c", b"longer than 8", b"aa", b"", b"bbbbbbbb", b"bbbbbbbbb"], "S13")
    for lk in (disk, Lookup.of_table(keys, np.arange(1, 4)), Lookup(vocab)):
        assert lk(column).tolist() == [3, 0, 1, 0, 2, 0]


def write_big_table(kp, ip, n: int, width: int = 0, step: int = 1 << 22) -> None:
    """Keys 7, 14, ..., 7n with ids 1..n, written a piece at a time (the test process stays small); ``width``:
    as zero-padded decimal values of that many bytes, else uint64."""
    with open(kp, "wb") as k, open(ip, "wb") as i:
        for a in range(0, n, step):
            r = np.arange(a + 1, min(a + step, n) + 1, dtype=np.uint64)
            k.write(_big_keys(r * np.uint64(7), width).tobytes())
            i.write(r.astype(np.uint32).tobytes())


def _big_keys(k: np.ndarray, width: int) -> np.ndarray:
    return np.char.zfill(k.astype(f"S{width}"), width) if width else k


CHILD = """
import sys
import numpy as np
from converters.tabular.lookupkernel import block_get
from converters.tabular.disklookup import DiskLookup
from test_tabular_disklookup import _big_keys
n, budget, width = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
z = np.zeros(1, np.int64)                              # the kernel loaded (or compiled) before the baseline
block_get(np.zeros((1, 512), np.uint64), np.zeros((1, 512), np.uint32), z, z, np.ones(1, np.uint64))
def hwm():
    return next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM")) << 10
rng = np.random.default_rng(0)
want = rng.integers(1, n + 1, 1 << 16, dtype=np.uint64)
q = _big_keys(want * np.uint64(7), width)
base = hwm()
m = DiskLookup(sys.argv[1], sys.argv[2], budget=budget, width=width)
for _ in range(20):
    assert (m.get(q) == want).all()
    want[:] = rng.integers(1, n + 1, want.size, dtype=np.uint64)
    q[:] = _big_keys(want * np.uint64(7), width)
print(hwm() - base, m.blocks_read)
"""


@pytest.mark.parametrize("n,width,memory", [
    (24 << 20, 0, table_bytes(24 << 20)),   # a 288 MiB table on disk, a 340 MiB hash table in memory
    (4 << 20, 20, (4 << 20) * 28),          # values of 20 bytes: a 96 MiB table, a 112 MiB sorted copy
])
def test_memory_stays_within_the_budget_of_a_table_many_times_larger(tmp_path, n, width, memory):
    """A table looked up at random through an 8 MiB budget: the process's peak resident memory grows by the
    budget, the index and the calls' own arrays, not by the table."""
    budget = 8 << 20
    assert memory > 12 * budget
    write_big_table(tmp_path / "k", tmp_path / "i", n, width)
    r = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "k"), str(tmp_path / "i"), str(n), str(budget),
                        str(width)], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join([os.path.dirname(__file__), *sys.path])})
    assert r.returncode == 0, r.stderr[-3000:]
    growth, blocks = map(int, r.stdout.split())
    assert blocks > n // stride_for(n, budget, width or 8)     # every block read, most of them more than once
    assert growth < budget + (12 << 20), growth
