"""The one downloader: every read of a remote object (``s3://`` and Beam's schemes) into a file or into memory
(``fetch_verified``/``fetch_once``: a shard; ``read_object``: a manifest; ``read_remote``: whole or a byte range,
what ``S3Storage``'s and ``BeamFSStorage``'s reads call; ``storage.parts``: a whole object into a file, as
parallel ranged GETs under this same policy).

One retry policy (``RetryPolicy``): bounded attempts with exponential backoff and full jitter for transient
failures (``TRANSIENT_CODES``: throttling such as 503 SlowDown, 5xx answers; connection resets, timeouts, a
body cut short); a retry resumes with a ranged GET pinned to the object's ETag (``If-Match``), or starts over
when the object changed (refused instead when the caller pinned the ETag: ``_Changed``); a size cap (the bytes the caller expects: an object holding more is never stored);
and deadlines — ``request_timeout`` (one request: cut and resumed when it takes longer), ``stall_timeout`` (no
byte at all for that long, across retries: give up) and ``shard_timeout`` (the whole object) — with a log line
while a slow object is on its way. ``fetch_verified`` adds the manifest's check (size and sha256, hashed while
the bytes arrive; a mismatch is fetched once more, then refused by name). Stops early when ``abort`` is set.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import random
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable

from ..util.errors import IntegrityError, TfpipeError

__all__ = ["RetryPolicy", "fetch_verified", "fetch_once", "read_object", "read_remote", "Aborted", "is_transient",
           "default_policy", "TRANSIENT_CODES", "MAX_METADATA_BYTES"]

log = logging.getLogger(__name__)

_CHUNK = 1 << 20
PROGRESS_EVERY = 10.0   # seconds between "still fetching" lines
MAX_METADATA_BYTES = 512 << 20  # a manifest larger than this is refused, never read into memory
TRANSIENT_CODES = frozenset({
    "SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded", "RequestThrottled",
    "ServiceUnavailable", "InternalError", "RequestTimeout", "RequestTimeTooSkewed", "TooManyRequestsException",
    "500", "502", "503", "504"})
_CHANGED_CODES = {"PreconditionFailed", "412", "InvalidRange", "416"}


class Aborted(Exception):
    """The reader went away while its object was being fetched."""


def _positive(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries: ``attempts`` tries, waits of uniform(0, min(max_delay, base_delay * 2**k)) seconds;
    deadlines in seconds: one request, no progress at all, one whole object."""

    attempts: int = 8
    base_delay: float = 0.1
    max_delay: float = 5.0
    request_timeout: float = 120.0
    stall_timeout: float = 30.0
    shard_timeout: float = 1800.0

    def __post_init__(self):
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int) or self.attempts < 1:
            raise ValueError(f"attempts must be a positive integer, got {self.attempts!r}")
        if not self.base_delay > 0 or not self.max_delay >= self.base_delay:
            raise ValueError(f"need 0 < base_delay <= max_delay, got {self.base_delay!r}, {self.max_delay!r}")
        for name in ("request_timeout", "stall_timeout", "shard_timeout"):
            _positive(name, getattr(self, name))

    def delay(self, attempt: int, rng: random.Random) -> float:
        return rng.uniform(0, min(self.max_delay, self.base_delay * (2 ** attempt)))


def _client_code(exc) -> tuple[str, int | None] | None:
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return None
    code = str(response.get("Error", {}).get("Code", ""))
    return code, response.get("ResponseMetadata", {}).get("HTTPStatusCode")


def is_transient(exc: BaseException) -> bool:
    """Worth another try: throttling and 5xx answers, resets, timeouts, bodies cut short."""
    code = _client_code(exc)
    if code is not None:
        name, status = code
        return name in TRANSIENT_CODES or bool(status and status >= 500)
    if isinstance(exc, (ConnectionError, TimeoutError, _Cut)):
        return True
    try:
        from botocore import exceptions as bx
    except ImportError:  # pragma: no cover - boto3 ships with the s3 extra
        return False
    transient = (bx.ConnectionError, bx.HTTPClientError, bx.ReadTimeoutError, bx.ConnectTimeoutError,
                 bx.IncompleteReadError)
    streaming = getattr(bx, "ResponseStreamingError", None)
    if streaming is not None:
        transient = transient + (streaming,)
    if isinstance(exc, transient):
        return True
    try:
        import urllib3.exceptions as ux

        return isinstance(exc, (ux.ProtocolError, ux.ReadTimeoutError, ux.IncompleteRead))
    except ImportError:  # pragma: no cover
        return False


