"""``s3://bucket/prefix`` storage behind the ``Storage`` interface (boto3 imported lazily).

* Retries: reads of an object (``read_bytes``, ``read_range``, ``read_with_etag``, ``fetch``) go through the
  one downloader (``storage.download``: ``max_attempts`` attempts with backoff and jitter, ETag pinning, a size
  cap, deadlines; large objects as parallel ranged GETs, ``storage.parts``) on a client that never retries by
  itself; writes, listings and HEADs use botocore's ``standard`` mode (throttling such as SlowDown, 500/503,
  connection resets), with ``max_attempts`` attempts per request.
* Large files go up in parts (boto3 ``TransferConfig``: multipart above ``multipart_threshold``).
* Checksums: every upload carries a SHA-256 checksum that S3 checks on arrival (per part for multipart
  uploads) and the object's size is checked afterwards; downloads are checked against the manifest's
  sha256 by ``sharding.transfer``.
* Shards are written locally, uploaded to a temporary key when complete (local file deleted: bounded disk),
  copied server-side to their final key on publish; the manifest is written last with one PUT (atomic).
* Errors become ``TfpipeError`` with the bucket/key and the cause (missing bucket, access denied,
  throttled after retries, endpoint unreachable, no credentials).
* Bounded waits: every request has a connect timeout and a read timeout (a stalled socket read), and is tried
  at most ``max_attempts`` times, so an endpoint that accepts connections but never answers fails after about
  ``max_attempts * (connect_timeout + read_timeout)`` plus backoff, saying so; ``TFPIPE_S3_CONNECT_TIMEOUT``,
  ``TFPIPE_S3_READ_TIMEOUT`` (seconds) and ``TFPIPE_S3_MAX_ATTEMPTS`` override the defaults.
* Conditional writes (``put_conditional``, ``delete_if_match``) for the output claim (``storage.claim``).
"""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import time
import weakref
from typing import Callable, Iterator

from ..util.errors import InputError, MissingInputError, OutputError, TfpipeError
from ..util.units import format_size
from .download import TRANSIENT_CODES, read_remote
from .parts import fetch_file

_READ_ACTIONS = ("read", "list", "download")  # what a missing bucket makes a missing input (the rest: output)

__all__ = ["S3Storage", "parse_s3_url", "s3_endpoint", "sagemaker_endpoint", "DEFAULT_MAX_ATTEMPTS", "DEFAULT_PART_SIZE", "DEFAULT_CONNECT_TIMEOUT",
           "DEFAULT_READ_TIMEOUT"]

log = logging.getLogger(__name__)

DEFAULT_MAX_ATTEMPTS = 4
DEFAULT_CONNECT_TIMEOUT = 5.0  # seconds to open a connection
DEFAULT_READ_TIMEOUT = 10.0    # seconds a socket read may stall (not a bound on a whole transfer)
DEFAULT_PART_SIZE = 64 << 20  # 64 MiB multipart threshold and part size
_PRECONDITION = {"PreconditionFailed", "412", "ConditionalRequestConflict", "409"}



def parse_s3_url(url: str) -> tuple[str, str]:
    """``s3://bucket/a/b`` -> ``("bucket", "a/b/")``; the prefix is empty or ends with '/'."""
    if not str(url).startswith("s3://"):
        raise ValueError(f"not an s3:// URL: {url!r}")
    rest = str(url)[5:]
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise ValueError(f"s3 URL without a bucket: {url!r}")
    prefix = prefix.strip("/")
    return bucket, (prefix + "/" if prefix else "")


def s3_endpoint(explicit: str | None = None) -> str | None:
    """The S3 endpoint every S3 client of tfpipe uses, one rule: ``explicit`` (``--endpoint-url``), else
    ``$AWS_ENDPOINT_URL_S3``, else ``$AWS_ENDPOINT_URL``, else None (AWS itself)."""
    return _first(explicit, "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")


