"""util.shmring: a forked worker's arrays handed over through a reused slot of shared memory, equal to what was
put there; whatever does not fit goes the other way, never lost; a LibSVM conversion on forked workers that
cycles through every slot many times writes the bytes one process writes."""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from converters.util.shmbytes import MIN_SCRATCH_BYTES
from converters.util.shmring import ALIGN, RingArray, SlotRing, out_buffer, ring_put, ring_take, slot_space

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def ring():
    r = SlotRing(3, 1 << 20)
    yield r
    r.close()


def test_arrays_come_back_equal_from_their_slot_and_the_rest_as_they_are(ring):
    rng = np.random.default_rng(0)
    big = rng.integers(0, 255, MIN_SCRATCH_BYTES + 1_001).astype(np.uint8)
    table = rng.random((700, 39)).astype(np.float32)
    small, objects = np.arange(3, dtype=np.int64), np.array([object()] * 1_000)
    placed = ring_put(ring.id, 1, [big, small, None, objects, table])
    assert [type(p) for p in placed] == [RingArray, np.ndarray, type(None), np.ndarray, RingArray]
    assert placed[1] is small and placed[3] is objects
    for p in (placed[0], placed[4]):      # aligned, inside slot 1
        assert p.offset % ALIGN == 0 and ring.slot_bytes <= p.offset < 2 * ring.slot_bytes
    back = [ring_take(p) for p in placed]
    assert np.array_equal(back[0], big) and np.array_equal(back[4], table) and back[4].dtype == np.float32
    assert back[1] is small and back[2] is None and back[3] is objects
    back[0][0] ^= 1                        # a copy: the slot can be reused at once
    assert ring_take(placed[0])[0] == big[0]


def test_a_view_is_the_slot_itself_read_only_and_outlives_the_ring():
    r = SlotRing(2, 1 << 20)
    a = np.arange(MIN_SCRATCH_BYTES, dtype=np.int64)
    placed = ring_put(r.id, 1, [a])[0]
    view = ring_take(placed, copy=False)
    assert np.array_equal(view, a) and not view.flags.writeable
    ring_put(r.id, 1, [a[::-1].copy()])    # the slot's next task: the view shows it (no copy was made)
    assert view[0] == a[-1]
    r.close()                              # a view still held (a traceback's frame): no BufferError
    assert view[-1] == a[0]                # and its memory stays until the view goes


def test_a_result_built_in_its_slot_stays_there_and_the_others_go_after_it(ring):
    space = slot_space(ring.id, 2)
    built = out_buffer(space, 300_000)[:250_000]      # as a serializer builds its records: the used part
    built[:] = 7
    other = np.arange(MIN_SCRATCH_BYTES, dtype=np.int64)
    placed = ring_put(ring.id, 2, [other, built])
    assert placed[1].offset == 2 * ring.slot_bytes      # where it was built: nothing copied
    assert placed[0].offset >= placed[1].offset + built.nbytes and placed[0].offset % ALIGN == 0
    assert np.shares_memory(ring_take(placed[1], copy=False), built)
    assert np.array_equal(ring_take(placed[0]), other) and (ring_take(placed[1]) == 7).all()


@pytest.mark.parametrize("space_bytes, wanted", [(None, 10), (5, 10)])
def test_without_room_in_the_space_the_buffer_is_new_memory(ring, space_bytes, wanted):
    space = None if space_bytes is None else slot_space(ring.id, 0)[:space_bytes]
    buf = out_buffer(space, wanted)
    assert buf.nbytes == wanted and (space is None or not np.shares_memory(buf, space))
    assert slot_space(10 ** 9, 0) is None and slot_space(ring.id, None) is None


def test_an_array_that_does_not_fit_what_is_left_of_its_slot_is_left_as_it_is():
    r = SlotRing(2, 64 << 10)
    try:
        first, second = np.ones(40 << 10, np.uint8), np.ones(40 << 10, np.uint8)
        placed = ring_put(r.id, 1, [first, second])
        assert isinstance(placed[0], RingArray) and placed[1] is second
    finally:
        r.close()


@pytest.mark.parametrize("ring_id,slot", [(None, 0), (10 ** 9, 0), ("ring", None)])
def test_without_this_ring_or_a_slot_the_arrays_are_left_as_they_are(ring, ring_id, slot):
    a = np.ones(MIN_SCRATCH_BYTES, np.uint8)
    rid = ring.id if ring_id == "ring" else ring_id
    assert ring_put(rid, slot, [a])[0] is a


def test_slots_are_given_in_turn_and_bad_values_are_named(ring):
    assert [ring.next_slot() for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    for args in ((0, 1), (2, 0), (True, 8), (2, 1.5)):
        with pytest.raises(ValueError, match="must be an int >= 1"):
            SlotRing(*args)
    with pytest.raises(ValueError, match="-8"):
        RingArray(1, -8, "u1", (3,))
    with pytest.raises(TypeError):
        RingArray(1, 0, "no such type", (3,))
    with pytest.raises(RuntimeError, match="no shared ring 999"):
        ring_take(RingArray(999, 0, "u1", (3,)))


_FORKED = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, sys.argv[1])
    from pathlib import Path
    from converters.libsvm import workers
    from converters.libsvm.convert import convert_libsvm
    from converters.libsvm.synthetic import criteo_lines
    from converters.util.shmring import RingArray

    taken = []
    real = workers.ring_take
    workers.ring_take = lambda v, copy=True: (taken.append(isinstance(v, RingArray)), real(v, copy))[1]
    tmp = Path(sys.argv[2])
    (tmp / "in.libsvm").write_bytes(criteo_lines(6000, seed=5))
    out = {}
    for w in (1, 2):
        convert_libsvm(tmp / "in.libsvm", tmp / f"o{w}", field_size=39, workers=w, block_bytes=48 << 10)
        out[w] = b"".join(p.read_bytes() for p in sorted((tmp / f"o{w}").glob("*.tfrecord")))
    print(json.dumps({"method": workers.start_method(), "same": out[1] == out[2], "bytes": len(out[1]),
                      "ring": sum(taken), "taken": len(taken)}))
""")


def test_a_conversion_on_forked_workers_cycles_the_slots_and_writes_the_bytes_of_one_process(tmp_path):
    """In a fresh process (forked workers): ~45 blocks through 5 slots, each slot reused many times; every
    block's records came through the ring; the shards equal those of one process."""
    p = subprocess.run([sys.executable, "-c", _FORKED, str(ROOT), str(tmp_path)], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["method"] == "fork" and got["same"] and got["bytes"] > 0, got
    results = got["taken"] // 3         # records, lengths, labels per result; small ones go through the pipe
    assert results >= 3 * 5 and got["ring"] >= results - 1, got      # every block's records (the last may be small)


def test_where_the_ring_cannot_be_mapped_the_pool_goes_without_one(monkeypatch):
    """A ring too large to map (as under a strict memory limit) is no ring: results go through the scratch
    directory, the pool is not broken."""
    from converters.libsvm import workers

    ring = workers._shared_ring(2)
    try:
        assert ring is not None and ring.slots == 5
    finally:
        ring.close()
    monkeypatch.setattr(workers, "RING_SLOT_BYTES", 1 << 62)
    assert workers._shared_ring(2) is None
