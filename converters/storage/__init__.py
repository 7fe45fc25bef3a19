"""Storage: one small interface (``Storage``, in ``base``) over a local directory (``local``),
``s3://bucket/prefix`` (``s3``, boto3 loaded only when used) and any other ``scheme://`` Apache Beam's file
systems know, e.g. ``gs://`` (``beamfs``, apache_beam loaded only when used). ``open_storage(url)`` picks the
implementation."""
from __future__ import annotations

import os

from .base import TMP_PREFIX, Storage, is_s3
from .claim import CLAIM_NAME, Claim, claim_output
from .local import LocalStorage

__all__ = ["Storage", "LocalStorage", "open_storage", "is_s3", "TMP_PREFIX", "CLAIM_NAME", "Claim", "claim_output"]


def open_storage(url: str | os.PathLike, **s3_options) -> Storage:
    """Open a local directory, an ``s3://bucket/prefix`` location (``s3_options`` go to ``S3Storage``) or any
    other ``scheme://`` location through Apache Beam's ``FileSystems`` (``gs://bucket/prefix``, ...)."""
    url = str(url)
    if is_s3(url):
        from .s3 import S3Storage

        return S3Storage(url, **s3_options)
    from .beamfs import BeamFSStorage, has_scheme

    if has_scheme(url):
        if s3_options:
            raise ValueError(f"storage options {sorted(s3_options)} apply to s3:// locations, not {url}")
        return BeamFSStorage(url)
    return LocalStorage(url)
