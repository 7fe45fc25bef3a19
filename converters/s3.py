"""S3 storage (boto3, imported lazily). Implemented by the sharding/S3 work."""
from __future__ import annotations

from .errors import TfpipeError

__all__ = ["S3Storage"]


class S3Storage:
    def __init__(self, url: str, **options):
        raise TfpipeError(f"{url}: s3:// locations are not supported yet")
