"""``ServiceOptions``: reading through a tf.data service (offload) — one frozen option group embedded in
:class:`~pipeline.PipelineSpec` as ``spec.offload``.

``service``: the dispatcher, ``"grpc://HOST:PORT"`` (None: read in this process); ``service_job``: the name the
ranks of one run share (None: derived from the SageMaker job name, ``TF_CONFIG`` or the manifest fingerprint and
seed, ``pipeline.plan.servicejob.base_job_name``); ``service_compression``: ``"auto"`` (off on a fast link, on
otherwise), ``"on"`` or ``"off"``; ``service_timeout``: seconds ``build_dataset`` waits for the dispatcher to
answer before it fails naming the address; ``service_worker_timeout``: seconds a worker may not answer before
this trainer drops its connections to it, as it would to a dead one (a frozen worker; docs/offload.md).
No I/O here; the choices and their reasons are made in ``pipeline.plan.servicejob``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from converters.util.checks import as_real

__all__ = ["ServiceOptions", "SERVICE_COMPRESSION", "parse_service", "check_service", "MAX_HOST",
           "DEFAULT_SERVICE_TIMEOUT", "DEFAULT_SERVICE_WORKER_TIMEOUT", "MAX_SERVICE_TIMEOUT"]

SERVICE_COMPRESSION = ("auto", "on", "off")
MAX_HOST = 253                          # characters of a host name (DNS's limit)
DEFAULT_SERVICE_TIMEOUT = 300.0         # seconds to wait for the dispatcher (it may start after the trainers)
DEFAULT_SERVICE_WORKER_TIMEOUT = 30.0   # the dispatcher's default worker timeout (pipeline.service.workerwatch)
MAX_SERVICE_TIMEOUT = 86400.0
_JOB = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_HOST = re.compile(r"[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]")


def parse_service(value: str) -> tuple[str, int]:
    """``"grpc://HOST:PORT"`` -> (host, port), or ValueError naming the bad value."""
    shown = value if not isinstance(value, str) or len(value) <= 300 else f"{value[:80]}...({len(value)} characters)"
    bad = ValueError(f"service must be 'grpc://HOST:PORT' (the dispatcher, e.g. grpc://10.0.0.5:5050; a host name "
                     f"of at most {MAX_HOST} characters, an ASCII port 1-65535), got {shown!r}")
    if not isinstance(value, str) or not value.startswith("grpc://"):
        raise bad
    host, sep, port = value[len("grpc://"):].rpartition(":")
    if (not sep or len(host) > MAX_HOST or not _HOST.fullmatch(host) or not port.isascii() or not port.isdigit()
            or len(port) > 5 or not 1 <= int(port) <= 65535):
        raise bad
    return host.strip("[]"), int(port)


@dataclass(frozen=True)
class ServiceOptions:
    """Where the rank's read + parse run: here (``service=None``) or on a tf.data service's workers."""

    service: str | None = None
    service_job: str | None = None
    service_compression: str = "auto"
    service_timeout: float = DEFAULT_SERVICE_TIMEOUT
    service_worker_timeout: float = DEFAULT_SERVICE_WORKER_TIMEOUT

    def __post_init__(self):
        if self.service is not None:
            parse_service(self.service)
        if self.service_job is not None and (not isinstance(self.service_job, str)
                                             or not _JOB.fullmatch(self.service_job)):
            raise ValueError(f"service_job must be 1-128 letters, digits, '.', '_' or '-' (starting with a letter "
                             f"or digit), got {self.service_job!r}")
        if self.service_compression not in SERVICE_COMPRESSION:
            raise ValueError(f"service_compression must be one of {SERVICE_COMPRESSION}, got "
                             f"{self.service_compression!r}")
        for name in ("service_timeout", "service_worker_timeout"):
            as_real(getattr(self, name), name, above=0, maximum=MAX_SERVICE_TIMEOUT,
                    must=f"a number of seconds in (0, {MAX_SERVICE_TIMEOUT:g}]")


def check_service(spec: Any) -> None:
    """The checks across groups: what the service cannot run, each refused with the reason (ValueError)."""
    if spec.offload.service is None:
        return
    why = None
    if spec.source.mode == "pipe":
        why = "Pipe mode streams a FIFO on this host, which the service's workers cannot open"
    elif spec.resuming.resumable is True:
        why = ("resumable=True enters one global order at a saved position; the service hands files to whichever "
               "worker asks next, so no position names the records already consumed. Restart a service run at an "
               "epoch boundary (epochs=the ones left), or read locally with resumable=True")
    elif spec.source.part_weights:
        why = "a balanced group (label_weights) interleaves its parts by weight in this process"
    elif spec.source.stream is not None:
        why = ("a remote set is streamed through this host's cache by Python code, which the workers cannot run; "
               "make the shards readable at the same path on the workers (a shared file system, or a copy)")
    elif spec.caching.cache not in ("auto", "none"):
        why = f"cache={spec.caching.cache!r} would be kept on the workers, not here: use cache='auto' or 'none'"
    if why:
        raise ValueError(f"service={spec.offload.service!r}: {why}")