class _TooLong(Exception):
    pass


class _Cut(Exception):
    """A request past its deadline, or a body that ended early: resumed by the next attempt."""


class _Changed(Exception):
    """The object no longer has the ETag the caller pinned (``If-Match`` failed): the caller decides."""


class _Sink:
    """Where the bytes go (a file, created or truncated, or memory), written from the start or resumed at
    ``pos``, hashed as it grows, never beyond ``cap`` bytes."""

    def __init__(self, path: str | None, cap: int, progress: Callable[[int], None] | None = None):
        self.path, self.cap, self.progress = path, cap, progress
        self.f = open(path, "r+b" if os.path.exists(path) else "w+b") if path is not None else io.BytesIO()
        self.restart()

    def restart(self) -> None:
        self.f.seek(0)
        self.f.truncate()
        self.pos, self.sha = 0, hashlib.sha256()

    def write(self, chunk: bytes) -> None:
        if self.pos + len(chunk) > self.cap:  # never hold more than the caller allowed
            raise _TooLong()
        self.f.write(chunk)
        self.sha.update(chunk)
        self.pos += len(chunk)
        if self.progress is not None:
            self.progress(len(chunk))

    def close(self, sync: bool) -> None:
        if sync and self.path is not None:
            self.f.flush()
            os.fsync(self.f.fileno())
        if self.path is not None:
            self.f.close()


class _Clock:
    """The deadlines of one object: its start, the last byte that arrived, the last progress line."""

    def __init__(self, policy: RetryPolicy, where: str, size: int | None):
        self.policy, self.where, self.size = policy, where, size
        self.start = self.seen = self.said = time.monotonic()

    def tick(self, sink: _Sink, request_start: float) -> None:
        """After each piece of a body: cut the request past its deadline, give up past the object's."""
        now = time.monotonic()
        if now - self.start > self.policy.shard_timeout:
            raise TfpipeError(f"cannot fetch {self.where}: not complete after {now - self.start:.0f} s "
                              f"({sink.pos} of {self.size or '?'} bytes; shard_timeout={self.policy.shard_timeout:g} s)")
        if now - self.said >= PROGRESS_EVERY:
            self.said = now
            log.warning("still fetching %s: %d of %s bytes after %.0f s", self.where, sink.pos, self.size or "?",
                        now - self.start)
        if now - request_start > self.policy.request_timeout:
            raise _Cut(f"request cut after {now - request_start:.0f} s (request_timeout="
                       f"{self.policy.request_timeout:g} s) at byte {sink.pos}")

    def arrived(self) -> None:
        self.seen = time.monotonic()

    def give_up_before_retry(self, sink: _Sink, exc: BaseException, attempts: int) -> None:
        now = time.monotonic()
        if now - self.seen > self.policy.stall_timeout:
            raise TfpipeError(f"cannot fetch {self.where}: no byte arrived for {now - self.seen:.0f} s over "
                              f"{attempts} attempt(s) (stall_timeout={self.policy.stall_timeout:g} s; last: "
                              f"{type(exc).__name__}: {exc})") from exc
        if now - self.start > self.policy.shard_timeout:
            raise TfpipeError(f"cannot fetch {self.where}: not complete after {now - self.start:.0f} s "
                              f"({sink.pos} of {self.size or '?'} bytes; shard_timeout="
                              f"{self.policy.shard_timeout:g} s)") from exc


def _pump(read, sink: _Sink, clock: _Clock, abort, where: str, request_start: float) -> None:
    while True:
        if abort is not None and abort.is_set():
            raise Aborted(where)
        chunk = read()
        if not chunk:
            return
        clock.arrived()
        sink.write(chunk)
        clock.tick(sink, request_start)


