"""Fetch one shard of a remote set into a file the cache has reserved, checked against the manifest.

``fetch_verified`` downloads, checks size and sha256 (hashed while the bytes arrive), and on a mismatch
fetches once more before refusing the shard by name (``IntegrityError``). ``s3://``: one streamed GET per
attempt with our own bounded retries — exponential backoff with full jitter — for transient failures
(503 SlowDown and other throttling or 5xx answers, connection resets, timeouts, a body cut short); a retry
resumes with a ranged GET pinned to the object's ETag (``If-Match``), or starts over when the object
changed. Other schemes go through the storage's own ``fetch``. Stops early when ``abort`` is set.
"""
from __future__ import annotations

import hashlib
import logging
import os
import random
import threading
import time
from dataclasses import dataclass
from typing import Callable

from converters.util.errors import IntegrityError, TfpipeError

__all__ = ["RetryPolicy", "fetch_verified", "fetch_once", "Aborted", "is_transient"]

log = logging.getLogger(__name__)

_CHUNK = 1 << 20
_TRANSIENT_CODES = {"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded", "ServiceUnavailable",
                    "InternalError", "RequestTimeout", "RequestTimeTooSkewed", "TooManyRequestsException",
                    "500", "502", "503", "504"}
_CHANGED_CODES = {"PreconditionFailed", "412", "InvalidRange", "416"}


class Aborted(Exception):
    """The reader went away while its shard was being fetched."""


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries: ``attempts`` tries, waits of uniform(0, min(max_delay, base_delay * 2**k)) seconds."""

    attempts: int = 8
    base_delay: float = 0.1
    max_delay: float = 5.0

    def __post_init__(self):
        if not isinstance(self.attempts, int) or self.attempts < 1:
            raise ValueError(f"attempts must be a positive integer, got {self.attempts!r}")
        if not self.base_delay > 0 or not self.max_delay >= self.base_delay:
            raise ValueError(f"need 0 < base_delay <= max_delay, got {self.base_delay!r}, {self.max_delay!r}")

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
        return name in _TRANSIENT_CODES or bool(status and status >= 500)
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    try:
        from botocore import exceptions as bx
    except ImportError:  # pragma: no cover - boto3 ships with the s3 extra
        return isinstance(exc, OSError)
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


class _Sink:
    """The reserved file, written from the start or resumed at ``pos``, hashed as it grows."""

    def __init__(self, path: str, size: int):
        self.path, self.size = path, size
        self.f = open(path, "r+b" if os.path.exists(path) else "w+b")
        self.restart()

    def restart(self) -> None:
        self.f.seek(0)
        self.f.truncate()
        self.pos, self.sha = 0, hashlib.sha256()

    def write(self, chunk: bytes) -> None:
        if self.pos + len(chunk) > self.size:  # never hold more than the reservation
            raise _TooLong()
        self.f.write(chunk)
        self.sha.update(chunk)
        self.pos += len(chunk)

    def close(self, sync: bool) -> None:
        if sync:
            self.f.flush()
            os.fsync(self.f.fileno())
        self.f.close()


class _TooLong(Exception):
    pass


def _s3_get(storage, name: str, sink: _Sink, policy: RetryPolicy, abort, rng, sleep, where: str) -> None:
    client, key = storage.client, storage.prefix + name
    etag = None
    for attempt in range(policy.attempts):
        try:
            args = {"Bucket": storage.bucket, "Key": key}
            if sink.pos and etag:
                args.update(Range=f"bytes={sink.pos}-", IfMatch=etag)
            elif sink.pos:
                sink.restart()
            resp = client.get_object(**args)
            if "Range" in args and not resp.get("ContentRange"):
                sink.restart()  # the server sent the whole object
            etag = resp.get("ETag") or etag
            body = resp["Body"]
            try:
                while True:
                    if abort is not None and abort.is_set():
                        raise Aborted(where)
                    chunk = body.read(_CHUNK)
                    if not chunk:
                        break
                    sink.write(chunk)
            finally:
                body.close()
            return
        except (Aborted, _TooLong):
            raise
        except Exception as exc:  # noqa: BLE001 - classified: transient, changed, or final
            code = _client_code(exc)
            if code is not None and code[0] in ("NoSuchKey", "404", "NotFound"):
                raise TfpipeError(f"{where}: no such object (listed in the manifest)") from None
            if code is not None and (code[0] in _CHANGED_CODES or code[1] in (412, 416)):
                log.warning("%s changed while being fetched: starting over", where)
                etag = None
                sink.restart()
                continue
            if not is_transient(exc):
                raise TfpipeError(f"cannot fetch {where}: {exc}") from exc
            if attempt + 1 == policy.attempts:
                raise TfpipeError(f"cannot fetch {where}: still failing after {policy.attempts} attempts with "
                                  f"backoff ({type(exc).__name__}: {exc})") from exc
            wait = policy.delay(attempt, rng)
            log.info("fetching %s: %s (%s); retry %d in %.2f s", where, type(exc).__name__, exc, attempt + 1, wait)
            if abort is not None and abort.wait(wait):
                raise Aborted(where) from None
            if abort is None:
                sleep(wait)


def _generic_get(storage, name: str, sink: _Sink, policy: RetryPolicy, abort, rng, sleep, where: str) -> None:
    """Any other scheme: the storage's own fetch into the reserved file, then hashed."""
    for attempt in range(policy.attempts):
        try:
            storage.fetch(name, sink.path)
            break
        except (ConnectionError, TimeoutError) as exc:
            if attempt + 1 == policy.attempts:
                raise TfpipeError(f"cannot fetch {where}: still failing after {policy.attempts} attempts") from exc
            sleep(policy.delay(attempt, rng))
    sink.f.close()
    sink.f = open(sink.path, "r+b")
    sink.pos, sink.sha = 0, hashlib.sha256()
    while chunk := sink.f.read(_CHUNK):
        if abort is not None and abort.is_set():
            raise Aborted(where)
        sink.sha.update(chunk)
        sink.pos += len(chunk)


def fetch_once(storage, name: str, path: str, size: int, *, policy: RetryPolicy | None = None,
               abort: threading.Event | None = None, rng: random.Random | None = None,
               sleep: Callable[[float], None] = time.sleep, where: str | None = None) -> tuple[int, str] | None:
    """Download ``name`` into ``path`` (created or truncated); ``(bytes, sha256)`` of what arrived, or None when
    the object holds more than ``size`` bytes (it cannot be the manifest's shard)."""
    policy = policy or RetryPolicy()
    rng = rng or random.Random()
    where = where or f"{storage.url}/{name}"
    sink = _Sink(path, size)
    ok = False
    try:
        get = _s3_get if hasattr(storage, "bucket") and hasattr(storage, "client") else _generic_get
        get(storage, name, sink, policy, abort, rng, sleep, where)
        ok = True
        return sink.pos, sink.sha.hexdigest()
    except _TooLong:
        return None
    finally:
        sink.close(sync=ok)


def fetch_verified(storage, name: str, path: str, size: int, sha256: str, **kw) -> None:
    """Fetch into ``path`` until its bytes match the manifest's size and sha256: a mismatch is fetched once
    more, then refused naming the shard (``IntegrityError``; the file is left for the caller to remove)."""
    where = kw.get("where") or f"{storage.url}/{name}"
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
