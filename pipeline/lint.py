"""``lint(dataset)``: read an existing tf.data graph (its GraphDef) and name order mistakes.

Rules (each a :class:`Finding` ``rule``):

- ``map-before-batch``: a map whose function parses Examples runs on single records before a batch — one
  parse call per record instead of one vectorized ``parse_example`` per batch (also ``map_and_batch`` with a
  parse). A map parsing vectors of records (then re-cut with ``rebatch``) is not flagged.
- ``cache-after-shuffle``: the cache freezes the first epoch's shuffled order (and caches after random work).
- ``repeat-before-cache``: the cache sees an endless stream; memory grows every epoch.
- ``no-prefetch``: the last stage is not a prefetch, so input never overlaps the training step.
- ``shard-after-shuffle``: ranks shard differently-shuffled streams: records are lost and duplicated.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Finding", "lint", "dataset_chain", "load_target", "RULES"]

RULES = ("map-before-batch", "cache-after-shuffle", "repeat-before-cache", "no-prefetch", "shard-after-shuffle")

_MAP = {"MapDataset", "ParallelMapDataset", "ParallelMapDatasetV2"}
_MAP_AND_BATCH = {"MapAndBatchDataset", "ExperimentalMapAndBatchDataset"}
_BATCH = {"BatchDataset", "BatchDatasetV2", "ParallelBatchDataset", "PaddedBatchDataset", "PaddedBatchDatasetV2",
          "RebatchDataset", "RebatchDatasetV2", "ExperimentalRebatchDataset"} | _MAP_AND_BATCH
_PARSE_DATASET = {"ParseExampleDataset", "ParseExampleDatasetV2", "ExperimentalParseExampleDataset"}
_PARSE_OPS = {"ParseExample", "ParseExampleV2", "ParseSingleExample", "ParseSequenceExample",
              "ParseSequenceExampleV2", "ParseSingleSequenceExample"}
_SHUFFLE = {"ShuffleDataset", "ShuffleDatasetV2", "ShuffleDatasetV3", "ShuffleAndRepeatDataset",
            "ShuffleAndRepeatDatasetV2"}
_REPEAT = {"RepeatDataset", "ShuffleAndRepeatDataset", "ShuffleAndRepeatDatasetV2"}
_CACHE = {"CacheDataset", "CacheDatasetV2", "MemoryCacheDataset"}
_SHARD = {"ShardDataset"}
_PREFETCH = {"PrefetchDataset"}
_TRAILING = {"OptionsDataset", "ModelDataset", "MaxIntraOpParallelismDataset", "PrivateThreadPoolDataset",
             "AssertCardinalityDataset", "AssertNextDataset", "ExperimentalMaxIntraOpParallelismDataset",
             "ExperimentalPrivateThreadPoolDataset"}
_DATASET_OP = re.compile(r"Dataset(V\d+)?$")


@dataclass(frozen=True)
class Finding:
    """One order mistake: the rule, a message saying what to change, and the dataset op it points at."""

    rule: str
    message: str
    op: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.message} [{self.op}]"


def _graph_def(dataset):
    import tensorflow as tf

    policy = tf.data.experimental.ExternalStatePolicy.IGNORE
    try:
        serialized = dataset._as_serialized_graph(external_state_policy=policy)
    except TypeError:  # older signatures
        serialized = dataset._as_serialized_graph()
    gd = tf.compat.v1.GraphDef()
    gd.ParseFromString(serialized.numpy())
    return gd


def _function_ops(gd) -> dict[str, set[str]]:
    """Op types used by each library function, nested function calls included."""
    direct = {f.signature.name: {n.op for n in f.node_def} for f in gd.library.function}
    calls = {f.signature.name: {a.func.name for n in f.node_def for a in n.attr.values() if a.func.name}
             | {n.op for n in f.node_def if n.op in direct}
             for f in gd.library.function}
    out = {}
    for name in direct:
        seen, todo, ops = set(), [name], set()
        while todo:
            cur = todo.pop()
            if cur in seen or cur not in direct:
                continue
            seen.add(cur)
            ops |= direct[cur]
            todo.extend(calls[cur])
        out[name] = ops
    return out


def _first_rank(node) -> int | None:
    """Rank of the first component of a dataset op's elements (None when unknown)."""
    shapes = node.attr["output_shapes"].list.shape if "output_shapes" in node.attr else []
    if not shapes or shapes[0].unknown_rank:
        return None
    return len(shapes[0].dim)


