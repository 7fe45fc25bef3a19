"""The SageMaker Processing engine: a conversion on N instances that coordinate only through files under the
output location. ``config`` (resourceconfig.json, processingjobconfig.json), ``hosts`` (pure host plan),
``workarea`` (the run's temporary area), ``job`` (the conversion an instance runs), ``sharded`` /
``replicated`` (ShardedByS3Key and FullyReplicated inputs), ``finalize``, ``instance`` (the per-instance entry
point), ``request`` (the CreateProcessingJob request, pure) and ``launch`` (boto3)."""
from __future__ import annotations
