"""Shared by the converter tests: read a whole shard set back through real TensorFlow."""
from __future__ import annotations

import numpy as np

_DTYPES = {"int64": np.int64, "float32": np.float32}


def read_back(manifest, batch_size: int = 512) -> dict[str, np.ndarray]:
    """Every record of ``manifest``'s shards, in order, parsed by ``tf.io.parse_example`` with
    ``FixedLenFeature`` specs built from the manifest's schema: one array per feature."""
    import tensorflow as tf

    feats = {f.name: tf.io.FixedLenFeature(list(f.shape), getattr(tf, f.dtype)) for f in manifest.schema.features}
    ds = tf.data.TFRecordDataset(manifest.shard_paths(), compression_type="GZIP" if manifest.compression else "")
    ds = ds.batch(batch_size).map(lambda x: tf.io.parse_example(x, feats))
    out = {k: [] for k in feats}
    for batch in ds:
        for k in feats:
            out[k].append(batch[k].numpy())
    empty = {f.name: np.zeros((0, *f.shape), _DTYPES[f.dtype]) for f in manifest.schema.features}
    return {k: np.concatenate(v) if v else empty[k] for k, v in out.items()}
