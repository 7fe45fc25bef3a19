"""``tfpipe bench stream``: training input straight from S3 — streaming through the bounded cache vs copying the
whole set first vs reading it from local disk.

S3 is served locally by moto (``ThreadedMotoServer`` on 127.0.0.1) behind ``bench.infra.netlink.Link``, a
proxy that limits the download bandwidth (``--rates``, MiB/s; 0 = no limit). For each link and each of ``--runs`` runs:

* **stream** — ``PipelineSpec.from_manifest("s3://...", stream_cache_dir=<fresh>, stream_cache_limit=...)``: time
  to the first batch (from ``build_dataset``) and records/s over the whole epoch;
* **copy first** — every shard fetched and checked first (the former behaviour), then read from disk: the
  first batch comes after the whole copy;
* **local** — the same set read from local disk (no network).

Streaming's records/s is reported as a ratio to the physical limit, min(link rate, local read rate), both in
records/s (the link's bytes/s divided by the set's bytes per record). Figures are the median and range over
the runs, with the 1-minute load average before and after.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from converters.cli.parser import add_json_option
from converters.cli.types import nonneg_floats, nonneg_int, positive_int, size

from ..report.tables import mark_default

__all__ = ["add_parser", "run", "run_benchmark", "format_report"]

_FAKE_AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing",
             "AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": "/nonexistent",
             "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent"}
_BUCKET = "tfpipe-bench-stream"


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("stream", help="S3 input: streaming through the bounded cache vs full copy first vs local "
                                      "disk, through a bandwidth-limited link (local moto server)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shards", type=positive_int, default=12, help="shards in the set (default 12)")
    p.add_argument("--shard-size", type=size, default=4 << 20, help="bytes per shard, about (default 4MiB)")
    p.add_argument("--rates", type=nonneg_floats, default=[25.0, 100.0, 0.0], metavar="MIBS[,MIBS]",
                   help="link rates in MiB/s, 0 = no limit (default 25,100,0)")
    p.add_argument("--repeats", type=positive_int, default=3, help="runs of each variant (default 3)")
    p.add_argument("--read-ahead", type=nonneg_int, default=2, help="shards fetched ahead (default 2)")
    p.add_argument("--batch-size", type=positive_int, default=512, help="batch size (default 512)")
    add_json_option(p, "the report")
    return p


def run(args) -> int:
    say = None if args.json else (lambda s: print(s, file=sys.stderr, flush=True))
    report = run_benchmark(shards=args.shards, shard_bytes=args.shard_size, rates_mib=args.rates,
                           runs=args.repeats, read_ahead=args.read_ahead, batch_size=args.batch_size, log=say)
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


@contextlib.contextmanager
def _env(**values):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update({k: v for k, v in values.items() if v is not None})
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _read(spec) -> tuple[float, float, int]:
    """(seconds to the first batch, seconds for the epoch, records) of build_dataset(spec), from the build."""
    from pipeline.build import build_dataset

    t = time.perf_counter()
    first, n = None, 0
    for batch in build_dataset(spec):
        n += int(batch[1].shape[0])
        if first is None:
            first = time.perf_counter() - t
    return first or 0.0, time.perf_counter() - t, n


def _summary(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 4), "min": round(min(values), 4),
            "max": round(max(values), 4)}


def _one_link(url, local, m, rate, runs, read_ahead, batch_size, tmp, say) -> dict:
    from converters.storage.download import fetch_verified
    from pipeline import PipelineSpec
    from converters.storage.s3 import S3Storage

    out = {"stream_first_s": [], "stream_rps": [], "copy_first_s": [], "copy_rps": []}
    for r in range(runs):
        cache = os.path.join(tmp, f"cache-{rate}-{r}")
        limit = (read_ahead + 2) * max(s.bytes for s in m.shards)
        spec = PipelineSpec.from_manifest(url, batch_size, stream_cache_dir=cache, stream_cache_limit=limit,
                                          read_ahead=read_ahead, tune="off")
        first, total, n = _read(spec)
        if n != m.records:
            raise RuntimeError(f"streaming read {n} records, the set has {m.records}")
        out["stream_first_s"].append(first)
        out["stream_rps"].append(n / total)
        copy = os.path.join(tmp, f"copy-{rate}-{r}")
        os.makedirs(copy)
        t = time.perf_counter()
        storage = S3Storage(url, max_attempts=1)
        for s in m.shards:
            fetch_verified(storage, s.name, os.path.join(copy, s.name), s.bytes, s.sha256)
        shutil.copy(os.path.join(local, "index.json"), copy)
        copied = time.perf_counter() - t
        first_c, total_c, _ = _read(PipelineSpec.from_manifest(copy, batch_size, tune="off"))
        out["copy_first_s"].append(copied + first_c)
        out["copy_rps"].append(m.records / (copied + total_c))
        shutil.rmtree(copy, ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)
        if say:
            say(f"  link {rate or 'unlimited'} MiB/s run {r + 1}: stream first batch {first:.2f} s, "
                f"{n / total:,.0f} rec/s; copy first {copied + first_c:.2f} s, {m.records / (copied + total_c):,.0f} "
                f"rec/s")
    return {k: _summary(v) for k, v in out.items() if v}


def run_benchmark(*, shards: int = 12, shard_bytes: int = 4 << 20, rates_mib=(25, 100, 0), runs: int = 3,
                  read_ahead: int = 2, batch_size: int = 512, workdir: str | None = None, log=None) -> dict:
    """Run every variant ``runs`` times for every link rate (MiB/s, 0: no limit); a JSON-able report."""
    from converters.libsvm.synthetic import write_criteo_shards
    from pipeline import PipelineSpec

    rates_mib = list(rates_mib)
    if not rates_mib or not all(isinstance(r, (int, float)) and 0 <= r < math.inf for r in rates_mib):
        raise ValueError(f"rates_mib must be finite numbers >= 0 (MiB/s, 0: no limit), got {rates_mib!r}")

    say = log or (lambda s: None)
    tmp = tempfile.mkdtemp(prefix="tfpipe-bench-stream-", dir=workdir)
    # S3 and the links run in a process of their own, so serving bytes does not compete with the reader for
    # this interpreter's lock
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    server = subprocess.Popen([sys.executable, "-m", "bench.infra.netlink", *[str(r * (1 << 20)) for r in rates_mib]],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=repo)
    load_before = os.getloadavg()[0]
    try:
        ports = json.loads(server.stdout.readline() or "{}")
        if "moto" not in ports:
            raise RuntimeError("the local S3 server (moto) did not start")
        with _env(**_FAKE_AWS, AWS_ENDPOINT_URL=f"http://127.0.0.1:{ports['moto']}",
                  TFPIPE_CACHE=os.path.join(tmp, "tfpipe")):
            import boto3

            local = os.path.join(tmp, "local")
            records = max(1, shards * shard_bytes // 320)  # ~320-byte Criteo-like records
            m = write_criteo_shards(local, records, shard_bytes=shard_bytes)
            client = boto3.client("s3", region_name="us-east-1")
            client.create_bucket(Bucket=_BUCKET)
            for name in os.listdir(local):
                client.upload_file(os.path.join(local, name), _BUCKET, f"set/{name}")
            url = f"s3://{_BUCKET}/set"
            say(f"{len(m.shards)} shards, {m.total_bytes / 2**20:.1f} MiB, {m.records:,} records")
            lfirst, lrps = [], []
            _read(PipelineSpec.from_manifest(local, batch_size, tune="off"))  # warm-up: TensorFlow loaded
            for _ in range(runs):
                first, total, n = _read(PipelineSpec.from_manifest(local, batch_size, tune="off"))
                lfirst.append(first)
                lrps.append(n / total)
            local_rps = statistics.median(lrps)
            say(f"  local disk: first batch {statistics.median(lfirst):.3f} s, {local_rps:,.0f} rec/s")
            links = []
            for rate, port in zip(rates_mib, ports["links"]):
                with _env(AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}"):
                    res = _one_link(url, local, m, rate, runs, read_ahead, batch_size, tmp, say)
                bytes_per_record = m.total_bytes / m.records
                link_rps = rate * (1 << 20) / bytes_per_record if rate else None
                limit = min(link_rps, local_rps) if link_rps else local_rps
                res.update(rate_mib=rate, link_rps=round(link_rps) if link_rps else None, limit_rps=round(limit),
                           stream_vs_limit=round(res["stream_rps"]["median"] / limit, 3))
                links.append(res)
        return {"benchmark": "stream", "shards": len(m.shards), "bytes": m.total_bytes, "records": m.records,
                "runs": runs, "read_ahead": read_ahead, "batch_size": batch_size,
                "local": {"first_s": _summary(lfirst), "rps": _summary(lrps)}, "links": links,
                "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2),
                "cpu_count": os.cpu_count()}
    finally:
        server.stdin.close()
        server.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)


def _mr(s: dict, fmt: str) -> str:
    return f"{format(s['median'], fmt)} ({format(s['min'], fmt)}–{format(s['max'], fmt)})"


def format_report(r: dict) -> str:
    lines = [f"{r['shards']} shards, {r['bytes'] / 2**20:.1f} MiB, {r['records']:,} records, batch {r['batch_size']}, "
             f"read_ahead {r['read_ahead']}; median (range) of {r['runs']} runs; load {r['load_before']} → "
             f"{r['load_after']} on {r['cpu_count']} CPUs",
             f"local disk              first batch {_mr(r['local']['first_s'], '.3f')} s   "
             f"{_mr(r['local']['rps'], ',.0f')} rec/s"]
    for ln in r["links"]:
        name = f"{ln['rate_mib']:g} MiB/s" if ln["rate_mib"] else "unlimited"
        lines.append(f"link {name}:")
        lines.append(mark_default(f"  stream                first batch {_mr(ln['stream_first_s'], '.3f')} s   "
                                  f"{_mr(ln['stream_rps'], ',.0f')} rec/s   = {ln['stream_vs_limit']:.2f}x the "
                                  f"limit ({ln['limit_rps']:,} rec/s)", "how an s3:// set is read"))
        lines.append(f"  copy first            first batch {_mr(ln['copy_first_s'], '.3f')} s   "
                     f"{_mr(ln['copy_rps'], ',.0f')} rec/s")
    return "\n".join(lines)
