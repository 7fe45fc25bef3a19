"""The trainer's side of offloading: the rank's read + parse (+ shuffle, batch) run on a tf.data service's
workers, and the trainer receives finished batches (``build_dataset`` calls :func:`service_dataset` when
``spec.service`` is set; ``describe`` shows :func:`service_stages`).

Per epoch, per rank: the rank's file names → (seeded per-epoch file shuffle) → per-file TFRecord reads (a
record-level ``shard(n, i)`` applied to each file) → shuffle → batch → parse, all on the workers, distributed with
``ShardingPolicy.DYNAMIC`` as the job ``<run>-<rank>-e<epoch>``; here only: re-cut to ``batch_size``, take the
equal steps, prefetch. With equal steps, one spare epoch follows the last and the whole run takes ``steps x
epochs`` batches: an epoch left short by a lost worker is made up from the spare one, so every rank still runs
the same number of steps (the spare epoch's job starts only if it is reached). A run that even the spare epoch
cannot make up (workers lost and too few left) ends with an error that says so (``run_ended_short``), after the
dispatcher gives the lost workers' tasks up (``pipeline.service.workerwatch``). Before any of it the dispatcher
must answer within ``service_timeout`` (:func:`reach_service`), and a watch in this process cuts its connections
to a worker silent for ``service_worker_timeout`` (a frozen one, ``clientwatch``). What each choice is and why:
``pipeline.plan.servicejob``; faults and limits: docs/offload.md.
"""
from __future__ import annotations

import logging
import os
import time
from typing import Any, Mapping

from ..plan.readplan import AUTOTUNE
from ..spec.options import DEFAULT_BUFFER_BYTES
from ..spec.stage import Stage
from ..plan.servicejob import ServiceChoice, service_choice

__all__ = ["stages", "build", "service_dataset", "service_stages", "worker_graph", "element_batches", "run_ended_short",
           "repeat_until_empty", "reach_service", "MAX_FILE_READERS", "WAIT_NOTICE_SECONDS",
           "ELEMENT_RECORDS", "ELEMENT_BYTES"]

log = logging.getLogger(__name__)

MAX_FILE_READERS = 4    # files one worker reads at once (its interleave's cycle)
# records per element a worker sends: whole batches, up to this many records. The trainer's cost of receiving
# an element is mostly per element and per tensor, not per record (measured, batch 512 against 32 x 512 per
# element: 3.3 -> 2.2-2.4 trainer CPU us per record, 5 ms step, docs/offload.md); the re-cut to batch_size here
# slices them.
ELEMENT_RECORDS = 16384
ELEMENT_BYTES = 8 << 20   # ... and at most about this many bytes of records (8 MiB): long records, small elements
_FOREVER_SEED_EPOCHS = 0
WAIT_NOTICE_SECONDS = 30.0   # while build_dataset waits for the dispatcher, a warning this often says so


def _epoch_seed(spec: Any, epoch: int) -> int | None:
    # per-epoch seed from (seed, epoch), within int64 as TensorFlow takes it
    return None if spec.seed is None else (spec.seed * 1_000_003 + epoch) % (1 << 63)


def worker_graph(spec: Any, seed: int | None = None) -> Any:
    """The graph one rank's job runs on the workers for one epoch: elements of ``element_batches`` batches
    (each worker's last one short), parsed. TensorFlow ops only: workers cannot run Python functions."""
    import tensorflow as tf

    from .tail import parse_batches

    files = list(spec.files)
    names = tf.data.Dataset.from_tensor_slices(files)
    if spec.shuffle_buffer and len(files) > 1:
        names = names.shuffle(len(files), seed=seed)
    n, i, ctype, buf = spec.num_shards, spec.shard_index, spec.compression_type, spec.buffer_size
    buf = DEFAULT_BUFFER_BYTES if buf is None else buf

    def read(f):
        ds = tf.data.TFRecordDataset(f, ctype, buf)
        return ds.shard(n, i) if n > 1 else ds

    ds = names.interleave(read, cycle_length=min(len(files), MAX_FILE_READERS), num_parallel_calls=AUTOTUNE,
                          deterministic=spec.deterministic)
    if spec.shuffle_buffer:
        ds = ds.shuffle(spec.shuffle_buffer, seed=seed)
    ds = ds.batch(spec.batch_size * element_batches(spec))
    if spec.parse:
        ds = parse_batches(ds, spec, AUTOTUNE, spec.deterministic)
    return ds.prefetch(AUTOTUNE)


