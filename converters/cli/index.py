"""``tfpipe index SET``: adopt TFRecord files tfpipe did not write as a shard set (``shardset.index``)."""
from __future__ import annotations

import sys

from .parser import add_set_argument
from .types import positive_int

__all__ = ["register"]


def register(sub) -> None:
    p = sub.add_parser(
        "index", help="adopt existing TFRecord files as a shard set: write their index.json",
        description="Read every record of SET's TFRecord files with CRC checks (gzip detected from the content), "
                    "count records and bytes, hash them (sha256), infer the feature schema from their "
                    "tf.train.Example records and write index.json beside the files, last. The files keep "
                    "their names; then inspect, verify, shard plan, reshard, upload/download and the pipeline "
                    "work on them as on a converted set.")
    add_set_argument(p, "set", help="the TFRecord files to adopt as a shard set: a directory, a glob over one "
                                     "folder ('data/*.tfrecords') or an s3:// prefix")
    p.add_argument("--overwrite", action="store_true", help="replace an existing index.json")
    p.add_argument("--workers", type=positive_int, default=1, metavar="N",
                   help="files read at once, in worker processes (default 1)")
    p.add_argument("--label-key", default="label",
                   help="the feature taken as the label when the records have it (default label)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_index)


def _cmd_index(args) -> int:
    from ..shardset.index import index_set
    from ..util.units import format_size

    m = index_set(args.set, overwrite=args.overwrite, workers=args.workers, label=args.label_key,
                  progress=not args.no_progress and sys.stderr.isatty())
    print(f"indexed {len(m.shards)} file(s): {m.records:,} records, {format_size(m.total_bytes)}"
          f"{' GZIP' if m.compression else ''}")
    if m.schema.raw:
        print(f"schema: raw records ({m.extra.get('raw_records')}): the pipeline yields their bytes (parse=False)")
    else:
        print("schema")
        for f in m.schema.features:
            share = m.extra["features"][f.name]["present"]
            shape = "[None]   (variable length)" if f.varlen else list(f.shape)
            note = f"   (in {share:.2%} of the records)" if share < 1 else ""
            role = "   (label)" if f.name == m.schema.label else ""
            print(f"  {f.name:<16} {f.dtype:<8} {shape}{role}{note}")
    print(f"manifest {m.location.rstrip('/')}/index.json")
    return 0
