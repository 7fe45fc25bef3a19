"""What a SageMaker Processing instance learns from its config directory (default ``/opt/ml/config``):

* ``resourceconfig.json``: ``{"current_host": "algo-2", "hosts": ["algo-1", "algo-2", ...]}`` -> ``Place``;
* ``processingjobconfig.json`` (optional): the job's name and, per ProcessingInput,
  ``S3Input.LocalPath`` and ``S3Input.S3DataDistributionType`` (absent: ``FullyReplicated``).

Host names are only labels here: nothing resolves them (they may not resolve at start-up).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Mapping

from converters.util.errors import TfpipeError
from converters.util.safe_json import MAX_JSON_DEPTH, json_depth

from .hosts import DISTRIBUTIONS, FULLY_REPLICATED, Place

__all__ = ["ProcessingConfig", "read_processing_config", "json_object", "PROCESSING_CONFIG_DIR",
           "DEFAULT_WAIT_TIMEOUT", "DEFAULT_POLL"]

PROCESSING_CONFIG_DIR = "/opt/ml/config"
DEFAULT_WAIT_TIMEOUT = 6 * 3600.0  # seconds an instance waits for the others in any one wait
DEFAULT_POLL = 5.0  # seconds between two listings of the work area


@dataclass(frozen=True)
class ProcessingConfig:
    """This instance's place in the job, each input's distribution (``LocalPath`` -> distribution) and the
    job's name (``""`` when unknown: then markers of an earlier run of the same command count as this run's)."""

    place: Place
    channels: Mapping[str, str] = field(default_factory=dict)
    job: str = ""

    def __post_init__(self):
        if not isinstance(self.place, Place):
            raise ValueError(f"place must be a Place, got {self.place!r}")
        for local, kind in dict(self.channels).items():
            if not isinstance(local, str) or not local.startswith("/"):
                raise ValueError(f"LocalPath must be an absolute path, got {local!r}")
            if kind not in DISTRIBUTIONS:
                raise ValueError(f"{local}: S3DataDistributionType must be one of {', '.join(DISTRIBUTIONS)}, "
                                 f"got {kind!r}")
        object.__setattr__(self, "channels", dict(sorted(dict(self.channels).items())))

    __hash__ = None  # channels is a dict


_MAX_CONFIG = 64 << 20  # a job's config files are a few KB; more is not SageMaker's


def _read(path: str, required: bool):
    try:
        with open(path, "rb") as f:
            raw = f.read(_MAX_CONFIG + 1)
        if len(raw) > _MAX_CONFIG:
            raise TfpipeError(f"{path} is larger than {_MAX_CONFIG >> 20} MiB: not a SageMaker Processing config")
    except FileNotFoundError:
        if required:
            raise TfpipeError(f"{path} not found: not inside a SageMaker Processing job "
                              "(pass --config-dir with a resourceconfig.json to simulate one)") from None
        return None
    except OSError as exc:
        raise TfpipeError(f"cannot read {path}: {exc}") from None
    return json_object(raw, path)


def json_object(raw: bytes, where: str, hint: str = "") -> dict:
    """``raw`` parsed as a JSON object, else one ``TfpipeError`` naming ``where`` (and ``hint``, what to do)."""
    if json_depth(raw if isinstance(raw, bytes) else raw.encode(), MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
        raise TfpipeError(f"{where} nests deeper than {MAX_JSON_DEPTH} levels: not a file SageMaker or tfpipe "
                          f"wrote{hint}")  # checked before the recursive parser sees it
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise TfpipeError(f"{where} is not valid JSON ({exc}){hint}") from None
    if not isinstance(data, dict):
        raise TfpipeError(f"{where} must hold a JSON object, got {type(data).__name__}{hint}")
    return data


def read_processing_config(config_dir: str = PROCESSING_CONFIG_DIR) -> ProcessingConfig:
    """Read ``resourceconfig.json`` (required) and ``processingjobconfig.json`` (optional) from ``config_dir``;
    a malformed file is a ``TfpipeError`` naming it and the bad value."""
    res_path = os.path.join(config_dir, "resourceconfig.json")
    res = _read(res_path, True)
    try:
        place = Place(tuple(res.get("hosts") or ()), res.get("current_host"))
    except (ValueError, TypeError) as exc:
        raise TfpipeError(f"{res_path}: {exc}") from None
    job_path = os.path.join(config_dir, "processingjobconfig.json")
    job = _read(job_path, False) or {}
    channels: dict[str, str] = {}
    inputs = job.get("ProcessingInputs") or []
    if not isinstance(inputs, list):
        raise TfpipeError(f"{job_path}: ProcessingInputs must be a list, got {type(inputs).__name__}")
    for i, item in enumerate(inputs):
        s3 = item.get("S3Input") if isinstance(item, dict) else None
        if not isinstance(s3, dict) or not s3.get("LocalPath"):
            continue  # dataset definitions and app-managed inputs carry no files we read
        channels[s3["LocalPath"]] = s3.get("S3DataDistributionType") or FULLY_REPLICATED
    name = job.get("ProcessingJobArn") or job.get("ProcessingJobName") or ""
    try:
        return ProcessingConfig(place, channels, str(name))
    except ValueError as exc:
        raise TfpipeError(f"{job_path}: {exc}") from None
