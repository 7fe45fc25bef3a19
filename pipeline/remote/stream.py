"""Streaming a remote shard set: shards fetched in the order this rank reads them, a few ahead, through the
host's bounded cache (``streamcache``), handed to a native tf.data graph as local paths.

Planning is pure (``epoch_order``, ``open_width``, ``min_cache_bytes``), but for ``cache_limit``, which reads
the free space of the cache's disk when ``stream_cache_limit`` is None (``streamcache.default_limit``);
``ReadAhead`` does the I/O: ``session()`` hands out ``(path, ticket)`` as shards become ready and
``release(ticket)`` gives a shard's lease back. The tf.data source over it is ``pipeline.graph.streamsource``.

A reader pins at most ``width + read_ahead`` shards (``width``: files TensorFlow reads at once), so a limit of
``local_readers`` × the bytes of that many of the largest shards can never deadlock; a smaller one is refused
before any download.
"""
from __future__ import annotations

import concurrent.futures as cf
import itertools
import logging
import random
import threading
import time
import weakref

from converters.util.errors import IntegrityError, TfpipeError
from converters.util.units import format_size

from converters.storage.download import Aborted, RetryPolicy, fetch_verified
from .streamcache import ShardCache, default_limit
from ..spec.streamopts import StreamOptions

__all__ = ["epoch_order", "open_width", "min_cache_bytes", "check_cache_limit", "cache_limit", "local_readers",
           "ReadAhead", "STREAMS", "stream_stage", "WAIT_TIMEOUT"]

log = logging.getLogger(__name__)

WAIT_TIMEOUT = 600.0     # seconds a reader waits for room in the cache or for another reader's download
_POLL = 0.02             # first pause between two looks at the cache while waiting; then 1.5x, up to _POLL_MAX
_POLL_MAX = 0.5
WAIT_LOG_EVERY = 10.0    # seconds between "still waiting" lines


# -- pure planning ---------------------------------------------------------------------------------------

def epoch_order(n: int, seed: int | None, epoch: int, shuffle: bool) -> list[int]:
    """The order files are read in ``epoch``: as listed, or a permutation that is a pure function of
    (seed, epoch) — a rerun reads the same shards in the same order."""
    order = list(range(n))
    if shuffle:
        random.Random(f"tfpipe-stream:{seed}:{epoch}").shuffle(order)
    return order


def open_width(read: str, parallelism: int) -> int:
    """Files TensorFlow reads at once for a read strategy: 1 sequential, else the interleave's cycle length."""
    return 1 if read == "sequential" else max(1, int(parallelism))


def min_cache_bytes(sizes, width: int, read_ahead: int, readers: int) -> int:
    """The smallest cache that serves ``readers`` readers each pinning ``width + read_ahead`` shards (the
    largest of ``sizes``, to hold whatever order they come in)."""
    biggest = sorted(sizes, reverse=True)[:width + read_ahead]
    return readers * sum(biggest)


def local_readers(opts: StreamOptions) -> int:
    """Readers sharing the cache on this host: as given, else this host's workers from the topology."""
    if opts.local_readers is not None:
        return opts.local_readers
    from sharding.topology import Topology

    try:
        return Topology.from_env().workers_per_host
    except (TfpipeError, ValueError) as exc:
        log.warning("local readers unknown (%s): assuming 1", exc)
        return 1


def cache_limit(opts: StreamOptions) -> tuple[int, str]:
    """The limit the cache keeps (``stream_cache_limit``, or the default derived from the free space of its
    disk) and how it was chosen ("given", or how the default was derived)."""
    if opts.stream_cache_limit is not None:
        return opts.stream_cache_limit, "given"
    return default_limit(opts.stream_cache_dir)


def check_cache_limit(opts: StreamOptions, sizes, width: int) -> int:
    """Refuse, in one line naming the minimum, a ``stream_cache_limit`` (given, or the default from the free
    space) too small for every local reader's window; the minimum."""
    readers = local_readers(opts)
    need = min_cache_bytes(sizes, width, opts.read_ahead, readers)
    limit, how = cache_limit(opts)
    if limit < need:
        largest = max(sizes) if sizes else 0
        fix = ("raise stream_cache_limit or lower read_ahead" if how == "given" else
               "free space there, pass a stream_cache_dir on a larger disk, or lower read_ahead")
        raise TfpipeError(
            f"stream_cache_limit {format_size(limit)} ({limit} bytes{'' if how == 'given' else '; ' + how}) for the "
            f"stream cache in {opts.stream_cache_dir} is too small: {readers} local reader(s) x ({width} open + "
            f"{opts.read_ahead} read ahead) shard(s) need at least {format_size(need)} (stream_cache_limit={need}; "
            f"the largest shard is {format_size(largest)}); {fix}")
    return need


