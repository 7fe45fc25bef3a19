"""The ``CreateProcessingJob`` request of ``tfpipe processing launch``, built and checked without I/O.

* ``LaunchSpec``: what the user asked for (job name, role, image, instances, inputs, the conversion command,
  where the code goes); ``build_request(spec)`` turns it into the API request: one ``S3Input`` per ``--input``
  under ``/opt/ml/processing/input/NAME``, a ``code`` input carrying the tfpipe wheel and its bootstrap script,
  and a container that runs the bootstrap with ``processing run ... convert ...`` as its arguments.
* ``check_command(spec)``: the conversion itself, parsed as ``tfpipe convert`` parses it, and placed: output in
  S3, every input (and a tokenizer file) under one of the job's inputs, one distribution for all inputs.
* ``validate_request(request, shape)``: every value against the API's documented limits, read from botocore's
  service model (required members, lengths and counts, patterns, enums, integer ranges), plus what the model
  cannot say (``LocalPath`` under ``/opt/ml/processing/``, distinct input names and paths). The local SageMaker
  API used in tests accepts anything; the real one does not, so nothing is sent before this passes.
"""
from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from converters import registry
from converters.storage import is_s3
from converters.util.errors import TfpipeError

from .job import ConvertJob
from .hosts import FULLY_REPLICATED, SHARDED, channel_of, distribution_of

__all__ = ["InputSpec", "LaunchSpec", "build_request", "check_command", "check_locations", "validate_request", "request_shape",
           "check_request", "PROCESSING_ROOT", "INPUT_ROOT", "CODE_INPUT", "CODE_DIR", "BOOTSTRAP_NAME"]

PROCESSING_ROOT = "/opt/ml/processing/"
INPUT_ROOT = "/opt/ml/processing/input"
CODE_INPUT = "code"
CODE_DIR = f"{INPUT_ROOT}/{CODE_INPUT}"
BOOTSTRAP_NAME = "tfpipe-bootstrap.sh"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_HINTS = {
    "RoleArn": "an IAM role ARN such as arn:aws:iam::123456789012:role/SageMakerProcessingRole",
    "ProcessingJobName": "1-63 letters, digits and hyphens, starting and ending with a letter or digit",
    "AppSpecification.ContainerArguments": "a shorter command: pass a directory instead of many files",
}


@dataclass(frozen=True)
class InputSpec:
    """``--input NAME=S3URI[,sharded]``: an S3 prefix delivered to ``/opt/ml/processing/input/NAME``."""

    name: str
    s3_uri: str
    sharded: bool = False

    def __post_init__(self):
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ValueError(f"input name must be 1-64 letters, digits, '.', '_' or '-' (starting with a letter "
                             f"or digit), got {self.name!r}")
        if self.name == CODE_INPUT:
            raise ValueError(f"input name {CODE_INPUT!r} is reserved for the tfpipe code input")
        if not is_s3(self.s3_uri) or len(self.s3_uri) <= 5:
            raise ValueError(f"input {self.name}: expected an s3://bucket/prefix URI, got {self.s3_uri!r}")

    @property
    def local_path(self) -> str:
        return f"{INPUT_ROOT}/{self.name}"

    @property
    def distribution(self) -> str:
        return SHARDED if self.sharded else FULLY_REPLICATED

    @classmethod
    def parse(cls, text: str) -> "InputSpec":
        name, sep, rest = str(text).partition("=")
        if not sep:
            raise ValueError(f"expected NAME=S3URI[,sharded], got {text!r}")
        uri, _, flag = rest.partition(",")
        if flag not in ("", "sharded"):
            raise ValueError(f"expected NAME=S3URI[,sharded], got {text!r} (unknown flag {flag!r})")
        return cls(name, uri, flag == "sharded")


@dataclass(frozen=True)
class LaunchSpec:
    """Everything ``tfpipe processing launch`` puts into the request (checked by the API's limits later)."""

    job_name: str
    role_arn: str
    image_uri: str
    instance_type: str
    instance_count: int
    inputs: tuple[InputSpec, ...]
    command: tuple[str, ...]
    code_uri: str
    volume_gb: int = 30
    max_runtime: int = 86400
    env: Mapping[str, str] = field(default_factory=dict)
    run_args: tuple[str, ...] = ()  # options of ``processing run`` (e.g. --wait-timeout 3600)

    def __post_init__(self):
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "command", tuple(str(a) for a in self.command))
        object.__setattr__(self, "run_args", tuple(str(a) for a in self.run_args))
        object.__setattr__(self, "env", dict(self.env))
        names = [i.name for i in self.inputs]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"input names must be unique, {', '.join(dup)} repeated")
        if not is_s3(self.code_uri):
            raise ValueError(f"the code location must be an s3:// URI, got {self.code_uri!r}")
        if not self.command:
            raise ValueError("no conversion command given (after --: convert FORMAT ...)")

    __hash__ = None  # env is a dict

    @property
    def code_prefix(self) -> str:
        return self.code_uri.rstrip("/") + "/"


