"""Simulated training steps of a known duration.

``simulated_step(ms)`` returns ``step_fn(batch)`` that keeps "the accelerator" busy for ``ms`` milliseconds:

* with a GPU visible to TensorFlow (``device="auto"`` or ``"gpu"``): a device-side loop of matrix
  multiplies whose iteration count is calibrated once so that one call takes ``ms``; it returns a scalar
  tensor, which ``measure`` pulls to the host to synchronize;
* otherwise (``"host"``): the host waits ``ms`` — mostly in ``time.sleep`` (which releases the GIL, so the
  tf.data producer threads keep running, as they would beside a real accelerator), then a short spin on
  ``perf_counter`` for the last fraction of a millisecond, for precision.

``host_burn(seconds)`` is the other kind of step: work on the trainer's own CPU (a Python step, host-side
augmentation, an optimizer on the CPU). It spins until the calling thread has used ``seconds`` of CPU time
(``time.thread_time``), so on a core shared with the input pipeline it takes longer than ``seconds`` of wall
time — the contention that offloading the input removes.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable

__all__ = ["simulated_step", "host_wait", "host_burn", "gpu_available", "SPIN_S"]

log = logging.getLogger(__name__)

SPIN_S = 0.0003  # last 0.3 ms spun (GIL held only that long), the rest slept

_DEVICES = ("auto", "host", "gpu")



def host_wait(seconds: float) -> None:
    """Wait ``seconds`` precisely: sleep (GIL released) then spin the remainder."""
    perf = time.perf_counter
    end = perf() + seconds
    rest = seconds - SPIN_S
    if rest > 0:
        time.sleep(rest)
    while perf() < end:
        pass


def host_burn(seconds: float) -> int:
    """Use ``seconds`` of this thread's CPU time (a busy loop holding the GIL); the loop's iterations."""
    clock = time.thread_time
    end = clock() + seconds
    n = 0
    while clock() < end:
        n += 1
    return n


def gpu_available() -> bool:
    """True when TensorFlow sees at least one GPU (imports TensorFlow)."""
    import tensorflow as tf

    return bool(tf.config.list_physical_devices("GPU"))


def simulated_step(ms: float, *, device: str = "auto") -> Callable[[Any], Any]:
    """A step function that occupies the accelerator (or, without one, the host) for ``ms`` milliseconds."""
    if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not ms >= 0:
        raise ValueError(f"simulated step time must be a number of milliseconds >= 0, got {ms!r}")
    if device not in _DEVICES:
        raise ValueError(f"device must be one of {_DEVICES}, got {device!r}")
    seconds = float(ms) / 1e3
    use_gpu = device == "gpu" or (device == "auto" and _gpu_if_tensorflow_sees_one())
    if use_gpu:
        return _gpu_step(seconds)

    def host_step(batch, _s=seconds):
        host_wait(_s)
        return None

    host_step.device = "host"  # type: ignore[attr-defined]
    host_step.ms = float(ms)  # type: ignore[attr-defined]
    return host_step


def _gpu_if_tensorflow_sees_one() -> bool:
    try:
        return gpu_available()
    except ImportError:
        return False


def _gpu_step(seconds: float) -> Callable[[Any], Any]:
    """Calibrated device-side loop (GPU only; exercised by the GPU tests)."""
    import tensorflow as tf

    if not tf.config.list_physical_devices("GPU"):
        raise ValueError("device='gpu' asked for, but TensorFlow sees no GPU")
    with tf.device("/GPU:0"):
        a = tf.random.stateless_normal((512, 512), seed=(1, 2)) * (1.0 / 512 ** 0.5)

    @tf.function(jit_compile=False)
    def spin(n):
        x = a
        for _ in tf.range(n):
            x = tf.math.tanh(tf.linalg.matmul(x, a))  # bounded values: no overflow to inf/NaN
        return tf.reduce_sum(x)

    def timed(n: int) -> float:
        with tf.device("/GPU:0"):
            t0 = time.perf_counter()
            spin(tf.constant(n, tf.int32)).numpy()
            return time.perf_counter() - t0

    timed(1)  # trace + warm up
    n = 16
    t = timed(n)
    while t < 0.02 and n < (1 << 24):  # grow until the timing is well above launch overhead
        n *= 4
        t = timed(n)
    base = timed(1)
    per_iter = max((t - base) / max(n - 1, 1), 1e-9)
    iters = max(1, int(round((seconds - base) / per_iter))) if seconds > base else 1
    # one refinement pass on the chosen count
    got = min(timed(iters) for _ in range(3))
    if got > 0:
        iters = max(1, int(round(iters * seconds / got)))
    log.info("simulated GPU step: %d matmul iterations ~ %.2f ms", iters, seconds * 1e3)
    n_t = tf.constant(iters, tf.int32)

    def gpu_step(batch):
        with tf.device("/GPU:0"):
            return spin(n_t)

    gpu_step.device = "gpu"  # type: ignore[attr-defined]
    gpu_step.ms = seconds * 1e3  # type: ignore[attr-defined]
    gpu_step.iterations = iters  # type: ignore[attr-defined]
    return gpu_step
