"""``tfpipe`` subcommands of the sharding package: ``shard plan``, ``shard topology``, ``reshard``, ``upload``,
and ``download``."""
from __future__ import annotations

import json
import sys

from converters.cli.parser import add_endpoint_option as _endpoint
from converters.cli.parser import add_json_option, add_set_argument
from converters.shardset.layoutopts import add_layout_arguments
from converters.cli.types import (
    add_prep_options,
    positive_int,
    prep_options,
    print_prep,
    size,
)

__all__ = ["register"]


def register(sub) -> None:
    shard = sub.add_parser("shard", help="plan which rank reads which shards (and print cluster settings)")
    ssub = shard.add_subparsers(dest="shard_command", metavar="SUBCOMMAND")
    ssub.required = True

    p = ssub.add_parser("plan", help="print who reads what, with equal steps per rank (or why that is impossible)",
                        description="Plan per-rank files / shard(n, i) for a shard set and a cluster. Cases: "
                                    "--channel-per-worker without --s3-sharded: shard(hosts, rank // wph); with it: "
                                    "no shard; --s3-sharded alone: shard(wph, local_rank); neither: "
                                    "shard(world, rank) (Pipe or --record-sharding) or per-rank files (File mode).")
    add_set_argument(p)
    p.add_argument("--hosts", type=positive_int, default=None, metavar="N",
                   help="number of hosts (default: from the environment)")
    p.add_argument("--workers-per-host", type=positive_int, default=None, metavar="N",
                   help="data-parallel workers per host, e.g. GPUs (default: from the environment, else 1)")
    p.add_argument("--batch-size", type=positive_int, required=True, metavar="N", help="batch size per worker")
    p.add_argument("--pipe", action="store_true", help="SageMaker Pipe mode (default: File, or the channel's mode)")
    p.add_argument("--s3-sharded", action="store_true", help="S3DistributionType ShardedByS3Key")
    p.add_argument("--channel-per-worker", action="store_true", help="one input channel per worker (multi-path)")
    p.add_argument("--record-sharding", action="store_true",
                   help="File mode: every rank reads all files and keeps shard(world, rank) instead of its own files")
    p.add_argument("--remainder", choices=("drop", "pad"), default="drop",
                   help="equal steps by dropping each rank's surplus (default) or padding by repeating records")
    p.add_argument("--channel", default="train", help="channel name (default: train)")
    add_json_option(p, "the plan")
    _endpoint(p)
    p.set_defaults(func=_cmd_plan)

    p = ssub.add_parser("topology", help="print the topology read from the environment, and its TF_CONFIG")
    p.add_argument("--config-dir", default="/opt/ml/input/config", metavar="DIR",
                   help="SageMaker config directory (default /opt/ml/input/config)")
    p.set_defaults(func=_cmd_topology)

    p = sub.add_parser("reshard", help="rewrite a shard set into N record-balanced shards (or by size)")
    add_set_argument(p, help="the source shard set: a directory (or its index.json) or an s3:// prefix")
    p.add_argument("--out", required=True, help="output directory or s3://bucket/prefix (must be empty)")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--num-shards", type=positive_int, metavar="N",
                   help="number of output shards (files), record-balanced")
    g.add_argument("--shard-size", type=size, metavar="SIZE", help="target shard size, e.g. 256MiB")
    p.add_argument("--compression", choices=("same", "none", "gzip"), default="same",
                   help="output compression (default: same as the source)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing shard set at --out")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_layout_arguments(p, same=True)
    add_prep_options(p, labels=False)
    _endpoint(p)
    p.set_defaults(func=_cmd_reshard)

    for name, helptext in (("upload", "upload a local shard set to s3:// (shards, then the manifest)"),
                           ("download", "download a shard set from s3:// (each shard checked against the manifest)")):
        p = sub.add_parser(name, help=helptext)
        add_set_argument(p, "src", help="the local shard set (a directory)" if name == "upload" else
                         "the shard set in S3 (an s3:// prefix)")
        p.add_argument("dest", metavar="DEST",
                       help="s3://bucket/prefix" if name == "upload" else "local directory (must be empty)")
        p.add_argument("--overwrite", action="store_true",
                       help="replace an existing shard set (manifest included) at the destination")
        p.add_argument("--no-progress", action="store_true", help="no progress bar")
        _endpoint(p)
        p.set_defaults(func=_cmd_transfer, transfer=name)



