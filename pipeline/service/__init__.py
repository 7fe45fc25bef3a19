"""tf.data service: dispatcher/worker processes and the trainer's side of offloading."""

__all__ = []