def check_command(inputs: Sequence[InputSpec], job: ConvertJob) -> ConvertJob:
    """Check that the conversion (parsed as ``tfpipe convert`` parses it) fits a job with these ``inputs``: ``--out``
    in S3 (instances share nothing else), every input under one of the job's inputs, one distribution for all
    of them, a tokenizer file under a FullyReplicated input (every instance needs it)."""
    if not is_s3(job.out):
        raise ValueError(f"--out {job.out}: a Processing job writes its shard set straight to S3; give an "
                         "s3://bucket/prefix")
    channels = {i.local_path: i.distribution for i in inputs}
    for path in job.inputs:
        if channel_of(path, channels) is None:
            where = ", ".join(sorted(channels)) or "none given"
            raise ValueError(f"input {path} is not under any --input's local path ({where}): inputs reach the "
                             "container only through --input NAME=S3URI, at /opt/ml/processing/input/NAME")
    distribution_of(job.inputs, channels)
    for flag, path in job.fmt.shared_files(job.options):
        local = channel_of(path, channels)
        if local is None or channels[local] != FULLY_REPLICATED:
            raise ValueError(f"{flag} {path} must be under a FullyReplicated --input (every instance needs "
                             "the same file)")
    return job


def check_locations(spec: LaunchSpec, out: str) -> None:
    """Refuse (``OverlapError``, pure) S3 prefixes that overlap: ``--out`` inside an ``--input`` or an input
    inside ``--out``, the code prefix inside an input or the output (or either inside it). Prefixes compare
    by path components (``s3://b/in`` holds ``s3://b/in/x``, not ``s3://b/in2``)."""
    from converters.shardset.overlap import resolve, within
    from converters.util.errors import OverlapError

    code = resolve(spec.code_prefix)
    target = resolve(out)
    for i in spec.inputs:
        src = resolve(i.s3_uri)
        if within(target, src) or within(src, target):
            raise OverlapError(f"--out {out} and --input {i.name}={i.s3_uri} overlap (one is inside the other): "
                               "the job would overwrite what it reads; choose separate prefixes")
        if within(code, src) or within(src, code):
            raise OverlapError(f"the code prefix {spec.code_prefix} and --input {i.name}={i.s3_uri} overlap: the "
                               "code would be read as input; choose another --code-bucket")
    if within(code, target) or within(target, code):
        raise OverlapError(f"the code prefix {spec.code_prefix} and --out {out} overlap: choose another "
                           "--code-bucket or --out")


def build_request(spec: LaunchSpec, fmt: str) -> dict[str, Any]:
    """The ``CreateProcessingJob`` request (pure). ``fmt`` (a format's name) decides the pip extras installed."""
    inputs = [{
        "InputName": i.name,
        "AppManaged": False,
        "S3Input": {"S3Uri": i.s3_uri, "LocalPath": i.local_path, "S3DataType": "S3Prefix",
                    "S3InputMode": "File", "S3DataDistributionType": i.distribution,
                    "S3CompressionType": "None"},
    } for i in spec.inputs]
    inputs.append({
        "InputName": CODE_INPUT,
        "AppManaged": False,
        "S3Input": {"S3Uri": spec.code_prefix, "LocalPath": CODE_DIR, "S3DataType": "S3Prefix",
                    "S3InputMode": "File", "S3DataDistributionType": FULLY_REPLICATED,
                    "S3CompressionType": "None"},
    })
    env = {"TFPIPE_EXTRAS": ",".join(registry.get(fmt).extras), **spec.env}
    return {
        "ProcessingJobName": spec.job_name,
        "ProcessingInputs": inputs,
        "ProcessingResources": {"ClusterConfig": {"InstanceCount": spec.instance_count,
                                                  "InstanceType": spec.instance_type,
                                                  "VolumeSizeInGB": spec.volume_gb}},
        "StoppingCondition": {"MaxRuntimeInSeconds": spec.max_runtime},
        "AppSpecification": {"ImageUri": spec.image_uri,
                             "ContainerEntrypoint": ["/bin/sh", f"{CODE_DIR}/{BOOTSTRAP_NAME}"],
                             "ContainerArguments": [*spec.run_args, *spec.command]},
        "Environment": env,
        "RoleArn": spec.role_arn,
    }


# -- validation against the service model -----------------------------------------------------------------

def request_shape():
    """The botocore input shape of ``CreateProcessingJob`` (from the installed service model)."""
    try:
        import botocore.session
    except ImportError:  # pragma: no cover - boto3 is an extra
        raise TfpipeError("tfpipe processing launch needs boto3: pip install 'tfpipe[s3]'") from None
    model = botocore.session.get_session().get_service_model("sagemaker")
    return model.operation_model("CreateProcessingJob").input_shape


_PATTERNS: dict[str, re.Pattern | None] = {}