def _progress(args) -> bool:
    return not args.no_progress and sys.stderr.isatty()


def _opts(url: str, args) -> dict:
    from converters.storage import is_s3

    return {"endpoint_url": args.endpoint_url} if is_s3(url) and args.endpoint_url else {}


def _cmd_plan(args) -> int:
    from converters.shardset.reader import read_manifest_raw

    from .plan import plan
    from .topology import Topology

    manifest, _ = read_manifest_raw(args.path, **_opts(args.path, args))
    topo = Topology.from_env(hosts=args.hosts, workers_per_host=args.workers_per_host)
    result = plan(manifest, topo, batch_size=args.batch_size, pipe=True if args.pipe else None,
                  s3_sharded=True if args.s3_sharded else None,
                  channel_per_worker=True if args.channel_per_worker else None, remainder=args.remainder,
                  channel=args.channel, record_sharding=args.record_sharding)
    if args.json:
        print(result.to_json_str())
        return 0
    H, W = topo.num_hosts, topo.workers_per_host
    print(f"shard set  {manifest.location}: {manifest.records:,} records in {len(manifest.shards)} shard(s)")
    print(f"cluster    {H} host(s) x {W} worker(s) = {H * W} rank(s), batch {args.batch_size} per rank")
    print(f"strategy   {result.strategy}   remainder={result.remainder}")
    print(f"steps      {result.steps_per_epoch} per epoch, every rank")
    rows = [("rank", "host", "local", "channel", "files", "shard", "records", "steps")]
    for r, n in zip(result.ranks, result.records_per_rank):
        rows.append((str(r.rank), r.host, str(r.local_rank), r.channel, _files(r.files),
                     f"shard({r.shard[0]}, {r.shard[1]})" if r.shard else "-", f"{n:,}", str(r.steps)))
    widths = [max(len(row[k]) for row in rows) for k in range(len(rows[0]))]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    for note in result.notes:
        print(f"note: {note}")
    return 0


def _files(files) -> str:
    if files is None:
        return "all"
    short = [f.split(".tfrecord")[0] for f in files]
    if len(short) <= 2:
        return ", ".join(short)
    return f"{len(short)} ({short[0]} .. {short[-1]})"


def _cmd_topology(args) -> int:
    from .configs import tf_config
    from .topology import Topology

    topo = Topology.from_env(config_dir=args.config_dir)
    print(json.dumps({"topology": topo.to_json(), "TF_CONFIG": tf_config(topo)}, indent=2, sort_keys=True))
    return 0


def _cmd_reshard(args) -> int:
    from .resharding import reshard

    prep = prep_options(args)
    m = reshard(args.path, args.out, num_shards=args.num_shards, shard_size=args.shard_size,
                overwrite=args.overwrite, progress=_progress(args),
                compression=None if args.compression == "none" else args.compression,
                endpoint_url=args.endpoint_url or None, shuffle=prep.shuffle if prep else None,
                layout=args.layout, block_rows=args.block_rows)
    sizes = [s.records for s in m.shards]
    print(f"wrote {m.records:,} records in {len(m.shards)} shard(s) to {args.out} "
          f"({min(sizes):,}..{max(sizes):,} records per shard)")
    if m.layout.columnar:
        print(f"layout columnar: blocks of {m.layout.block_rows:,} rows, "
              + ", ".join(f"{name} stored as {t}" for name, t in m.layout.stored))
    print_prep(m)
    return 0


def _cmd_transfer(args) -> int:
    from converters.util.units import format_size

    from . import transfer

    fn = transfer.upload if args.transfer == "upload" else transfer.download
    m = fn(args.src, args.dest, overwrite=args.overwrite, progress=_progress(args),
           endpoint_url=args.endpoint_url or None)  # else storage.s3.s3_endpoint's rule
    verb = "uploaded" if args.transfer == "upload" else "downloaded"
    print(f"{verb} {len(m.shards)} shard(s), {m.records:,} records, {format_size(m.total_bytes)} to {args.dest} "
          "(sha256 checked, manifest written last)")
    return 0
