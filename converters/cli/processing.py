"""``tfpipe processing run`` (a Processing container's command) and ``tfpipe processing launch`` (create the job
with boto3)."""
from __future__ import annotations

import argparse
import json
import logging
import os
import stat
import sys

from .types import positive_int, size

__all__ = ["register", "write_message"]

log = logging.getLogger(__name__)

MESSAGE_FILE = "/opt/ml/output/message"  # its first 1 KB becomes the job's ExitMessage
MESSAGE_MARK = "tfpipe: error: "  # every message starts so: how a later run knows the file is its own
MESSAGE_MAX = 1024


def _seconds(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {s!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {s!r}")
    return v


def register(sub) -> None:
    from converters.engines.processing.config import DEFAULT_POLL, DEFAULT_WAIT_TIMEOUT, PROCESSING_CONFIG_DIR

    from .convert_argv import conversion_usage

    convert = f"{conversion_usage()} ..."
    proc = sub.add_parser("processing", help="SageMaker Processing: run one instance's share, or launch a job")
    psub = proc.add_subparsers(dest="processing_command", metavar="ACTION")
    psub.required = True

    p = psub.add_parser(
        "run", help="the container's command: convert this instance's share; the first host finalizes",
        description="Run inside a SageMaker Processing container: read this instance's place (resourceconfig.json) "
                    "and the inputs' distribution (processingjobconfig.json) from --config-dir, convert this "
                    f"instance's share of '{convert}' (the tfpipe convert command line, same "
                    "options), coordinating with the other instances only through files under --out. The first "
                    "host waits for every part and writes index.json last; the others exit 0 once their part "
                    "is written. FullyReplicated inputs give a set byte-identical to a local conversion; "
                    "ShardedByS3Key inputs give the records of every instance's objects, host by host.")
    p.add_argument("--config-dir", default=PROCESSING_CONFIG_DIR,
                   help=f"directory of resourceconfig.json and processingjobconfig.json (default {PROCESSING_CONFIG_DIR})")
    p.add_argument("--wait-timeout", type=_seconds, default=DEFAULT_WAIT_TIMEOUT, metavar="SECONDS",
                   help="how long to wait for the other instances in any one wait before failing with the names "
                        f"of the missing hosts (default {DEFAULT_WAIT_TIMEOUT:g})")
    p.add_argument("--poll", type=_seconds, default=DEFAULT_POLL, metavar="SECONDS",
                   help=f"seconds between two looks at the work area (default {DEFAULT_POLL:g})")
    p.add_argument("--message-file", default=None, metavar="PATH",
                   help=f"where a failure's one-line reason goes (default {MESSAGE_FILE}, written when its "
                        "directory exists or --config-dir is the default; '' for none)")
    p.add_argument("--run-id", default=None, metavar="NAME",
                   help="name of the work area OUT/.tfpipe-tmp-NAME (default: a digest of the command, hosts "
                        "and distribution, the same for a rerun of the job)")
    p.add_argument("--unit-size", type=size, default=None, metavar="SIZE",
                   help="FullyReplicated LibSVM: input bytes per work unit (default 16MiB); units are what the "
                        "instances share out")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar=convert,
                   help="the conversion, exactly as for tfpipe convert")
    p.set_defaults(func=_cmd_run)

    p = psub.add_parser(
        "launch", help="create a Processing job that runs a conversion on N instances (boto3)",
        description="Build a CreateProcessingJob request: one S3 input per --input (at /opt/ml/processing/input/NAME, "
                    "ShardedByS3Key with ',sharded'), a 'code' input with a wheel of this tfpipe and a bootstrap "
                    "script (uploaded to --code-bucket), and a container that installs the wheel and runs "
                    "'tfpipe processing run' with the conversion given after '--'. The request is checked against "
                    "the API's documented limits before anything is uploaded or sent.",
        epilog="example: tfpipe processing launch --job-name criteo-1 --role arn:aws:iam::123456789012:role/SMProc "
               "--image-uri IMAGE --instance-type ml.c5.4xlarge --instance-count 4 --input train=s3://b/raw/,sharded "
               "-- convert libsvm /opt/ml/processing/input/train --field-size 39 --out s3://b/shards/")
    p.add_argument("--job-name", required=True, help="processing job name (1-63 letters, digits, hyphens)")
    p.add_argument("--role", required=True, metavar="ARN", help="IAM role ARN the job runs as")
    p.add_argument("--image-uri", required=True, metavar="URI", help="any image with Python >= 3.10 and pip")
    p.add_argument("--instance-type", required=True, metavar="TYPE", help="e.g. ml.c5.4xlarge")
    p.add_argument("--instance-count", type=positive_int, required=True, metavar="N", help="instances (1-100)")
    p.add_argument("--input", action="append", required=True, dest="inputs", metavar="NAME=S3URI[,sharded]",
                   help="an S3 prefix delivered to /opt/ml/processing/input/NAME (repeat; ',sharded': "
                        "ShardedByS3Key, else FullyReplicated)")
    p.add_argument("--code-bucket", default=None, metavar="S3URI",
                   help="where the wheel and bootstrap go, under tfpipe-code/JOB/ (default: the bucket of --out)")
    p.add_argument("--wheel", default=None, metavar="PATH", help="ship this tfpipe wheel instead of building one")
    p.add_argument("--volume-gb", type=positive_int, default=30, metavar="G", help="storage volume per instance "
                   "(GB, default 30): holds the instance's inputs and shards in flight")
    p.add_argument("--max-runtime", type=positive_int, default=86400, metavar="S",
                   help="MaxRuntimeInSeconds (default 86400)")
    p.add_argument("--env", action="append", default=[], metavar="K=V", help="container environment (repeat)")
    p.add_argument("--wait-timeout", type=_seconds, default=None, metavar="SECONDS",
                   help="passed to 'processing run' (how long instances wait for each other)")
    p.add_argument("--unit-size", type=size, default=None, metavar="SIZE",
                   help="passed to 'processing run' (FullyReplicated LibSVM bytes per work unit)")
    p.add_argument("--dry-run", action="store_true", help="print the request as JSON and send nothing")
    p.add_argument("--wait", action="store_true",
                   help="poll DescribeProcessingJob until the job ends; non-zero exit if it Failed or was Stopped")
    p.add_argument("--poll", type=_seconds, default=30.0, metavar="SECONDS", help="seconds between polls (--wait; default 30)")
    p.add_argument("--endpoint-url", default=None, metavar="URL",
                   help="AWS-compatible endpoint for S3 and SageMaker (default: $AWS_ENDPOINT_URL_S3 for S3, "
                        "$AWS_ENDPOINT_URL_SAGEMAKER for SageMaker, else $AWS_ENDPOINT_URL, else AWS)")
    p.add_argument("--region", default=None, help="AWS region (default: the session's)")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar=f"-- {convert}",
                   help="the conversion, as for tfpipe convert, with inputs under /opt/ml/processing/input/NAME")
    p.set_defaults(func=_cmd_launch)