def _pattern(p: str) -> re.Pattern | None:
    if p not in _PATTERNS:
        try:
            _PATTERNS[p] = re.compile(p)
        except re.error:  # a Java-only construct such as \p{L}: not checked here
            _PATTERNS[p] = None
    return _PATTERNS[p]


def _hint(path: str) -> str:
    key = re.sub(r"\[\d+\]", "", path)
    return f" ({_HINTS[key]})" if key in _HINTS else ""


def validate_request(value: Any, shape, path: str = "") -> list[str]:
    """Every problem of ``value`` against the botocore ``shape`` (pure): missing or unknown members, types,
    lengths and counts (min/max), patterns (whole value), enums, integer ranges; each problem names its path."""
    out: list[str] = []
    t, meta = shape.type_name, shape.metadata
    where = path or shape.name
    if t == "structure":
        if not isinstance(value, dict):
            return [f"{where}: expected an object, got {type(value).__name__}"]
        for req in shape.required_members:
            if req not in value:
                out.append(f"{(path + '.') if path else ''}{req}: required")
        for k, v in value.items():
            if k not in shape.members:
                out.append(f"{(path + '.') if path else ''}{k}: not a member of {shape.name}")
            else:
                out += validate_request(v, shape.members[k], f"{path}.{k}" if path else k)
        return out
    if t in ("list", "map"):
        if not isinstance(value, list if t == "list" else dict):
            return [f"{where}: expected a {'list' if t == 'list' else 'map'}, got {type(value).__name__}"]
        n = len(value)
        if "min" in meta and n < meta["min"]:
            out.append(f"{where}: {n} entries, the API needs at least {meta['min']}")
        if "max" in meta and n > meta["max"]:
            out.append(f"{where}: {n} entries, the API allows at most {meta['max']}{_hint(where)}")
        if t == "list":
            for i, v in enumerate(value):
                out += validate_request(v, shape.member, f"{where}[{i}]")
        else:
            for k, v in value.items():
                out += validate_request(k, shape.key, f"{where} key {k!r}")
                out += validate_request(v, shape.value, f"{where}[{k!r}]")
        return out
    if t == "string":
        if not isinstance(value, str):
            return [f"{where}: expected a string, got {type(value).__name__}"]
        if "min" in meta and len(value) < meta["min"]:
            out.append(f"{where}: {value!r} is shorter than {meta['min']} characters{_hint(where)}")
        if "max" in meta and len(value) > meta["max"]:
            out.append(f"{where}: {len(value)} characters, the API allows at most {meta['max']}{_hint(where)}")
        if shape.enum and value not in shape.enum:
            shown = ", ".join(shape.enum[:8]) + (", ..." if len(shape.enum) > 8 else "")
            out.append(f"{where}: {value!r} is not one of {shown}")
        pat = _pattern(meta["pattern"]) if "pattern" in meta else None
        if pat is not None and not pat.fullmatch(value):
            out.append(f"{where}: {value!r} does not match {meta['pattern']}{_hint(where)}")
        return out
    if t in ("integer", "long"):
        if isinstance(value, bool) or not isinstance(value, int):
            return [f"{where}: expected an integer, got {value!r}"]
        if "min" in meta and value < meta["min"]:
            out.append(f"{where}: {value} is below the API's minimum {meta['min']}")
        if "max" in meta and value > meta["max"]:
            out.append(f"{where}: {value} is above the API's maximum {meta['max']}")
        return out
    if t == "boolean" and not isinstance(value, bool):
        return [f"{where}: expected true or false, got {value!r}"]
    return out


def _local_path_problems(request: dict) -> list[str]:
    out, seen_names, seen_paths = [], set(), []
    for i, item in enumerate(request.get("ProcessingInputs") or []):
        name = item.get("InputName")
        if name in seen_names:
            out.append(f"ProcessingInputs[{i}].InputName: {name!r} used twice")
        seen_names.add(name)
        local = (item.get("S3Input") or {}).get("LocalPath")
        if local is None:
            continue
        norm = posixpath.normpath(local)
        if not norm.startswith(PROCESSING_ROOT) or ".." in local.split("/"):
            out.append(f"ProcessingInputs[{i}].S3Input.LocalPath: {local!r} is not under {PROCESSING_ROOT}")
        for other in seen_paths:
            if norm == other or norm.startswith(other + "/") or other.startswith(norm + "/"):
                out.append(f"ProcessingInputs[{i}].S3Input.LocalPath: {local!r} overlaps {other!r}")
        seen_paths.append(norm)
    return out


def check_request(request: dict, shape=None) -> None:
    """Raise one ``TfpipeError`` line naming the first problem (and how many more) unless ``request`` satisfies
    the API's documented limits; ``shape`` defaults to the installed botocore model's."""
    problems = validate_request(request, shape if shape is not None else request_shape())
    problems += _local_path_problems(request)
    if problems:
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise TfpipeError(f"invalid CreateProcessingJob request: {problems[0]}{more}; nothing was sent")