def dataset_chain(dataset) -> list[tuple[str, str, set[str], int | None]]:
    """The main chain of dataset ops, source first: ``(node name, op type, ops inside its function, rank of
    the first component of its elements)``."""
    gd = _graph_def(dataset)
    nodes = {n.name: n for n in gd.node}
    fops = _function_ops(gd)
    ret = next((n for n in gd.node if n.op == "_Retval"), None)
    if ret is None or not ret.input:
        return []
    chain = []
    name = ret.input[0].split(":")[0].lstrip("^")
    while name in nodes:
        node = nodes[name]
        if not _DATASET_OP.search(node.op):
            break
        inner: set[str] = set()
        for a in node.attr.values():
            if a.func.name:
                inner |= fops.get(a.func.name, set())
        chain.append((node.name, node.op, inner, _first_rank(node)))
        inputs = [i for i in node.input if not i.startswith("^")]
        if not inputs:
            break
        name = inputs[0].split(":")[0]
    chain.reverse()
    return chain


def lint(dataset) -> list[Finding]:
    """Findings for the tf.data graph of ``dataset`` (empty when the order is right)."""
    chain = dataset_chain(dataset)
    ops = [op for _, op, _, _ in chain]
    findings: list[Finding] = []

    def first(kinds, after=-1):
        return next((i for i, op in enumerate(ops) if op in kinds and i > after), None)

    for i, (name, op, inner, _) in enumerate(chain):
        # a parse map is per-record when its input elements are scalars (unknown rank: assume so); a map
        # parsing whole vectors (e.g. stream chunks) before a rebatch is vectorized and fine
        in_rank = chain[i - 1][3] if i else None
        per_record = (op in _MAP and inner & _PARSE_OPS and in_rank in (None, 0)) or op in _PARSE_DATASET
        if per_record and first(_BATCH, i) is not None:
            j = first(_BATCH, i)
            findings.append(Finding("map-before-batch", f"{op} parses one record per call before {ops[j]}: batch "
                                    f"first, then map a vectorized tf.io.parse_example", name))
        elif op in _MAP_AND_BATCH and inner & _PARSE_OPS:
            findings.append(Finding("map-before-batch", f"{op} calls its parse function once per record: batch "
                                    f"first, then map a vectorized tf.io.parse_example", name))
    shuffle = first(_SHUFFLE)
    for i, op in enumerate(ops):
        if op in _CACHE and shuffle is not None and shuffle < i:
            findings.append(Finding("cache-after-shuffle", f"{op} after {ops[shuffle]}: the cache freezes one "
                                    f"shuffled order; cache first, then shuffle", chain[i][0]))
        if op in _CACHE:
            rep = first(_REPEAT)
            if rep is not None and rep < i:
                findings.append(Finding("repeat-before-cache", f"{ops[rep]} before {op}: the cache sees an "
                                        f"endless stream and memory grows every epoch; cache, then repeat",
                                        chain[i][0]))
        if op in _SHARD and shuffle is not None and shuffle < i:
            findings.append(Finding("shard-after-shuffle", f"{op} after {ops[shuffle]}: ranks shard differently "
                                    f"shuffled streams (records lost and duplicated); shard first", chain[i][0]))
    tail = [k for k, op in enumerate(ops) if op not in _TRAILING]
    if tail and ops[tail[-1]] not in _PREFETCH:
        findings.append(Finding("no-prefetch", f"the last stage is {ops[tail[-1]]}, not a prefetch: add "
                                f".prefetch(tf.data.AUTOTUNE) at the end", chain[tail[-1]][0]))
    return findings


def load_target(target: str):
    """The function named by ``script.py:function`` (``tfpipe pipeline lint``'s target).

    The script is imported as a module registered in ``sys.modules`` under a name of its own (from its path),
    as an ordinary import would be: AutoGraph looks a function's module up there to read its source, and
    without it every lambda given to ``map`` prints "AutoGraph could not transform ... Please report this to
    the TensorFlow team" and runs unconverted."""
    import hashlib
    import importlib.util
    import os
    import sys

    from converters.util.errors import TfpipeError

    path, sep, func = target.rpartition(":")
    if not sep or not path or not func:
        raise TfpipeError(f"lint target must be script.py:function, got {target!r}")
    if not os.path.isfile(path):
        raise TfpipeError(f"lint target {path}: no such file")
    path = os.path.abspath(path)
    name = "_tfpipe_lint_" + hashlib.sha1(path.encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    fn = getattr(module, func, None)
    if not callable(fn):
        raise TfpipeError(f"lint target {path}: no function {func!r}")
    return fn
