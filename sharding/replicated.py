"""FullyReplicated: every instance sees every input; the instances split the two-pass conversion's work.
(Waiting for the engine-independent two-pass core in ``converters.engines``.)"""
from __future__ import annotations

from converters.util.errors import TfpipeError

__all__ = ["run_replicated"]


def run_replicated(job, cfg, area, files, *, timeout: float, poll: float):
    raise TfpipeError("FullyReplicated inputs are not supported yet: give the inputs S3DataDistributionType "
                      "ShardedByS3Key (--input NAME=S3URI,sharded)")
