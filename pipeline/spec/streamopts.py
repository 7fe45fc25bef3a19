"""``StreamOptions``: how a remote shard set (``s3://``, ``gs://``, ...) is streamed through a bounded per-host
cache — one frozen option group embedded in :class:`~pipeline.PipelineSpec` as ``stream``.

``stream_cache_dir``: the host-local directory shared by every rank of the host that reads the set (the cache
keeps everything it creates under ``stream_cache_dir/tfpipe-stream/``); ``stream_cache_limit``: the most bytes
the cache keeps there (``"200GiB"``, an int, or a string of digits; None, the default: ``DEFAULT_LIMIT_SHARE``
of the space the cache's file system has for it — its free bytes plus what the cache already holds — read by
the layer that opens the cache, ``pipeline.remote.streamcache.default_limit``, never here);
``read_ahead``: shards fetched ahead of the ones being read; ``local_readers``: processes on this host sharing
``stream_cache_dir``
(None: this host's workers from the topology, 1 outside a cluster); ``request_timeout``,
``stall_timeout``, ``shard_timeout``: the downloader's deadlines in seconds (one request, which is cut and
resumed past it; no byte at all across retries; one whole shard), each failing the read naming the shard. ``url`` and ``shards`` — where the set
lives and the manifest's ``(name, bytes, sha256)`` of every file this rank reads, in ``files`` order — are
filled by ``PipelineSpec.from_manifest``. No I/O here.

The names say "stream" because ``cache`` is the tf.data cache stage (``cache="file:..."``) of the same spec.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace

from converters.util.checks import is_integral, is_real, set_int
from converters.util.fs import is_sha256
from converters.util.units import parse_size

__all__ = ["StreamOptions", "ShardRef", "DEFAULT_READ_AHEAD", "DEFAULT_TIMEOUTS", "CACHE_SUBDIR", "is_remote",
           "stream_options", "DEFAULT_LIMIT_SHARE"]

DEFAULT_READ_AHEAD = 2
# seconds: one request (cut and resumed past it), no byte at all (across retries), one whole shard
DEFAULT_TIMEOUTS = {"request_timeout": 120.0, "stall_timeout": 30.0, "shard_timeout": 1800.0}
DEFAULT_LIMIT_SHARE = 0.5  # stream_cache_limit=None: this share of (free bytes + the cache's own) on its disk
CACHE_SUBDIR = "tfpipe-stream"   # everything the cache creates lives under <stream_cache_dir>/tfpipe-stream/


@dataclass(frozen=True)
class ShardRef:
    """One shard to stream: its name in the set (``label=1/x.tfrecord`` in a group), bytes and sha256."""

    name: str
    bytes: int
    sha256: str

    def __post_init__(self):
        if not self.name or self.name.startswith("/") or ".." in self.name.split("/"):
            raise ValueError(f"shard name must be relative and stay inside the set, got {self.name!r}")
        set_int(self, "bytes", name=f"shard {self.name}: bytes", minimum=0, must="an integer >= 0")
        if not is_sha256(self.sha256):
            raise ValueError(f"shard {self.name}: sha256 must be 64 lowercase hex digits, got {self.sha256!r}")

    @property
    def key(self) -> str:
        """The cache's file name for this shard: content first (``<sha256[:32]>-<basename>``), so two sets
        holding the same bytes share one file and a changed shard never reuses a stale one."""
        return f"{self.sha256[:32]}-{self.name.rsplit('/', 1)[-1]}"


def _limit(value) -> int | None:
    if value is None:
        return None
    if is_integral(value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"stream_cache_limit must be a size such as '200GiB', a byte count or None (the default: "
                         f"half the free space), got {value!r}")
    try:
        return parse_size(value)
    except ValueError as exc:
        raise ValueError(f"stream_cache_limit: {exc}") from None


@dataclass(frozen=True, init=False)
class StreamOptions:
    """Streaming of a remote set through a bounded, host-shared cache (see the module docstring)."""

    stream_cache_dir: str
    stream_cache_limit: int | str | None = None
    read_ahead: int = DEFAULT_READ_AHEAD
    local_readers: int | None = None
    request_timeout: float = DEFAULT_TIMEOUTS["request_timeout"]
    stall_timeout: float = DEFAULT_TIMEOUTS["stall_timeout"]
    shard_timeout: float = DEFAULT_TIMEOUTS["shard_timeout"]
    url: str | None = None
    shards: tuple[ShardRef, ...] = ()

    def __init__(self, stream_cache_dir: str | None = None, stream_cache_limit: int | str | None = None,
                 read_ahead: int = DEFAULT_READ_AHEAD, local_readers: int | None = None,
                 request_timeout: float = DEFAULT_TIMEOUTS["request_timeout"],
                 stall_timeout: float = DEFAULT_TIMEOUTS["stall_timeout"],
                 shard_timeout: float = DEFAULT_TIMEOUTS["shard_timeout"], url: str | None = None,
                 shards=()):
        given = dict(locals())
        for f in self.__dataclass_fields__:
            object.__setattr__(self, f, given[f])
        self.__post_init__()

    def __post_init__(self):
        if not isinstance(self.stream_cache_dir, str) or not self.stream_cache_dir:
            raise ValueError(f"stream_cache_dir must be a non-empty path, got {self.stream_cache_dir!r}")
        object.__setattr__(self, "stream_cache_limit", _limit(self.stream_cache_limit))
        set_int(self, "read_ahead", minimum=0, must="an integer >= 0 (shards fetched ahead)")
        set_int(self, "local_readers", minimum=1, none=True, must="a positive integer or None (from the topology)")
        for name in DEFAULT_TIMEOUTS:
            value = getattr(self, name)
            if not is_real(value) or not 0 < value < float("inf"):
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
        object.__setattr__(self, "shards", tuple(self.shards))
        if any(not isinstance(s, ShardRef) for s in self.shards):
            raise ValueError("shards must be ShardRef entries (filled by PipelineSpec.from_manifest)")
        if self.shards and not self.url:
            raise ValueError("shards to stream need the set's url")

    def bind(self, url: str, shards) -> "StreamOptions":
        """A copy that streams ``shards`` (ShardRef, in read order) from ``url``."""
        return replace(self, url=str(url).rstrip("/"), shards=tuple(shards))

    def local_paths(self) -> list[str]:
        """Where each shard will be once fetched (what TensorFlow opens)."""
        return [os.path.join(os.path.abspath(self.stream_cache_dir), CACHE_SUBDIR, "data", s.key) for s in self.shards]


def is_remote(url: str) -> bool:
    """A location the converters read through ``converters.storage`` (``s3://``, ``gs://``, ...) that is not a
    local path: streamed."""
    from converters.storage import is_s3
    from converters.storage.beamfs import has_scheme

    return is_s3(url) or (has_scheme(url) and not str(url).startswith("file:"))


def stream_options(given, stream_cache_dir: str, stream_cache_limit=None,
                   read_ahead: int | None = None) -> StreamOptions:
    """The options ``from_manifest`` streams with: ``given`` (a StreamOptions) or built from its keywords."""
    if given is not None:
        if not isinstance(given, StreamOptions):
            raise ValueError(f"stream must be a StreamOptions, got {given!r}")
        return given
    extra = {} if read_ahead is None else {"read_ahead": read_ahead}
    return StreamOptions(stream_cache_dir=str(stream_cache_dir), stream_cache_limit=stream_cache_limit, **extra)
