"""Small real models for measuring against a real training step, on whatever device TensorFlow finds.

* ``deepfm(field_size)``: a DeepFM-style CTR model for LibSVM batches ``({"ids": int64[B, F],
  "values": float32[B, F]}, label float32[B])`` — first-order weights, the FM pairwise term and an MLP over
  hashed-id embeddings scaled by their values.
* ``tiny_lm(seq_len)``: a small causal transformer LM for text batches ``{"input_ids": int64[B, T + 1]}``
  (inputs = window[:, :-1], targets = window[:, 1:]).
* ``keras_step(model)``: ``step_fn(batch)`` doing one ``train_on_batch`` (which returns the loss on the host,
  so the step is synchronized).

TensorFlow and Keras are imported inside the functions.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

__all__ = [
    "deepfm",
    "tiny_lm",
    "keras_step",
    "split_libsvm",
    "split_lm",
    "deepfm_batch",
    "lm_batch",
]

DEFAULT_VOCAB = 1 << 16  # hashed-id buckets of the DeepFM embedding
LM_KEYS = ("input_ids", "tokens")


def deepfm(field_size: int = 39, *, vocab: int = DEFAULT_VOCAB, embed_dim: int = 8,
           hidden: tuple[int, ...] = (64, 32), ids_key: str = "ids", values_key: str = "values",
           learning_rate: float = 1e-3):
    """A compiled DeepFM-style Keras model (ids are hashed into ``vocab`` buckets by modulo)."""
    if field_size < 1:
        raise ValueError(f"field_size must be >= 1, got {field_size!r}")
    if vocab < 2:
        raise ValueError(f"vocab must be >= 2, got {vocab!r}")
    import keras
    from keras import layers, ops

    ids = keras.Input((field_size,), dtype="int64", name=ids_key)
    vals = keras.Input((field_size,), dtype="float32", name=values_key)
    h = ops.mod(ids, vocab)
    v = ops.expand_dims(vals, -1)                                 # B, F, 1
    emb = layers.Embedding(vocab, embed_dim, name="fm_embed")(h) * v  # B, F, k
    w = layers.Embedding(vocab, 1, name="fm_linear")(h)           # B, F, 1
    first = ops.sum(w * v, axis=1)                                # B, 1
    s = ops.sum(emb, axis=1)                                      # B, k
    second = 0.5 * ops.sum(s * s - ops.sum(emb * emb, axis=1), axis=1, keepdims=True)
    deep = layers.Flatten()(emb)
    for i, units in enumerate(hidden):
        deep = layers.Dense(units, activation="relu", name=f"deep_{i}")(deep)
    deep = layers.Dense(1, name="deep_out")(deep)
    prob = layers.Activation("sigmoid", name="ctr")(first + second + deep)
    model = keras.Model({ids_key: ids, values_key: vals}, prob, name="deepfm")
    model.compile(optimizer=keras.optimizers.Adam(learning_rate), loss="binary_crossentropy")
    return model


def tiny_lm(seq_len: int = 64, *, vocab: int = 256, d_model: int = 64, heads: int = 2, layers_: int = 2,
            ff: int = 128, learning_rate: float = 1e-3):
    """A compiled tiny causal transformer LM over ``seq_len`` tokens (byte-level vocab by default)."""
    if seq_len < 1:
        raise ValueError(f"seq_len must be >= 1, got {seq_len!r}")
    if d_model % heads:
        raise ValueError(f"d_model ({d_model}) must be divisible by heads ({heads})")
    import keras
    from keras import layers, ops

    tokens = keras.Input((seq_len,), dtype="int64", name="inputs")
    x = layers.Embedding(vocab, d_model, name="tok_embed")(tokens)
    positions = ops.arange(seq_len)
    x = x + layers.Embedding(seq_len, d_model, name="pos_embed")(positions)
    for i in range(layers_):
        a = layers.LayerNormalization(name=f"ln1_{i}")(x)
        a = layers.MultiHeadAttention(heads, d_model // heads, name=f"attn_{i}")(a, a, use_causal_mask=True)
        x = x + a
        f = layers.LayerNormalization(name=f"ln2_{i}")(x)
        f = layers.Dense(ff, activation="gelu", name=f"ff1_{i}")(f)
        x = x + layers.Dense(d_model, name=f"ff2_{i}")(f)
    x = layers.LayerNormalization(name="ln_f")(x)
    logits = layers.Dense(vocab, name="lm_head")(x)
    model = keras.Model(tokens, logits, name="tiny_lm")
    model.compile(optimizer=keras.optimizers.Adam(learning_rate),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def split_libsvm(batch, *, label: str = "label") -> tuple[Any, Any]:
    """``(features, label)`` from a pipeline batch: a 2-tuple is taken as is; a dict loses its label key."""
    if isinstance(batch, (tuple, list)) and len(batch) == 2:
        return batch[0], batch[1]
    if isinstance(batch, dict) and label in batch:
        feats = {k: v for k, v in batch.items() if k != label}
        return feats, batch[label]
    raise ValueError(f"cannot split a LibSVM batch into (features, label): got {type(batch).__name__}"
                     f"{sorted(batch) if isinstance(batch, dict) else ''}")


def split_lm(batch) -> tuple[Any, Any]:
    """``(inputs, targets)`` = ``(window[:, :-1], window[:, 1:])`` from a text batch."""
    x = batch
    if isinstance(x, (tuple, list)) and len(x) == 2 and isinstance(x[0], dict):
        x = x[0]
    if isinstance(x, dict):
        for key in LM_KEYS:
            if key in x:
                x = x[key]
                break
        else:
            raise ValueError(f"text batch has none of the keys {LM_KEYS}: {sorted(x)}")
    return x[:, :-1], x[:, 1:]


def keras_step(model, *, split: Callable[[Any], tuple[Any, Any]] | None = None) -> Callable[[Any], Any]:
    """``step_fn(batch)`` running one ``model.train_on_batch`` and returning the loss (a host float).

    ``split`` turns a batch into ``(x, y)``; by default ``split_lm`` for a model whose input is ``inputs``
    (``tiny_lm``), else ``split_libsvm``, keeping only the features the model takes.
    """
    input_names = [getattr(t, "name", None) for t in getattr(model, "inputs", [])]
    if split is None:
        split = split_lm if input_names == ["inputs"] else split_libsvm
    wanted = {n for n in input_names if n}

    def step(batch):
        x, y = split(batch)
        if isinstance(x, dict) and wanted:
            x = {k: v for k, v in x.items() if k in wanted}
        return model.train_on_batch(x, y)

    step.model = model  # type: ignore[attr-defined]
    return step


def deepfm_batch(batch_size: int, field_size: int = 39, *, seed: int = 0) -> tuple[dict, np.ndarray]:
    """A synthetic Criteo-like ``(features, label)`` batch as numpy arrays."""
    from converters.libsvm.synthetic import criteo_arrays

    a = criteo_arrays(batch_size, field_size=field_size, seed=seed)
    return {"ids": a["ids"], "values": a["values"]}, a["label"]


def lm_batch(batch_size: int, seq_len: int = 64, *, vocab: int = 256, seed: int = 0) -> dict:
    """A synthetic text batch ``{"input_ids": int64[B, seq_len + 1]}``."""
    rng = np.random.default_rng(seed)
    return {"input_ids": rng.integers(0, vocab, (batch_size, seq_len + 1), dtype=np.int64)}
