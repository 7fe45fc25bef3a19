"""GPU utilization samples through NVML (``pynvml`` from the optional ``nvidia-ml-py`` package).

SageMaker Debugger samples every 500 ms; so does ``GpuSampler``. Utilization swinging between 0 and 100 %
while the step waits for input points at an input bottleneck. Without ``pynvml`` or without an NVIDIA
GPU the sampler is a no-op whose ``stop()`` returns no samples and a note saying why.
"""
from __future__ import annotations

import logging
import threading

__all__ = ["nvml_status", "GpuSampler", "DEFAULT_INTERVAL_S"]

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 0.5  # SageMaker Debugger's system-metrics period


def nvml_status() -> tuple[bool, str]:
    """``(True, "N GPU(s): name")`` when NVML can be used now, else ``(False, reason)``."""
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return False, "not available: pynvml not installed (pip install nvidia-ml-py)"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return False, f"not available: NVML could not start ({exc})"
    try:
        count = pynvml.nvmlDeviceGetCount()
        if count == 0:
            return False, "not available: no NVIDIA GPU"
        name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
        if isinstance(name, bytes):
            name = name.decode()
        return True, f"{count} GPU(s): {name}"
    except Exception as exc:
        return False, f"not available: NVML query failed ({exc})"
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


class GpuSampler:
    """Samples GPU utilization (percent, averaged over the chosen devices) every ``interval_s`` seconds
    on a daemon thread between ``start()`` and ``stop()``."""

    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S, device_indices: tuple[int, ...] | None = None):
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s!r}")
        self.interval_s = float(interval_s)
        self.device_indices = device_indices
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._samples: list[float] = []
        self._note = ""
        self.available, self._status = nvml_status()

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("GpuSampler already started")
        self._samples = []
        self._stop.clear()
        if not self.available:
            self._note = self._status
            return
        self._thread = threading.Thread(target=self._run, name="tfpipe-nvml", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import pynvml

        try:
            pynvml.nvmlInit()
            n = pynvml.nvmlDeviceGetCount()
            idx = self.device_indices if self.device_indices is not None else tuple(range(n))
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in idx]
            self._note = f"NVML, {len(handles)} GPU(s), every {self.interval_s * 1e3:.0f} ms"
            while True:
                util = [pynvml.nvmlDeviceGetUtilizationRates(h).gpu for h in handles]
                self._samples.append(float(sum(util)) / len(util))
                if self._stop.wait(self.interval_s):
                    break
        except Exception as exc:
            self._note = f"NVML sampling failed: {exc}"
            log.warning("NVML sampling failed: %s", exc)
        finally:
            try:
                pynvml.nvmlShutdown()
            except Exception:
                pass

    def stop(self) -> tuple[tuple[float, ...], str]:
        """Stop sampling; returns ``(samples, note)``."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5 * self.interval_s + 1)
            self._thread = None
        return tuple(self._samples), self._note
