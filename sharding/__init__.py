"""tfpipe sharding: who reads what (topology, planner), cluster configs, resharding and S3 transfer.

Never imports TensorFlow; boto3 only inside the functions that move bytes.
"""
from __future__ import annotations

from .configs import pipe_channels, sagemaker_distribution, tf_config
from .plan import PlanError, RankPlan, ShardPlan, plan
from .topology import ChannelConfig, Topology

__all__ = [
    "Topology",
    "ChannelConfig",
    "plan",
    "ShardPlan",
    "RankPlan",
    "PlanError",
    "tf_config",
    "sagemaker_distribution",
    "pipe_channels",
    "reshard",
    "upload",
    "download",
]


def __getattr__(name):  # I/O modules (numpy, numba kernels) load on first use
    if name in ("reshard", "upload", "download"):
        import importlib

        module = importlib.import_module(".reshard" if name == "reshard" else ".transfer", __name__)
        value = getattr(module, name)
        globals()[name] = value  # the function, not the submodule of the same name
        return value
    raise AttributeError(f"module 'sharding' has no attribute {name!r}")