def _s3_get(storage, name: str, sink: _Sink, clock: _Clock, state: dict, abort, where: str) -> None:
    """One GET of ``[start + sink.pos, stop)`` (pinned to the ETag first seen, or the caller's), its body
    streamed into the sink."""
    etag, start = state.get("etag"), state["start"]
    if sink.pos and not etag:
        sink.restart()
    started = time.monotonic()
    pin = etag if (sink.pos or state["pinned"]) else None
    body, got_etag, ranged, length = storage.get_stream(name, start + sink.pos, pin, state["stop"])
    if (start or sink.pos) and not ranged:
        if start:
            body.close()
            raise TfpipeError(f"cannot read {where} from byte {start}: the server ignored the range")
        sink.restart()  # the server sent the whole object
    state["etag"] = got_etag or etag
    expect = sink.pos + (length or 0)
    raw = getattr(body, "_raw_stream", None)
    read1 = getattr(raw, "read1", None)  # returns what has arrived: deadlines are checked between pieces
    try:
        _pump((lambda: read1(_CHUNK)) if read1 is not None else (lambda: body.read(_CHUNK)), sink, clock, abort,
              where, started)
    finally:
        body.close()
    if length is not None and sink.pos < expect:
        raise _Cut(f"body ended at byte {sink.pos} of {expect}")


def _generic_get(storage, name: str, sink: _Sink, clock: _Clock, state: dict, abort, where: str) -> None:
    """Any other scheme: the storage's reader, resumed where the last attempt stopped."""
    started = time.monotonic()
    start, stop = state["start"], state["stop"]
    with storage.open_read(name) as f:
        if start + sink.pos:
            f.seek(start + sink.pos)
        if stop is None:
            _pump(lambda: f.read(_CHUNK), sink, clock, abort, where, started)
        else:
            _pump(lambda: f.read(min(_CHUNK, stop - start - sink.pos)), sink, clock, abort, where, started)


def _get(storage, name: str, sink: _Sink, policy: RetryPolicy, abort, rng, sleep, where: str, size, *,
         start: int = 0, stop: int | None = None, etag: str | None = None, get=None) -> dict:
    """Bytes ``[start, stop)`` of ``name`` into ``sink`` under ``policy``; ``etag``: only of that version (else
    ``_Changed``). Returns what the answers said (``etag``; ``size`` for a HEAD)."""
    get = get or (_s3_get if hasattr(storage, "get_stream") else _generic_get)
    clock = _Clock(policy, where, size)
    if hasattr(storage, "_translate"):
        storage._started = clock.start  # its wording of a final error says how long we tried
    state: dict = {"etag": etag, "pinned": bool(etag), "start": start, "stop": stop}
    for attempt in range(policy.attempts):
        try:
            get(storage, name, sink, clock, state, abort, where)
            return state
        except (Aborted, _TooLong, TfpipeError):
            raise
        except Exception as exc:  # noqa: BLE001 - classified: missing, changed, transient, or final
            code = _client_code(exc)
            if isinstance(exc, FileNotFoundError) or (code is not None and code[0] in ("NoSuchKey", "404",
                                                                                      "NotFound")):
                raise FileNotFoundError(f"{where}: no such object") from None
            if code is not None and (code[0] in _CHANGED_CODES or code[1] in (412, 416)):
                if state["pinned"]:
                    raise _Changed(where) from exc
                log.warning("%s changed while being fetched: starting over", where)
                state.pop("etag", None)
                sink.restart()
                continue
            if not is_transient(exc):
                raise _final(storage, name, exc, f"cannot fetch {where}: {type(exc).__name__}: {exc}") from exc
            if attempt + 1 == policy.attempts:
                raise _final(storage, name, exc, f"cannot fetch {where}: still failing after {policy.attempts} "
                                                 f"attempts with backoff ({type(exc).__name__}: {exc})") from exc
            clock.give_up_before_retry(sink, exc, attempt + 1)
            wait = policy.delay(attempt, rng)
            log.warning("fetching %s: %s (%s); retry %d in %.2f s", where, type(exc).__name__, exc, attempt + 1,
                        wait)
            if abort is not None and abort.wait(wait):
                raise Aborted(where) from None
            if abort is None:
                sleep(wait)


def _final(storage, name: str, exc: Exception, message: str) -> Exception:
    """The error that ends a download: the storage's own wording of it where it has one (S3: access denied,
    no answer with its timeouts and attempts), else ``message``."""
    translate = getattr(storage, "_translate", None)
    if translate is not None:
        with contextlib.suppress(Exception):
            translated = translate(exc, "read", name)
            if translated is not exc:
                return translated
    return TfpipeError(message)


