"""Python iteration of a finished graph without tf.nest's generic packing.

A loop over a dataset in Python (``for batch in ds``, a custom training loop) pays, per element, for the
``IteratorGetNext`` op and for turning its flat list of tensors back into the element's structure. For a
``(features, label)`` batch of three tensors that second part is TensorFlow's generic ``tf.nest`` packing (a
runtime-protocol check per container, a shape check per tensor) and costs more than the op: about 90 µs of CPU
per batch on a 2-core host, against about 65 µs for the whole step of a single tensor.

:func:`packed_iteration` gives the same dataset (the same variant tensor, element spec and options) whose eager
iterator packs each element with a function built once from the element spec (:func:`packer`): plain dicts
(keys in the spec's order, tensors in tf.nest's sorted-key order) and tuples of dense tensors. Inside a
``tf.function`` (Keras ``fit``), for any other structure, or where this TensorFlow lacks the internals it uses
(``OwnedIterator._next_internal``, ``UnaryUnchangedStructureDataset``), iteration is TensorFlow's own. The
iterator is an ``OwnedIterator``: checkpoints, ``get_next_as_optional`` and tracing work as before; a dataset
derived from it (``ds.map(...)``) is a plain tf.data dataset.
"""
from __future__ import annotations

import logging
from typing import Any, Callable

__all__ = ["packer", "packed_iteration"]

log = logging.getLogger(__name__)

_CLASSES: Any = None      # (dataset class, iterator class) once built; False where TensorFlow lacks the internals


class _Unsupported(Exception):
    pass


def packer(element_spec) -> Callable[[list], Any] | None:
    """A function from the flat list of an element's tensors (tf.nest's order) to the element, or None when
    the element is a single tensor (TensorFlow's own path is direct) or holds anything but plain dicts, tuples
    and dense ``TensorSpec`` leaves."""
    import tensorflow as tf

    count = [0]

    def build(s):
        if type(s) is tf.TensorSpec:
            i = count[0]
            count[0] += 1
            return lambda flat: flat[i]
        if type(s) is dict:
            try:
                subs = {k: build(s[k]) for k in sorted(s)}     # tf.nest flattens a dict in sorted-key order
            except TypeError:
                raise _Unsupported from None
            order = list(s)
            return lambda flat: {k: subs[k](flat) for k in order}
        if type(s) is tuple:
            parts = [build(x) for x in s]
            return lambda flat: tuple(p(flat) for p in parts)
        raise _Unsupported

    if type(element_spec) is tf.TensorSpec:
        return None
    try:
        return build(element_spec)
    except _Unsupported:
        return None


def _classes():
    """The packed dataset and iterator classes, built once (TensorFlow imported lazily); False where this
    TensorFlow lacks what they rely on."""
    global _CLASSES
    if _CLASSES is not None:
        return _CLASSES
    try:
        from tensorflow.python.data.ops import dataset_ops, iterator_ops
        from tensorflow.python.eager import context
        from tensorflow.python.framework import ops
        from tensorflow.python.ops import gen_dataset_ops

        base_ds, base_it = dataset_ops.UnaryUnchangedStructureDataset, iterator_ops.OwnedIterator
        needed = (base_it._next_internal, context.execution_mode, context.SYNC, gen_dataset_ops.iterator_get_next,
                  ops.colocate_with)
    except (ImportError, AttributeError) as e:
        log.debug("packed iteration unavailable in this TensorFlow (%s): tf.data's own is used", e)
        _CLASSES = False
        return _CLASSES
    del needed

    class PackedIterator(base_it):
        def __init__(self, dataset, pack):
            self._tfpipe_pack = pack
            super().__init__(dataset)

        def _next_internal(self):
            if not context.executing_eagerly():
                return super()._next_internal()
            with context.execution_mode(context.SYNC):    # as OwnedIterator: the end comes as an error status
                flat = gen_dataset_ops.iterator_get_next(self._iterator_resource,
                                                         output_types=self._flat_output_types,
                                                         output_shapes=self._flat_output_shapes)
            return self._tfpipe_pack(flat)   # the op checked the shapes against the spec: no set_shape

    class PackedDataset(base_ds):
        def __init__(self, input_dataset, pack):
            self._input_dataset = input_dataset
            self._tfpipe_pack = pack
            super().__init__(input_dataset, input_dataset._variant_tensor)

        def __iter__(self):
            if context.executing_eagerly():
                with ops.colocate_with(self._variant_tensor):
                    return PackedIterator(self, self._tfpipe_pack)
            return super().__iter__()

    _CLASSES = (PackedDataset, PackedIterator)
    return _CLASSES


def packed_iteration(ds):
    """``ds`` whose eager Python iteration packs elements with :func:`packer` (see the module docstring); ``ds``
    itself where its element is a single tensor or another structure, or the internals are missing."""
    pack = packer(ds.element_spec)
    classes = _classes() if pack is not None else False
    if not classes:
        return ds
    try:
        return classes[0](ds, pack)
    except (AttributeError, TypeError) as e:      # a TensorFlow whose dataset classes differ
        log.debug("packed iteration unavailable for this dataset (%s): tf.data's own is used", e)
        return ds