def element_batches(spec: Any) -> int:
    """Batches of ``batch_size`` in one element a worker sends (re-cut to ``batch_size`` here)."""
    records = ELEMENT_RECORDS
    if spec.record_bytes:
        records = min(records, int(ELEMENT_BYTES // spec.record_bytes))
    return max(1, records // spec.batch_size)


def _distributed_epoch(spec: Any, choice: ServiceChoice, job_name: str, seed: int | None) -> Any:
    import tensorflow as tf

    svc = tf.data.experimental.service
    ds = worker_graph(spec, seed).apply(svc.distribute(svc.ShardingPolicy.DYNAMIC, spec.service, job_name=job_name,
                                                       compression=choice.compression))
    # each worker's stream ends on a short batch: re-cut to batch_size, so every rank runs the same steps
    ds = ds.rebatch(spec.batch_size, drop_remainder=spec.drop_remainder)
    return ds.take(choice.steps) if choice.steps is not None else ds


def service_dataset(spec: Any, env: Mapping[str, str] | None = None) -> Any:
    """The rank's batches, read and parsed on the tf.data service at ``spec.service``, and the tail they get."""
    from .tail import Tail

    if spec.parse and spec.sparse_as == "ragged" and spec.schema.varlen:
        raise ValueError("service: ragged features cannot be re-cut into equal batches here (tf.data's rebatch "
                         "refuses RaggedTensors); use sparse_as='sparse' or read locally")
    choice = service_choice(spec, os.environ if env is None else env)
    reach_service(spec)
    log.info("reading through the tf.data service %s as job %s (%s)", spec.service, choice.job_name, choice.split)
    if spec.epochs is None:   # forever: one job per epoch through the repeat's iteration counter, one order
        ds = repeat_until_empty(
            _distributed_epoch(spec, choice, choice.job_name, _epoch_seed(spec, _FOREVER_SEED_EPOCHS)), (
                f"tf.data service {spec.service}: an epoch of job {choice.job_name} came out empty: no worker is "
                "left (the tasks of lost workers are given up after the worker timeout of the dispatcher); start "
                "workers and restart from the last checkpoint (docs/offload.md)"))
    else:                     # a new seeded order each epoch, each epoch its own job
        spare = choice.steps is not None   # equal steps: a lost worker's records made up from one more epoch
        ds = None
        for e in range(spec.epochs + spare):
            one = _distributed_epoch(spec, choice, f"{choice.job_name}-e{e}", _epoch_seed(spec, e))
            ds = one if ds is None else ds.concatenate(one)
        if spare:   # never reached unless an epoch came short (its job starts only when the concatenate gets there)
            total = choice.steps * spec.epochs
            ds = ds.concatenate(run_ended_short(ds.element_spec, (
                f"tf.data service {spec.service}: jobs {choice.job_name}-e* delivered fewer than the {total} steps "
                f"of the run ({choice.steps} x {spec.epochs} epochs), even with the spare epoch: workers were lost and "
                "too few are left (or none); start workers and restart from the last checkpoint "
                "(docs/offload.md)"))).take(total)
    return ds, Tail(AUTOTUNE, spec.deterministic, parsed=True)   # the tail adds the prefetch


def reach_service(spec: Any) -> None:
    """Before TensorFlow dials the dispatcher (it retries forever): it must answer within ``service_timeout``
    seconds, else ``ServiceError`` naming its address; meanwhile a warning every ``WAIT_NOTICE_SECONDS`` says
    what it waits for and until when. Then this process's watch of frozen workers runs."""
    from ..service.clientwatch import client_watch
    from ..service.probe import NoAnswer, dispatcher_version, no_answer
    from ..spec.serviceopts import parse_service

    host, port = parse_service(spec.service)
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    hint = f"service={spec.service!r}, see service_timeout"
    started, until = time.monotonic(), time.time() + spec.service_timeout
    deadline, notice = started + spec.service_timeout, started + WAIT_NOTICE_SECONDS
    while True:
        asked = time.monotonic()
        try:
            dispatcher_version(address, max(min(deadline, notice) - asked, 0.001), hint=hint)
            break
        except NoAnswer:   # gRPC may say so before the call's deadline: the clock decides
            now = time.monotonic()
        if now >= deadline:
            raise no_answer(address, spec.service_timeout, hint) from None
        if now >= notice:
            log.warning("waiting for the tf.data service dispatcher at %s (service=%r): no answer for %.0f s; it is "
                        "given up at %s (service_timeout=%g s)", address, spec.service, now - started,
                        time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(until)), spec.service_timeout)
            notice = now + WAIT_NOTICE_SECONDS
        time.sleep(max(0.0, min(0.05 - (now - asked), deadline - now)))   # no busy loop on quick answers
    client_watch(address, spec.service_worker_timeout)


def _empty_element(element_spec: Any) -> Any:
    """An element of ``element_spec`` with no rows (unknown dimensions 0), made inside the caller's control
    dependencies (each part through ``identity``)."""
    import tensorflow as tf

    def empty(spec):
        shape = [0 if d is None else d for d in spec.shape]
        if isinstance(spec, tf.SparseTensorSpec):
            return tf.SparseTensor(tf.identity(tf.zeros([0, len(shape)], tf.int64)),
                                   tf.identity(tf.zeros([0], spec.dtype)),
                                   tf.identity(tf.constant(shape, tf.int64)))
        return tf.identity(tf.zeros(shape, spec.dtype))

    return tf.nest.map_structure(empty, element_spec)


def run_ended_short(element_spec: Any, message: str) -> Any:
    """A dataset of ``element_spec`` whose first element is an error carrying ``message``
    (``InvalidArgumentError: ... assertion failed: [message]``): placed where only a run that came out short
    gets, so a trainer whose workers are gone stops with the reason instead of ending early or silently."""
    import tensorflow as tf

    def fail(_):
        with tf.control_dependencies([tf.debugging.Assert(tf.constant(False), [tf.constant(message)])]):
            return _empty_element(element_spec)

    return tf.data.Dataset.from_tensors(0).map(fail)


def repeat_until_empty(one: Any, message: str) -> Any:
    """``one`` repeated forever, but an error carrying ``message`` when a repetition comes out empty.
    TensorFlow repeats a tf.data service input even then (a new, empty job every second while no worker is
    left): each repetition here ends on a marker element, and a marker right after a marker ends the stream
    (nothing more is asked of the service: no new jobs) on the error."""
    import tensorflow as tf

    spec = one.element_spec
    marked = one.map(lambda *e: (e[0] if len(e) == 1 else e, tf.constant(False)))
    marker = tf.data.Dataset.from_tensors(0).map(lambda _: (_empty_element(spec), tf.constant(True)))

    def count(markers_in_a_row, pair):
        element, is_marker = pair
        n = tf.where(is_marker, markers_in_a_row + 1, tf.constant(0, tf.int64))
        return n, (element, is_marker, n)

    def going(element, is_marker, n):
        return n < 2

    def data(element, is_marker, n):
        return tf.logical_not(is_marker)

    def unmarked(element, is_marker, n):
        return element

    ds = marked.concatenate(marker).repeat().scan(tf.constant(0, tf.int64), count)
    return ds.take_while(going).filter(data).map(unmarked).concatenate(run_ended_short(spec, message))


def service_stages(spec: Any, env: Mapping[str, str] | None = None) -> list[Stage]:
    """What ``describe`` shows for a rank reading through the service."""
    c = service_choice(spec, os.environ if env is None else env)
    sharded = spec.num_shards > 1
    on_workers = ["file names" + (" (shuffled per epoch)" if spec.shuffle_buffer and len(spec.files) > 1 else ""),
                  f"TFRecord reads, {min(len(spec.files), MAX_FILE_READERS)} files at once"
                  + (f", shard({spec.num_shards}, {spec.shard_index}) of each file" if sharded else "")]
    if spec.shuffle_buffer:
        on_workers.append(f"shuffle({spec.shuffle_buffer})")
    on_workers.append(f"batch({spec.batch_size * element_batches(spec)})")
    if spec.parse:
        on_workers.append("tf.io.parse_example")
    epochs = spec.epochs if spec.epochs else "forever"
    return [
        Stage("workers", True, {"service": spec.service, "graph": " -> ".join(on_workers), "split": c.split},
              c.split_why),
        Stage("distribute", True, {"processing_mode": "ShardingPolicy.DYNAMIC", "job": c.job_name,
                                   "epochs": epochs},
              "DYNAMIC hands each file to whichever worker asks next: every file read once, by one worker (OFF: "
              "every worker would read all of it; FILE/DATA: a fixed worker list). One job per rank: a shared "
              f"job gives its consumers unequal shares. {c.job_why}; each epoch its own job (-e<epoch>)"),
        Stage("compress", c.compression is not None, {"compression": c.compression or "none"}, c.compression_why),
        Stage("rebatch", True, {"batch_size": spec.batch_size, "drop_remainder": spec.drop_remainder},
              f"workers send {element_batches(spec)} batch(es) per element (receiving costs the trainer per element, "
              f"not per record) and each worker's stream ends short: re-cut here to full batches"),
        Stage("take", c.steps is not None, {"steps": c.steps}, c.steps_why + (
            "; a spare epoch makes up batches a lost worker took with it (the run takes steps x epochs; a run "
            "that comes out short even so ends with an error that says why)"
            if c.steps is not None and spec.epochs else "")),
        Stage("prefetch", spec.prefetch != 0, {"buffer": "AUTOTUNE" if spec.prefetch is None else spec.prefetch},
              "overlaps the service's replies with the training step" if spec.prefetch != 0
              else "off (prefetch=0)"),
    ]


def stages(plan) -> list[Stage]:
    """The service graph's stages."""
    return service_stages(plan.spec)


def build(plan, resume: dict | None = None) -> Any:
    """The service graph up to its tail, and the tail it gets."""
    return service_dataset(plan.spec)