def _where(cache_dir: str) -> str:
    """The cache directory, with the reason when it is under the default scratch root."""
    import os

    from converters.util.system import scratch_root

    root, why = scratch_root()
    return cache_dir + (f" (default: {why})" if os.path.dirname(os.path.abspath(cache_dir)) == os.path.abspath(root)
                        else "")


def stream_stage(spec, config, shuffle_files: bool):
    """The ``stream`` stage ``describe`` shows before the source: where, how much, how far ahead, and why."""
    from ..spec.stage import Stage

    opts = spec.stream
    width = open_width(config.read, config.parallelism)
    sizes = [s.bytes for s in opts.shards]
    readers = local_readers(opts)
    need = min_cache_bytes(sizes, width, opts.read_ahead, readers)
    limit, how = cache_limit(opts)
    limit = format_size(limit) + ("" if how == "given" else f" ({how})")
    settings = {"from": opts.url, "stream_cache_dir": _where(opts.stream_cache_dir), "stream_cache_limit": limit,
                "read_ahead": opts.read_ahead, "open_files": width, "local_readers": readers, "min_cache": format_size(need),
                "order": f"shuffled per epoch (seed={spec.seed})" if shuffle_files else "as listed"}
    why = (f"TensorFlow cannot read {opts.url.split(':', 1)[0]}:// itself and {format_size(sum(sizes))} need not "
           f"fit on this host: each shard is fetched in read order, at most {opts.read_ahead} ahead of the "
           f"{width} being read, checked (size, sha256) before TensorFlow opens it, shared by the host's readers "
           f"and evicted least recently used once none of them reads it; the first batch comes after one shard")
    return Stage("stream", True, settings, why)


# -- I/O ---------------------------------------------------------------------------------------------------

STREAMS: "weakref.WeakSet[ReadAhead]" = weakref.WeakSet()  # live streams of this process (stats, tests)
_CACHES: dict[str, ShardCache] = {}
_CACHES_LOCK = threading.Lock()


def _cache_for(opts: StreamOptions) -> ShardCache:
    """One handle per process per cache directory (leases are counted per process); when specs in one process
    give it different limits, the smallest holds."""
    import os

    key = os.path.abspath(opts.stream_cache_dir)
    limit, how = cache_limit(opts)
    with _CACHES_LOCK:
        cache = _CACHES.get(key)
        if cache is None:
            cache = _CACHES[key] = ShardCache(opts.stream_cache_dir, limit)
            log.info("stream cache: %s, at most %s (%s)", _where(key), format_size(limit), how)
        else:
            cache.lower_limit(limit)  # under the cache's own lock: never mid-reservation
        return cache


