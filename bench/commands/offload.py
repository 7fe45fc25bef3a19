"""``tfpipe bench offload SET``: does reading and parsing on tf.data service workers pay for this model step?

The trainer (one process, pinned to one core) reads SET against a simulated step twice per round: ``--step-ms``
(a sleep, as a GPU step costs the host no CPU) then ``--step-cpu-ms`` (CPU time the step burns on the trainer's
own core: a Python step, host-side augmentation; default 0). Each run is in a fresh process: **local**
(``build_dataset`` of the set, read + parse here) and **service** (``service=grpc://...``: read + parse on the
workers, finished batches here). Without ``--service`` a dispatcher and ``--workers`` workers are started on
this host, pinned to the other cores. Reported per variant: records/s and the trainer's CPU seconds per record
(the process's CPU time, robust to other load); figures are the median and range over ``--repeats`` paired
rounds, with the 1-minute load average.

The verdict: offloading pays for this step when the service feeds the trainer faster than it feeds itself
(records/s ratio >= 1.05) — which happens when the trainer's core is busy, with the input or with the step's
own CPU; the verdict also gives the trainer CPU per record that the input costs, with and without the service
(the step's own ``--step-cpu-ms`` per record taken out); in dollars (``--price-gpu``, ``--price-cpu``: per
hour, the GPU instance and the CPU instances that run the workers) when (price with the CPU instances / price
without) x (epoch time with the service / without) < 1.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from converters.cli.parser import add_json_option, add_set_argument
from bench.core.steps import host_burn
from bench.report.tables import mark_default
from converters.cli.types import MAX_STEP_MS, nonneg_float, nonneg_int, positive_int, step_milliseconds

__all__ = ["add_parser", "run", "run_benchmark", "verdict", "format_report", "PAYS_RATIO"]

PAYS_RATIO = 1.05   # service records/s over local records/s from which offloading pays for the step
# fresh processes, TensorFlow started without Keras (converters.cli.quiet): neither needs it
_CHILD = ("import sys, json; from converters.cli.quiet import lean_tensorflow_import; lean_tensorflow_import(); "
          "from bench.commands.offload import trainer; print(json.dumps(trainer(json.loads(sys.argv[1]))))")
_SERVERS = ("import sys, os; from converters.cli.quiet import lean_tensorflow_import; lean_tensorflow_import(); "
            "import tensorflow as tf; s = tf.data.experimental.service; "
            "sys.argv[3] and os.sched_setaffinity(0, {int(c) for c in sys.argv[3].split(',')}); "
            "x = s.DispatchServer(s.DispatcherConfig(port=int(sys.argv[2]))) if sys.argv[1] == 'dispatcher' else "
            "s.WorkerServer(s.WorkerConfig(dispatcher_address=sys.argv[2])); print('up', flush=True); x.join()")


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("offload", help="records/s and trainer CPU per record with and without a tf.data service, "
                                       "against a simulated step; whether offloading pays",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_set_argument(p, "path", help="shard set to read (a directory or its index.json)")
    p.add_argument("--service", default=None, metavar="grpc://HOST:PORT",
                   help="a running dispatcher (default: start one and --workers workers on this host's other cores)")
    p.add_argument("--workers", type=positive_int, default=1, help="local workers to start (default 1)")
    p.add_argument("--batch-size", type=positive_int, default=512, help="batch size (default 512)")
    p.add_argument("--step-ms", type=step_milliseconds, default=5.0,
                   help=f"simulated step per batch, ms: a sleep, the trainer's CPU left free (default 5, "
                        f"at most {MAX_STEP_MS:g})")
    p.add_argument("--step-cpu-ms", type=step_milliseconds, default=0.0,
                   help="CPU the step burns on the trainer's core per batch, ms, after --step-ms (default 0)")
    p.add_argument("--batches", type=nonneg_int, default=0, help="batches per run (default 0: one epoch)")
    p.add_argument("--repeats", type=positive_int, default=3, help="paired rounds of local and service runs (default 3)")
    p.add_argument("--price-gpu", type=nonneg_float, default=None, metavar="USD",
                   help="price per hour of the GPU (trainer) instance")
    p.add_argument("--price-cpu", type=nonneg_float, default=None, metavar="USD",
                   help="price per hour of the CPU instances running the workers")
    add_json_option(p, "the report")
    return p


def trainer(cfg: dict) -> dict:
    """One trainer run in this process (pinned to ``cfg['core']``): records, wall and CPU seconds."""
    if cfg.get("core") is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cfg["core"]})
    from pipeline import PipelineSpec, build_dataset

    extra = {"service": cfg["service"], "service_job": cfg["job"]} if cfg.get("service") else {}
    spec = PipelineSpec.from_manifest(cfg["path"], cfg["batch_size"], **extra)
    ds = build_dataset(spec)
    if cfg["batches"]:
        ds = ds.take(cfg["batches"])
    step, burn = cfg["step_ms"] / 1e3, cfg.get("step_cpu_ms", 0.0) / 1e3
    it = iter(ds)
    first = next(it)                        # graph start-up (and the service's job) outside the timing
    records, cpu0, t0 = 0, time.process_time(), time.perf_counter()
    for batch in it:
        records += int(batch[1].shape[0]) if isinstance(batch, tuple) else int(next(iter(batch.values())).shape[0])
        if step:
            time.sleep(step)
        if burn:
            host_burn(burn)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    del first
    return {"records": records, "seconds": wall, "cpu_seconds": cpu, "records_per_s": records / max(wall, 1e-9),
            "cpu_us_per_record": 1e6 * cpu / max(records, 1)}


def _cores() -> tuple[int | None, list[int]]:
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cores) < 2:
        return None, []
    return cores[0], cores[1:]


def _start(servers: list[list[str]]) -> list[subprocess.Popen]:
    """The servers started together (a worker finds its dispatcher when that comes up); each says "up"."""
    procs = [subprocess.Popen([sys.executable, "-c", _SERVERS, *args], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL) for args in servers]
    for p, args in zip(procs, servers):
        if p.stdout.readline().strip() != b"up":
            for q in procs:
                q.kill()
                q.wait()
            raise RuntimeError(f"tf.data service {args[0]} did not start")
    return procs


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_child(cfg: dict) -> dict:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    out = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(cfg)], capture_output=True, text=True, env=env,
                         check=False, timeout=1800)
    if out.returncode:
        raise RuntimeError(f"trainer run failed: {out.stderr.strip().splitlines()[-1:] or out.returncode}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _stats(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def verdict(local: dict, service: dict, price_gpu: float | None, price_cpu: float | None,
            step_cpu_us_per_record: float = 0.0) -> dict:
    """Whether offloading pays for the step (records/s), and in dollars when prices are given; the trainer
    CPU per record the input costs locally and with the service (``step_cpu_us_per_record``, the step's own
    CPU, taken out)."""
    speed = service["records_per_s"] / max(local["records_per_s"], 1e-9)
    out = {"speedup": speed, "cpu_ratio": service["cpu_us_per_record"] / max(local["cpu_us_per_record"], 1e-9),
           "pays": speed >= PAYS_RATIO, "step_cpu_us_per_record": step_cpu_us_per_record,
           "input_cpu_us_per_record": {k: max(0.0, f["cpu_us_per_record"] - step_cpu_us_per_record)
                                       for k, f in (("local", local), ("service", service))}}
    if price_gpu:
        price_ratio = (price_gpu + (price_cpu or 0.0)) / price_gpu
        out.update(price_ratio=price_ratio, cost_ratio=price_ratio / speed, pays_dollars=price_ratio / speed < 1)
    return out


def run_benchmark(path: str, *, service: str | None = None, workers: int = 1, batch_size: int = 512,
                  step_ms: float = 5.0, step_cpu_ms: float = 0.0, batches: int = 0, rounds: int = 3, price_gpu: float | None = None,
                  price_cpu: float | None = None, log=None) -> dict:
    """Paired rounds of local and service trainer runs; the figures, the load and the verdict."""
    core, others = _cores()
    procs: list[subprocess.Popen] = []
    load0 = os.getloadavg()[0]
    try:
        if service is None:
            port = _free_port()
            pin = ",".join(map(str, others))
            procs += _start([["dispatcher", str(port), ""]] + [["worker", f"127.0.0.1:{port}", pin]] * workers)
            service = f"grpc://127.0.0.1:{port}"
        base = {"path": str(path), "batch_size": batch_size, "step_ms": step_ms, "step_cpu_ms": step_cpu_ms,
                "batches": batches, "core": core}
        runs: dict[str, list[dict]] = {"local": [], "service": []}
        for r in range(rounds):
            runs["local"].append(_run_child({**base, "service": None}))
            runs["service"].append(_run_child({**base, "service": service, "job": f"bench-{os.getpid()}-{r}"}))
            if log:
                log(f"round {r + 1}/{rounds}: local {runs['local'][-1]['records_per_s']:,.0f} rec/s, service "
                    f"{runs['service'][-1]['records_per_s']:,.0f} rec/s")
    finally:
        for p in procs:
            p.kill()
            p.wait()
    fig = {k: {m: _stats([x[m] for x in v]) for m in ("records_per_s", "cpu_us_per_record")} for k, v in runs.items()}
    med = {k: {m: s["median"] for m, s in v.items()} for k, v in fig.items()}
    return {"service": service, "local_workers": workers if procs else 0, "trainer_core": core,
            "worker_cores": others if procs else None, "batch_size": batch_size, "step_ms": step_ms,
            "step_cpu_ms": step_cpu_ms, "rounds": rounds, "load": [load0, os.getloadavg()[0]], "figures": fig,
            "verdict": verdict(med["local"], med["service"], price_gpu, price_cpu, 1e3 * step_cpu_ms / batch_size)}


def format_report(r: dict) -> str:
    lines = [f"trainer on core {r['trainer_core']}, service {r['service']}"
             + (f" ({r['local_workers']} local worker(s) on cores {r['worker_cores']})" if r["local_workers"] else "")
             + f"; step {r['step_ms']:g} ms + {r.get('step_cpu_ms', 0.0):g} ms of trainer CPU, batch {r['batch_size']}, {r['rounds']} round(s), "
               f"load {r['load'][0]:.1f} -> {r['load'][1]:.1f}"]
    for k in ("local", "service"):
        f = r["figures"][k]
        row = (f"  {k:<8} {f['records_per_s']['median']:>12,.0f} rec/s "
               f"({f['records_per_s']['min']:,.0f}-{f['records_per_s']['max']:,.0f})  "
               f"{f['cpu_us_per_record']['median']:.2f} CPU us/record "
               f"({f['cpu_us_per_record']['min']:.2f}-{f['cpu_us_per_record']['max']:.2f})")
        lines.append(mark_default(row, "no service=") if k == "local" else row)
    v = r["verdict"]
    line = (f"verdict: offloading {'pays' if v['pays'] else 'does not pay'} for this step: the service feeds "
            f"{v['speedup']:.2f}x the records/s at {v['cpu_ratio']:.2f}x the trainer CPU per record")
    if "input_cpu_us_per_record" in v:
        cost = v["input_cpu_us_per_record"]
        line += (f"; the input costs the trainer {cost['local']:.2f} CPU us/record here, {cost['service']:.2f} with "
                 f"the service")
        if v.get("step_cpu_us_per_record"):
            line += f" (beside the step's own {v['step_cpu_us_per_record']:.2f})"
        elif not v["pays"]:
            line += " (a step that keeps the trainer's CPU busy, --step-cpu-ms, is where offloading pays)"
    if "price_ratio" in v:
        line += (f"; in dollars it {'pays' if v['pays_dollars'] else 'does not pay'}: price ratio "
                 f"{v['price_ratio']:.2f} x step-time ratio {1 / v['speedup']:.2f} = {v['cost_ratio']:.2f} "
                 f"({'<' if v['pays_dollars'] else '>='} 1)")
    return "\n".join(lines + [line])


def run(args) -> int:
    if args.service is not None:
        from pipeline.spec.serviceopts import parse_service

        try:
            parse_service(args.service)
        except ValueError as exc:
            print(f"tfpipe bench offload: --service: {exc}", file=sys.stderr)
            return 2
    say = None if args.json else (lambda s: print(s, file=sys.stderr, flush=True))
    report = run_benchmark(args.path, service=args.service, workers=args.workers, batch_size=args.batch_size,
                           step_ms=args.step_ms, step_cpu_ms=args.step_cpu_ms, batches=args.batches, rounds=args.repeats,
                           price_gpu=args.price_gpu, price_cpu=args.price_cpu, log=say)
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


def smoke_set(smoke: bool) -> tuple[str, int]:
    """A synthetic set for ``bench all`` (a temporary directory the caller removes) and its records."""
    from converters.libsvm.synthetic import write_criteo_shards

    records = 4_000 if smoke else 200_000
    tmp = tempfile.mkdtemp(prefix="tfpipe-offload-")
    try:
        write_criteo_shards(os.path.join(tmp, "criteo"), records, shard_bytes=(1 << 20) if smoke else 16 << 20)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return tmp, records
