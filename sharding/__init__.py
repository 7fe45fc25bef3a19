"""tfpipe sharding: who reads what (topology, planner), cluster configs, resharding and S3 transfer.

Never imports TensorFlow; boto3 only inside the functions that move bytes.
"""
from __future__ import annotations

from converters.util.lazy import lazy_exports

from .configs import pipe_channels, sagemaker_distribution, tf_config
from .groups import InstanceGroup, InstanceGroups, service_address
from .plan import PlanError, RankPlan, ShardPlan, plan
from .topology import ChannelConfig, Topology

__all__ = [
    "Topology",
    "ChannelConfig",
    "InstanceGroup",
    "InstanceGroups",
    "service_address",
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


# the I/O modules (numpy, numba kernels) load on first use
__getattr__, __dir__ = lazy_exports(__name__, {"reshard": ".resharding", "upload": ".transfer", "download": ".transfer"},
                                    globals())