def sagemaker_endpoint(explicit: str | None = None) -> str | None:
    """The SageMaker API endpoint, in botocore's own order for SageMaker: ``explicit``, else
    ``$AWS_ENDPOINT_URL_SAGEMAKER``, else ``$AWS_ENDPOINT_URL``, else None (AWS itself)."""
    return _first(explicit, "AWS_ENDPOINT_URL_SAGEMAKER", "AWS_ENDPOINT_URL")


def _first(explicit: str | None, *names: str) -> str | None:
    if explicit:
        return explicit
    for name in names:
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return None


def _env_number(name: str, default: float, cast=float) -> float:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = cast(raw)
    except ValueError:
        raise ValueError(f"${name} must be a number, got {raw!r}") from None
    if value <= 0:
        raise ValueError(f"${name} must be positive, got {raw!r}")
    return value


class S3Storage:
    """A shard-set location in S3 (or an S3-compatible store: the endpoint is ``s3_endpoint(endpoint_url)``)."""

    def __init__(self, url: str, *, endpoint_url: str | None = None, max_attempts: int | None = None,
                 part_size: int = DEFAULT_PART_SIZE, max_concurrency: int = 4, region_name: str | None = None,
                 addressing_style: str | None = None, connect_timeout: float | None = None,
                 read_timeout: float | None = None):
        if max_attempts is None:
            max_attempts = int(_env_number("TFPIPE_S3_MAX_ATTEMPTS", DEFAULT_MAX_ATTEMPTS, int))
        if connect_timeout is None:
            connect_timeout = _env_number("TFPIPE_S3_CONNECT_TIMEOUT", DEFAULT_CONNECT_TIMEOUT)
        if read_timeout is None:
            read_timeout = _env_number("TFPIPE_S3_READ_TIMEOUT", DEFAULT_READ_TIMEOUT)
        if connect_timeout <= 0 or read_timeout <= 0:
            raise ValueError(f"timeouts must be positive, got connect {connect_timeout!r}, read {read_timeout!r}")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        if part_size < 5 << 20:
            raise ValueError(f"part_size must be at least 5 MiB (S3's minimum part), got {part_size}")
        self.url = str(url).rstrip("/")
        self.bucket, self.prefix = parse_s3_url(url)
        self.endpoint_url = s3_endpoint(endpoint_url)
        self.max_attempts = max_attempts
        self.part_size = part_size
        self.max_concurrency = max_concurrency
        self._region = region_name
        self._addressing = addressing_style or ("path" if self.endpoint_url else "auto")
        self._timeouts = (connect_timeout, read_timeout)
        self._client = self._read_client = None
        self._staging: str | None = None
        self.claim = None  # the run's claim on this location, set by ``shardset.writer.prepare_output``
        self.etags: dict[str, str] = {}  # key -> ETag last seen by a listing or HEAD (inputs pin it)

    # -- client ---------------------------------------------------------------------------------------
    @property
    def client(self):
        """Writes, listings and HEADs: botocore retries them (``max_attempts``)."""
        if self._client is None:
            self._client = self._make_client({"max_attempts": self.max_attempts}, "request")
        return self._client

    @property
    def read_client(self):
        """Object reads (``get_stream``, ``head``): one attempt per call; the retries, backoff and deadlines
        are the downloader's (``storage.download``), so they are never multiplied by botocore's."""
        if self._read_client is None:
            self._read_client = self._make_client({"total_max_attempts": 1}, "read")
        return self._read_client

    def _make_client(self, attempts: dict, role: str):
        try:
            import boto3
            from botocore.config import Config
        except ImportError:  # pragma: no cover - boto3 is an optional extra
            raise TfpipeError("s3:// locations need boto3: pip install 'tfpipe[s3]'") from None
        settings = dict(retries={"mode": "standard", **attempts},
                        s3={"addressing_style": self._addressing},
                        connect_timeout=self._timeouts[0], read_timeout=self._timeouts[1],
                        max_pool_connections=max(10, self.max_concurrency))
        try:  # botocore >= 1.36 adds CRC checksums to every request by default; we ask for SHA-256 ourselves
            config = Config(**settings, request_checksum_calculation="when_required",
                            response_checksum_validation="when_required")
        except TypeError:
            config = Config(**settings)
        session = boto3.session.Session()
        region = self._region or session.region_name or "us-east-1"
        log.debug("new S3 %s client for %s (endpoint %s)", role, self.url, self.endpoint_url or "AWS")
        return session.client("s3", endpoint_url=self.endpoint_url, region_name=region, config=config)

    def _transfer_config(self):
        from boto3.s3.transfer import TransferConfig

        return TransferConfig(multipart_threshold=self.part_size, multipart_chunksize=self.part_size,
                              max_concurrency=self.max_concurrency, use_threads=self.max_concurrency > 1)

    def _key(self, name: str) -> str:
        return self.prefix + name

    def _where(self, name: str | None) -> str:
        return f"s3://{self.bucket}/{self._key(name)}" if name is not None else self.url

    @contextlib.contextmanager
    def _errors(self, action: str, name: str | None = None) -> Iterator[None]:
        """Turn botocore/boto3 failures into one clear TfpipeError (FileNotFoundError for a missing key)."""
        self._started = time.monotonic()
        try:
            yield
        except TfpipeError:
            raise
        except Exception as exc:  # noqa: BLE001 - classified below, re-raised as is if unknown
            translated = self._translate(exc, action, name)
            if translated is exc:
                raise
            raise translated from exc

    def _translate(self, exc: Exception, action: str, name: str | None) -> Exception:
        from botocore import exceptions as bx

        where = self._where(name)
        cause = exc
        try:
            from boto3.exceptions import S3UploadFailedError

            if isinstance(exc, S3UploadFailedError) and isinstance(exc.__context__, Exception):
                cause = exc.__context__
        except ImportError:  # pragma: no cover
            pass
        if isinstance(cause, bx.ClientError):
            err = cause.response.get("Error", {})
            code = str(err.get("Code", ""))
            status = cause.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in ("NoSuchKey", "404", "NotFound"):
                return FileNotFoundError(f"{where}: no such object")
            if code in ("PreconditionFailed", "412") and action == "read":  # a GET with If-Match
                return InputError(f"{where} changed during the run (its ETag is no longer the one first seen): "
                                  "convert a stable input (nothing was written)", reason="input_changed")
            if code == "NoSuchBucket":   # reading or listing a missing bucket is a missing input (exit 2)
                missing = MissingInputError if action in _READ_ACTIONS else OutputError
                return missing(f"cannot {action} {where}: bucket {self.bucket!r} does not exist")
            if code in ("AccessDenied", "403", "Forbidden", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
                return TfpipeError(f"cannot {action} {where}: access denied ({code}); check the credentials "
                                   "and the bucket policy")
            if code in TRANSIENT_CODES or (status and status >= 500):
                return TfpipeError(f"cannot {action} {where}: S3 kept failing ({code or status}) after "
                                   f"{self.max_attempts} attempts with retries; try again later")
            return TfpipeError(f"cannot {action} {where}: {code or status}: {err.get('Message', cause)}")
        if isinstance(cause, bx.NoCredentialsError):
            return TfpipeError(f"cannot {action} {where}: no AWS credentials found (set AWS_ACCESS_KEY_ID/"
                               "AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or an instance role)")
        if isinstance(cause, (bx.ReadTimeoutError, bx.ConnectTimeoutError)):
            return TfpipeError(f"cannot {action} {where}: {self.endpoint_url or 'S3'} did not answer; gave up after "
                               f"{self.max_attempts} attempts in {self._elapsed():.0f} s (connect timeout "
                               f"{self._timeouts[0]:g} s, read timeout {self._timeouts[1]:g} s per attempt; "
                               f"$TFPIPE_S3_READ_TIMEOUT / $TFPIPE_S3_MAX_ATTEMPTS change them)")
        if isinstance(cause, (bx.EndpointConnectionError, bx.ConnectionClosedError, bx.ConnectionError,
                              bx.HTTPClientError)):
            return TfpipeError(f"cannot {action} {where}: connection to {self.endpoint_url or 'S3'} failed after "
                               f"{self.max_attempts} attempts in {self._elapsed():.0f} s ({cause})")
        if isinstance(cause, bx.BotoCoreError) or type(exc).__module__.startswith(("boto3", "s3transfer")):
            return TfpipeError(f"cannot {action} {where}: {cause}")
        return exc

    def _elapsed(self) -> float:
        return time.monotonic() - getattr(self, "_started", time.monotonic())

    # -- Storage interface ----------------------------------------------------------------------------
    def list(self) -> list[str]:
        """Names directly under the prefix (not in sub-prefixes), sorted."""
        names = []
        with self._errors("list"):
            paginator = self.client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix, Delimiter="/"):
                for obj in page.get("Contents", []):
                    name = obj["Key"][len(self.prefix):]
                    if name:
                        names.append(name)
        return sorted(names)

    def list_tree(self, prefix: str = "") -> list[tuple[str, int]]:
        """``(name, size)`` of every object whose name (key less this location's prefix) starts with ``prefix``,
        in sub-prefixes too, sorted by name."""
        found = []
        cut = len(self.prefix)
        with self._errors("list", prefix):
            pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self._key(prefix))
            for page in pages:
                for obj in page.get("Contents", []):
                    found.append((obj["Key"][cut:], int(obj["Size"])))
                    if obj.get("ETag"):
                        self.etags[obj["Key"]] = obj["ETag"]
        return sorted(found)

    def exists(self, name: str) -> bool:
        try:
            self.size(name)
            return True
        except FileNotFoundError:
            return False

    def size(self, name: str) -> int:
        with self._errors("read", name):
            head = self.client.head_object(Bucket=self.bucket, Key=self._key(name))
        if head.get("ETag"):
            self.etags[self._key(name)] = head["ETag"]
        return int(head["ContentLength"])

    def read_bytes(self, name: str, cap: int | None = None) -> bytes:
        """The whole object (refused naming it past ``cap`` bytes), under the downloader's policy."""
        return read_remote(self, name, cap=cap)[0]

    def read_range(self, name: str, start: int, stop: int, *, if_match: str | None = None) -> bytes:
        """Bytes ``[start, stop)`` of an object (ranged GETs under the downloader's policy); ``if_match``: only
        of that ETag (else ``InputError``: the object changed)."""
        return read_remote(self, name, start, stop, etag=if_match)[0]

    def get_stream(self, name: str, start: int = 0, if_match: str | None = None, stop: int | None = None):
        """One GET of ``name`` from byte ``start`` (to ``stop`` when given; only of ETag ``if_match`` when
        given), for the downloader (``storage.download``, which retries and classifies the errors):
        ``(body, etag, ranged, content length)``."""
        args = {"Bucket": self.bucket, "Key": self._key(name)}
        if start or stop is not None:
            args["Range"] = f"bytes={start}-{'' if stop is None else stop - 1}"
        if if_match:
            args["IfMatch"] = if_match
        resp = self.read_client.get_object(**args)
        length = resp.get("ContentLength")
        return resp["Body"], resp.get("ETag"), bool(resp.get("ContentRange")), None if length is None else int(length)

    def head(self, name: str) -> tuple[int, str | None]:
        """One HEAD of ``name``, for the downloader: ``(size, etag)``."""
        resp = self.read_client.head_object(Bucket=self.bucket, Key=self._key(name))
        return int(resp["ContentLength"]), resp.get("ETag")

    def write_bytes_atomic(self, name: str, data: bytes) -> None:
        """One PUT: S3 makes an object visible only once complete."""
        with self._errors("write", name):
            self.client.put_object(Bucket=self.bucket, Key=self._key(name), Body=data, ChecksumAlgorithm="SHA256")

    def delete(self, name: str) -> None:
        with self._errors("delete", name):
            self.client.delete_object(Bucket=self.bucket, Key=self._key(name))

    def staging_dir(self) -> str:
        """A local temporary directory for shards being written (removed when this object goes away)."""
        if self._staging is None:
            self._staging = tempfile.mkdtemp(prefix="tfpipe-s3-staging-")
            weakref.finalize(self, shutil.rmtree, self._staging, True)
        return self._staging

    def stage(self, local_path: str, tmp_name: str) -> None:
        """Upload a finished shard to its temporary key, then delete the local file."""
        self.upload_file(local_path, tmp_name)
        os.unlink(local_path)

    def publish(self, tmp_name: str, final_name: str) -> None:
        """Server-side copy to the final key (multipart for large objects), then delete the temporary key."""
        with self._errors("publish", final_name):
            self.client.copy({"Bucket": self.bucket, "Key": self._key(tmp_name)}, self.bucket, self._key(final_name),
                             Config=self._transfer_config())
        self.delete(tmp_name)

    def fetch(self, name: str, local_path: str, callback: Callable[[int], None] | None = None,
              cap: int | None = None) -> None:
        """The object into ``local_path``: ranged GETs of ``part_size`` in ``max_concurrency`` threads, under
        the downloader's policy (``storage.parts``); refused naming it past ``cap`` bytes."""
        fetch_file(self, name, local_path, cap=cap, progress=callback, part_bytes=self.part_size,
                   workers=self.max_concurrency)

    def local_path(self, name: str) -> str | None:
        return None

    # -- conditional writes (the output claim) --------------------------------------------------------------
    def _conditional(self, call, name: str, action: str):
        """Run ``call()``; None when its precondition failed; NotImplementedError when the store has no
        conditional requests."""
        from botocore.exceptions import ClientError

        with self._errors(action, name):
            try:
                return call()
            except ClientError as exc:
                code = str(exc.response.get("Error", {}).get("Code", ""))
                status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
                if code in _PRECONDITION or status in (409, 412):
                    return None
                if code == "NotImplemented" or status == 501:
                    raise NotImplementedError(f"{self._where(name)}: conditional requests not supported") from None
                raise

    def put_conditional(self, name: str, data: bytes, *, if_match: str | None = None) -> str | None:
        """One PUT that succeeds only if no object ``name`` exists (or, with ``if_match``, if it still has that
        ETag); returns the new ETag, None when the condition failed."""
        cond = {"IfMatch": if_match} if if_match else {"IfNoneMatch": "*"}
        resp = self._conditional(lambda: self.client.put_object(Bucket=self.bucket, Key=self._key(name), Body=data,
                                                                **cond), name, "write")
        return None if resp is None else resp.get("ETag", "")

    def read_with_etag(self, name: str) -> tuple[bytes, str]:
        data, etag = read_remote(self, name)
        return data, etag or ""

    def delete_if_match(self, name: str, etag: str | None) -> None:
        """Delete ``name`` if it still has the ETag ``etag`` (any version when None or unsupported)."""
        if etag:
            try:
                self._conditional(lambda: self.client.delete_object(Bucket=self.bucket, Key=self._key(name),
                                                                    IfMatch=etag), name, "delete")
                return
            except (NotImplementedError, FileNotFoundError):
                pass
        try:
            self.delete(name)
        except FileNotFoundError:
            pass

    # -- transfers ------------------------------------------------------------------------------------
    def upload_file(self, local_path: str, name: str, callback: Callable[[int], None] | None = None,
                    sha256: str | None = None) -> None:
        """Upload a local file (multipart above ``part_size``, SHA-256 checked by S3 per request), then check
        the stored object's size."""
        size = os.path.getsize(local_path)
        extra = {"ChecksumAlgorithm": "SHA256"}
        if sha256:
            extra["Metadata"] = {"sha256": sha256}
        with self._errors("upload", name):
            self.client.upload_file(local_path, self.bucket, self._key(name), ExtraArgs=extra, Callback=callback,
                                    Config=self._transfer_config())
        stored = self.size(name)
        if stored != size:
            from ..util.errors import IntegrityError

            raise IntegrityError(f"{self._where(name)}: uploaded {size} bytes but S3 holds {stored}")
        log.debug("uploaded %s (%s) to %s", local_path, format_size(size), self._where(name))