def _where(storage, name: str) -> str:
    return f"{str(getattr(storage, 'url', '')).rstrip('/')}/{name}"


def fetch_once(storage, name: str, path: str, size: int, *, policy: RetryPolicy | None = None,
               abort: threading.Event | None = None, rng: random.Random | None = None,
               sleep: Callable[[float], None] = time.sleep, where: str | None = None,
               progress: Callable[[int], None] | None = None) -> tuple[int, str] | None:
    """Download ``name`` into ``path`` (created or truncated); ``(bytes, sha256)`` of what arrived, or None when
    the object holds more than ``size`` bytes (it cannot be the manifest's shard)."""
    policy = policy or RetryPolicy()
    where = where or _where(storage, name)
    sink = _Sink(path, size, progress)
    ok = False
    try:
        _get(storage, name, sink, policy, abort, rng or random.Random(), sleep, where, size)
        ok = True
        return sink.pos, sink.sha.hexdigest()
    except _TooLong:
        return None
    finally:
        sink.close(sync=ok)


def fetch_verified(storage, name: str, path: str, size: int, sha256: str, **kw) -> None:
    """Fetch into ``path`` until its bytes match the manifest's size and sha256: a mismatch is fetched once
    more, then refused naming the shard (``IntegrityError``; the file is left for the caller to remove)."""
    where = kw.get("where") or _where(storage, name)
    problem = ""
    for attempt in (1, 2):
        got = fetch_once(storage, name, path, size, **kw)
        if got is None:
            problem = f"holds more than the manifest's {size} bytes"
        elif got[0] != size:
            problem = f"{got[0]} bytes, manifest says {size}"
        elif got[1] != sha256:
            problem = f"sha256 {got[1][:12]}... differs from the manifest's {sha256[:12]}..."
        else:
            return
        if attempt == 1:
            log.warning("%s: %s; fetching it once more", where, problem)
    raise IntegrityError(f"{where}: {problem} (fetched twice): the shard in storage does not match its manifest; "
                         f"refusing it")


def default_policy(storage) -> RetryPolicy:
    """The policy of a storage's own reads: its ``max_attempts`` (S3: ``$TFPIPE_S3_MAX_ATTEMPTS``) when it has
    one, the default otherwise."""
    attempts = getattr(storage, "max_attempts", None)
    return RetryPolicy(attempts=attempts) if attempts else RetryPolicy()


def read_remote(storage, name: str, start: int = 0, stop: int | None = None, *, cap: int | None = None,
                etag: str | None = None, policy: RetryPolicy | None = None) -> tuple[bytes, str | None]:
    """Bytes ``[start, stop)`` of a remote object (to its end when ``stop`` is None) and its ETag, under the one
    policy; refused naming it when it holds more than ``cap`` bytes; ``etag``: only that version (else the
    storage's "changed" error: S3's is an ``InputError``)."""
    where = _where(storage, name)
    if stop is not None:
        if stop <= start:
            return b"", etag
        cap = stop - start if cap is None else min(cap, stop - start)
    sink = _Sink(None, sys.maxsize if cap is None else cap)
    try:
        state = _get(storage, name, sink, policy or default_policy(storage), None, random.Random(), time.sleep,
                     where, None if stop is None else stop - start, start=start, stop=stop, etag=etag)
    except _TooLong:
        raise TfpipeError(f"{where}: larger than {cap} bytes: refusing to read it") from None
    except _Changed as exc:
        cause = exc.__cause__
        raise _final(storage, name, cause, f"{where} changed while being read (ETag {etag} is gone)") from cause
    return sink.f.getvalue(), state.get("etag")


def read_object(storage, name: str, cap: int = MAX_METADATA_BYTES, *, policy: RetryPolicy | None = None) -> bytes:
    """The bytes of a small object (a manifest), read with the same retries and deadlines, refused naming it
    when it holds more than ``cap`` bytes; a local file is read directly (a regular file only)."""
    where = _where(storage, name)
    if getattr(storage, "local_path", lambda n: None)(name) is not None:
        data = storage.read_bytes(name)
        if len(data) > cap:
            raise TfpipeError(f"{where}: larger than {cap} bytes: refusing to read it")
        return data
    return read_remote(storage, name, cap=cap, policy=policy)[0]
