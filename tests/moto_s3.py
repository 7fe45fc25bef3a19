"""Shared by the S3 and Processing tests (the ``moto_endpoint`` and ``s3`` fixtures live in conftest.py):
fake AWS settings and a listing helper."""
from __future__ import annotations

FAKE_AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing",
            "AWS_DEFAULT_REGION": "us-east-1"}


def keys(s3, prefix=""):
    """Every key in the test bucket under ``prefix``, sorted."""
    out = []
    for page in s3.client.get_paginator("list_objects_v2").paginate(Bucket=s3.bucket, Prefix=prefix):
        out += [o["Key"] for o in page.get("Contents", [])]
    return sorted(out)
