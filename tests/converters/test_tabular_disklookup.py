"""converters.tabular.disklookup: a sorted table read from disk block by block gives the hash table's ids, and a
process looking up a table far larger than its budget holds no more than the budget and the index."""
from __future__ import annotations

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


def write_big_table(kp, ip, n: int, step: int = 1 << 22) -> None:
    """Keys 7, 14, ..., 7n with ids 1..n, written a piece at a time (the test process stays small)."""
    with open(kp, "wb") as k, open(ip, "wb") as i:
        for a in range(0, n, step):
            r = np.arange(a + 1, min(a + step, n) + 1, dtype=np.uint64)
            k.write((r * np.uint64(7)).tobytes())
            i.write(r.astype(np.uint32).tobytes())


CHILD = """
import sys
import numpy as np
from converters.tabular.kernel import block_get
from converters.tabular.disklookup import DiskLookup
n, budget = int(sys.argv[3]), int(sys.argv[4])
z = np.zeros(1, np.int64)                              # the kernel loaded (or compiled) before the baseline
block_get(np.zeros((1, 512), np.uint64), np.zeros((1, 512), np.uint32), z, z, np.ones(1, np.uint64))
def hwm():
    return next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM")) << 10
q = np.empty(1 << 16, np.uint64)
base = hwm()
m = DiskLookup(sys.argv[1], sys.argv[2], budget=budget)
rng = np.random.default_rng(0)
for _ in range(20):
    q[:] = rng.integers(1, n + 1, q.size, dtype=np.uint64) * np.uint64(7)
    assert (m.get(q) == q // np.uint64(7)).all()
print(hwm() - base, m.blocks_read)
"""


def test_memory_stays_within_the_budget_of_a_table_many_times_larger(tmp_path):
    """24 M values (a 288 MiB table on disk, a 340 MiB hash table in memory) looked up at random through an
    8 MiB budget: the process's peak resident memory grows by the budget, the index (384 KiB) and the calls'
    own arrays, not by the table."""
    n, budget = 24 << 20, 8 << 20
    assert table_bytes(n) > 40 * budget
    write_big_table(tmp_path / "k", tmp_path / "i", n)
    r = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "k"), str(tmp_path / "i"), str(n), str(budget)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    growth, blocks = map(int, r.stdout.split())
    assert blocks > n // STRIDE                 # every block read, most of them more than once
    assert growth < budget + (12 << 20), growth
