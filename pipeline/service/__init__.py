"""tf.data service: the dispatcher and worker servers, their CLI, and the trainer's side of offloading."""

__all__ = []