def write_message(path: str | None, message: str, *, create_dir: bool) -> None:
    """Write a failure's one line where SageMaker shows it (ExitMessage: the first 1 KB); never raises.

    Only to a new file or over an earlier tfpipe message (a regular file of at most 1 KB that starts with
    ``MESSAGE_MARK``): never over an input, a shard or any other file, which is left unchanged with a warning."""
    if not path:
        return
    directory = os.path.dirname(path) or "."
    data = (MESSAGE_MARK + " ".join(message.split()) + "\n").encode("utf-8", "replace")[:MESSAGE_MAX]
    try:
        if create_dir:
            os.makedirs(directory, exist_ok=True)
        elif not os.path.isdir(directory):
            return
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            st = None
        if st is not None and not _is_message(path, st):
            log.warning("not writing the failure message to %s: it exists and is not a tfpipe message (left "
                        "unchanged; give --message-file a new path)", path)
            return
        flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | (os.O_EXCL if st is None else os.O_TRUNC)
        fd = os.open(path, flags, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except OSError as exc:
        log.warning("could not write the failure message to %s: %s", path, exc.strerror or exc)


def _is_message(path: str, st: os.stat_result) -> bool:
    """Whether ``path`` (``st``: its lstat) is a message an earlier tfpipe run wrote."""
    if not stat.S_ISREG(st.st_mode) or st.st_size > MESSAGE_MAX:
        return False
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            head = f.read(len(MESSAGE_MARK))
    except OSError:
        return False
    return head == MESSAGE_MARK.encode()


def _cmd_run(args) -> int:
    from converters.engines.processing.config import PROCESSING_CONFIG_DIR
    from converters.engines.processing.instance import one_line, run_instance

    from .convert_argv import parse_convert

    in_job = args.config_dir == PROCESSING_CONFIG_DIR
    message_file = MESSAGE_FILE if args.message_file is None else args.message_file
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    try:
        res = run_instance(parse_convert(command), config_dir=args.config_dir, timeout=args.wait_timeout, poll=args.poll,
                           run=args.run_id, unit_size=args.unit_size)
    except BaseException as exc:
        if not isinstance(exc, (KeyboardInterrupt, SystemExit)):
            write_message(message_file, one_line(exc), create_dir=in_job)
        raise
    m = res.manifest
    part = ("part reused from an earlier run" if res.reused else "part written") + f" ({res.work})"
    if m is not None:
        print(f"{res.host}: {part}; finalized {m.records:,} records in {len(m.shards)} shard(s) "
              f"({res.distribution}, {len(m.inputs)} input(s)) -> {m.location.rstrip('/')}/index.json")
    else:
        print(f"{res.host}: {part} ({res.distribution}); the first host finalizes")
    sys.stdout.flush()
    return 0


def _print_json(obj) -> None:
    print(json.dumps(obj, indent=2, sort_keys=False, default=str))


def _cmd_launch(args) -> int:
    import tempfile

    from converters.storage.s3 import parse_s3_url

    from converters.engines.processing.request import (
        InputSpec,
        LaunchSpec,
        build_request,
        check_command,
        check_locations,
        check_request,
    )

    from .convert_argv import parse_convert

    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    inputs = tuple(InputSpec.parse(i) for i in args.inputs)
    env = {}
    for item in args.env:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise ValueError(f"--env expects K=V, got {item!r}")
        env[k] = v
    job = check_command(inputs, parse_convert(command))
    out = job.out
    base = (args.code_bucket or f"s3://{parse_s3_url(out)[0]}").rstrip("/")
    parse_s3_url(base)
    run_args = (("--wait-timeout", f"{args.wait_timeout:g}") if args.wait_timeout else ()) + \
        (("--unit-size", str(args.unit_size)) if args.unit_size else ())
    spec = LaunchSpec(args.job_name, args.role, args.image_uri, args.instance_type, args.instance_count, inputs,
                      tuple(command), f"{base}/tfpipe-code/{args.job_name}/", args.volume_gb, args.max_runtime,
                      env, run_args)
    check_locations(spec, out)
    request = build_request(spec, job.format)
    check_request(request)
    if args.dry_run:
        _print_json(request)
        return 0
    from converters.engines.processing.launch import build_wheel, create_job, sagemaker_client, upload_code, wait_job

    client = sagemaker_client(endpoint_url=args.endpoint_url, region=args.region)
    with tempfile.TemporaryDirectory(prefix="tfpipe-launch-") as tmp:
        wheel = args.wheel or build_wheel(tmp)
        urls = upload_code(spec.code_prefix, wheel, endpoint_url=args.endpoint_url)
    print(f"code        {', '.join(urls)}")
    arn = create_job(client, request)
    print(f"created     {arn}")
    sys.stdout.flush()
    if not args.wait:
        return 0
    last = {"status": None, "at": -1e9}

    def progress(desc, elapsed):
        status = desc.get("ProcessingJobStatus")
        if status != last["status"] or elapsed - last["at"] >= 60:
            print(f"{args.job_name}: {status} after {int(elapsed) // 60}m {int(elapsed) % 60:02d}s", flush=True)
            last.update(status=status, at=elapsed)

    wait_job(client, args.job_name, poll=args.poll, on_status=progress)
    print(f"{args.job_name}: Completed; shard set at {out.rstrip('/')}/index.json")
    return 0