class ReadAhead:
    """The shards of one rank, streamed epoch after epoch: ``session()`` is one epoch's generator of
    ``(local path, ticket)``; ``release(ticket)`` is called by the graph when a file has been read."""

    def __init__(self, opts: StreamOptions, *, width: int, seed: int | None, shuffle: bool,
                 storage=None, policy: RetryPolicy | None = None, wait_timeout: float = WAIT_TIMEOUT):
        if not opts.shards or not opts.url:
            raise ValueError("StreamOptions has no shards to stream (use PipelineSpec.from_manifest)")
        self.opts, self.width, self.seed, self.shuffle = opts, width, seed, shuffle
        self.cache = _cache_for(opts)
        with self.cache.locked():  # a faulty cache (a link, a file for a folder, read-only) is one line, now
            pass
        self.policy = policy or RetryPolicy(request_timeout=opts.request_timeout, stall_timeout=opts.stall_timeout,
                                            shard_timeout=opts.shard_timeout)
        self.wait_timeout = wait_timeout
        self._storage = storage
        self._storage_lock = threading.Lock()
        self._epochs = itertools.count()
        self._tickets: dict[int, tuple[object, str]] = {}   # ticket -> (session, key)
        self._next_ticket = itertools.count(1)
        self._lock = threading.Condition()
        self.stats = {"fetched": 0, "reused": 0, "bytes_fetched": 0}
        weakref.finalize(self, _release_all, self.cache, self._tickets)

    @property
    def storage(self):
        """The set's storage, opened once (an S3 client is thread-safe and slow to create)."""
        with self._storage_lock:
            if self._storage is None:
                from converters.storage import is_s3, open_storage

                opts = {"max_attempts": 1} if is_s3(self.opts.url) else {}  # retries are ours (RetryPolicy)
                storage = open_storage(self.opts.url, **opts)
                getattr(storage, "client", None)  # created here, not by every fetch thread at once
                self._storage = storage
            return self._storage

    # -- one shard: lease, then ready / wait / download ------------------------------------------------
    def acquire(self, i: int, abort: threading.Event) -> str:
        ref = self.opts.shards[i]
        where = f"{self.opts.url}/{ref.name}"
        deadline = time.monotonic() + self.wait_timeout
        try:
            return self._acquire(ref, where, deadline, abort)
        except BaseException:
            self.cache.release(ref.key)  # the lease taken by the first try_acquire
            raise

    def _acquire(self, ref, where: str, deadline: float, abort: threading.Event) -> str:
        leased, damaged = False, 0
        pause, said = _POLL, time.monotonic()
        while True:
            got = self.cache.try_acquire(ref.key, ref.bytes, leased=leased)
            leased = True
            if got.state == "ready":
                if self.cache.check_ready(ref.key, ref.bytes, ref.sha256):
                    self.stats["reused"] += 1
                    return got.path
                damaged += 1
                if damaged > 1:  # fetched again and damaged again before it could be read
                    raise IntegrityError(f"{got.path}: the cached copy of {where} does not match the manifest's "
                                         f"size and sha256 (fetched again, damaged again): refusing it")
                continue
            if got.state == "download":
                try:
                    fetch_verified(self.storage, ref.name, got.path, ref.bytes, ref.sha256, policy=self.policy,
                                   abort=abort, where=where)
                except BaseException:
                    self.cache.abandon(got.path)
                    raise
                self.stats["fetched"] += 1
                self.stats["bytes_fetched"] += ref.bytes
                return self.cache.commit(got.path, ref.key, ref.sha256)
            now = time.monotonic()
            if now > deadline:
                raise TfpipeError(f"{where}: waited {self.wait_timeout:.0f} s for the stream cache in "
                                  f"{self.opts.stream_cache_dir} ({got.why}); is stream_cache_limit too small "
                                  f"for the readers sharing it?")
            if now - said >= WAIT_LOG_EVERY:
                said = now
                log.warning("%s: waiting %.0f s so far for the stream cache in %s (%s)", where,
                            now - (deadline - self.wait_timeout), self.opts.stream_cache_dir, got.why)
            with self._lock:  # woken at once by a release in this process, else polled with a growing pause
                self._lock.wait(pause)
            if abort.is_set():
                raise Aborted(where)
            pause = min(_POLL_MAX, pause * 1.5)

    # -- tickets: shards handed to TensorFlow ---------------------------------------------------------
    def release(self, ticket: int) -> None:
        with self._lock:
            entry = self._tickets.pop(int(ticket), None)
        if entry is not None:
            self.cache.release(entry[1])
        with self._lock:  # a fetch thread waiting for room looks again now
            self._lock.notify_all()

    def _release_session(self, session) -> None:
        with self._lock:
            mine = [t for t, (s, _) in self._tickets.items() if s is session]
        for t in mine:
            self.release(t)

    # -- one epoch -----------------------------------------------------------------------------------
    def session(self, order=None, start: int = 0):
        """Generator of ``(path, ticket)`` for the next epoch, fetching ``read_ahead`` shards ahead. ``order``:
        the shard numbers to read instead (an epoch order planned elsewhere, e.g. the resumable one), from its
        ``start``-th entry on: the shards before it are never fetched."""
        with self._lock:  # a new epoch: whatever an earlier one left leased is no longer read
            stale = {s for s, _ in self._tickets.values()}
        for s in stale:
            self._release_session(s)
        if order is None:
            order = epoch_order(len(self.opts.shards), self.seed, next(self._epochs), self.shuffle)
        order = [int(i) for i in order]
        session = object()
        abort = threading.Event()
        # one download at a time, in read order: the shard needed next never shares the link with later ones
        pool = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="tfpipe-stream")
        futures: dict[int, cf.Future] = {}
        handed = int(start)
        finished = False
        try:
            for pos in range(int(start), len(order)):
                for ahead in range(pos, min(len(order), pos + 1 + self.opts.read_ahead)):
                    if ahead not in futures:
                        futures[ahead] = pool.submit(self.acquire, order[ahead], abort)
                path = futures[pos].result()
                ticket = next(self._next_ticket)
                with self._lock:
                    self._tickets[ticket] = (session, self.opts.shards[order[pos]].key)
                handed = pos + 1
                yield path.encode(), ticket
            finished = True
        finally:
            abort.set()
            pool.shutdown(wait=True, cancel_futures=True)
            for pos, fut in futures.items():  # fetched ahead but never handed: give the leases back
                if pos >= handed and fut.done() and not fut.cancelled() and fut.exception() is None:
                    self.cache.release(self.opts.shards[order[pos]].key)
            if not finished:  # the reader went away: nothing it was handed is read any more
                self._release_session(session)


def _release_all(cache: ShardCache, tickets: dict) -> None:
    for _, key in list(tickets.values()):
        cache.release(key)
    tickets.clear()
