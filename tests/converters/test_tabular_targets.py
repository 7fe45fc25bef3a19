"""The targets' tables (``targets.TARGETS``): each target's schema, offsets and expansion as documented; and the
bytes every tabular conversion writes, pinned for both targets x both id policies x both layouts (a change to
a target, an id policy or the memory budget that moves a byte fails here)."""
from __future__ import annotations

import hashlib
import json
from itertools import product

import numpy as np
import pytest
import tabularref as R

from converters.engines.inprocess import run_job
from converters.shardset.options import ShardOutputOptions
from converters.tabular.encode import ColumnFacts
from converters.tabular.job import TabularJob
from converters.tabular.options import TabularOptions
from converters.tabular.targets import TARGETS, target_named


@pytest.fixture(scope="module")
def narrow_days(tmp_path_factory):
    d = tmp_path_factory.mktemp("narrow")
    for k in range(2):
        R.write_day(d / f"day_{k}", R.narrow(R.day_lines(40 + k, 200, distinct=60)))
    return d, R.write_narrow_schema(d / "schema.json")


def _digest(out, manifest) -> str:
    """sha256 of every file of the set but its manifest (shards, vocabularies: names and bytes), and of the
    manifest's schema, layout, options and ``extra``."""
    h = hashlib.sha256()
    for p in sorted(out.rglob("*")):
        if p.is_file() and p.name != "index.json":
            h.update(p.relative_to(out).as_posix().encode() + b"\0" + p.read_bytes())
    doc = json.loads((out / "index.json").read_text())
    h.update(json.dumps([doc.get(k) for k in ("schema", "layout", "options", "extra")], sort_keys=True).encode())
    return h.hexdigest()


# (target, id policy, layout) -> the set's digest, in the order of ``product``
PINNED = dict(zip(product(("deepfm", "dlrm"), ("hashing", "vocabulary"), ("columnar", "example")), """
08663b95977df4690f05bdf5dece6d3b2613cd035462f93f10798bcb8fc78e51
0dbe4b3f5ad48ac617b8a059f37a71c6ad6027d8e654e61b4b58a04446a6cd0f
42c12c9596d0770575bafe055797ee896982f423ba9e808303f66328a16015e9
ca0d6843469004d23dbdbaa15f31477eab5fddec7c7478ba074e1ba2b790619a
e8cdaf84c65f69f975c123c2b625241ac5c3dacb23a2e46c9dab9ecfe89d67ce
eec1b8cc2958165e4e019a92a5727c3e019ee2a4d748614a1bcc8a5967d97fe4
dd45e282d781f01e9d1ee1a693071da6a0f9352e1421c5c1eeaa96eee33fbc66
c8e18e945335b27c7ff41b1b87705c3892bc5d138bf53b6acb9154d521f9141e
""".split()))


@pytest.mark.parametrize("target, policy, layout", sorted(PINNED))
def test_every_target_policy_and_layout_writes_its_pinned_bytes(narrow_days, tmp_path, target, policy, layout):
    d, schema = narrow_days
    ids = {"hash_buckets": 97} if policy == "hashing" else {"min_count": 2}
    numeric = {"numeric": "minmax"} if layout == "columnar" else {}  # the pre-pass without vocabularies too
    blocks = {"block_rows": 32} if layout == "columnar" else {}
    opts = TabularOptions(schema=schema, target=target, negative_rate=0.8, seed=3, **ids, **numeric,
                          output=ShardOutputOptions(shard_size=3000, layout=layout, **blocks))
    m = run_job(TabularJob.create([str(d / "day_0"), str(d / "day_1")], str(tmp_path / "s"), opts,
                                  block_bytes=4096, chunk_rows=53))
    assert len(m.shards) > 1
    assert _digest(tmp_path / "s", m) == PINNED[target, policy, layout]


@pytest.mark.parametrize("name, numeric, categorical, features", [
    ("deepfm", 13, 26, [("label", "float32", ()), ("ids", "int64", (39,)), ("values", "float32", (39,))]),
    ("deepfm", 0, 2, [("label", "float32", ()), ("ids", "int64", (2,)), ("values", "float32", (2,))]),
    ("dlrm", 13, 26, [("label", "float32", ()), ("dense", "float32", (13,)), ("sparse", "int64", (26,))]),
    ("dlrm", 0, 2, [("label", "float32", ()), ("sparse", "int64", (2,))]),  # a side without columns left out
    ("dlrm", 3, 0, [("label", "float32", ()), ("dense", "float32", (3,))]),
])
def test_each_target_has_its_features(name, numeric, categorical, features):
    schema = TARGETS[name].schema(numeric, categorical)
    assert sorted((f.name, f.dtype, tuple(f.shape)) for f in schema.features) == sorted(features)
    assert schema.label == "label"


FACTS = ColumnFacts((5, 1, 300), (0.0,), (9.0,))


@pytest.mark.parametrize("name, offsets, top, extra", [
    ("deepfm", [2, 7, 8], 2 + 306 - 1, {"target": "deepfm", "feature_size": 308, "numeric_fields": 2}),
    ("dlrm", [0, 0, 0], 299, {"target": "dlrm", "feature_size": 308, "numeric_fields": 2}),
])
def test_offsets_top_id_and_manifest_extra(name, offsets, top, extra):
    t = TARGETS[name]
    assert t.offsets(FACTS, 2).tolist() == offsets
    assert t.top_id(FACTS, 2) == top
    assert t.extra(FACTS, 2) == extra
    assert t.stored(t.schema(2, 3), top)[t.ids_feature] == "uint16"


def test_compact_rows_expand_to_each_targets_features():
    compact = {"label": np.array([1, 0], np.float32), "dense": np.array([[0.5, 1.5], [2.5, 3.5]], np.float32),
               "sparse": np.array([[2, 9], [4, 307]], np.uint32)}
    deepfm = TARGETS["deepfm"].expand(compact)
    assert deepfm["ids"].tolist() == [[0, 1, 2, 9], [0, 1, 4, 307]] and deepfm["ids"].dtype == np.int64
    assert deepfm["values"].tolist() == [[0.5, 1.5, 1.0, 1.0], [2.5, 3.5, 1.0, 1.0]]
    dlrm = TARGETS["dlrm"].expand(compact)
    assert sorted(dlrm) == ["dense", "label", "sparse"] and dlrm["sparse"].dtype == np.int64
    assert dlrm["sparse"].tolist() == [[2, 9], [4, 307]] and dlrm["dense"] is compact["dense"]


def test_an_unknown_target_names_the_valid_ones():
    with pytest.raises(ValueError, match=r"target must be one of \('deepfm', 'dlrm'\), got 'wide'"):
        target_named("wide")
    with pytest.raises(ValueError, match=r"target must be one of \('deepfm', 'dlrm'\), got 'wide'"):
        TabularOptions(target="wide")
