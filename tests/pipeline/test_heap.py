"""pipeline.graph.heap: with the thresholds set, memory freed in large chunks is reused instead of handed back
to the kernel and faulted in again (minor page faults counted in a fresh process); the opt-out and a process's
own malloc settings are respected."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")

# 4 chunks of 8 MiB allocated, written and freed, 6 times: after the first, the page faults of the other 5
_CHURN = r"""
import ctypes, json, resource, sys
from pipeline.graph.heap import keep_freed_memory
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
set_now = keep_freed_memory() if sys.argv[1] == "keep" else None
def churn():
    chunks = [libc.malloc(8 << 20) for _ in range(4)]
    for c in chunks:
        ctypes.memset(c, 1, 8 << 20)
    for c in chunks:
        libc.free(c)
churn()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    churn()
print(json.dumps({"faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before, "set": set_now}))
"""


def _run(mode: str, **env) -> dict:
    full = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    full.pop("TFPIPE_MALLOC_TUNING", None)
    full.update(env)
    out = subprocess.run([sys.executable, "-c", _CHURN, mode], env=full, capture_output=True, text=True,
                         timeout=60, cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def _glibc() -> bool:
    import ctypes

    try:
        return bool(ctypes.CDLL(None).gnu_get_libc_version)
    except (OSError, AttributeError):
        return False


@pytest.mark.skipif(not _glibc(), reason="glibc's malloc")
def test_freed_chunks_are_reused_not_faulted_in_again():
    pages = 5 * 4 * (8 << 20) // 4096           # every page of every chunk, had it been handed back each time
    default, kept = _run("default"), _run("keep")
    assert kept["set"] is True
    assert default["faults"] > pages // 2, default       # glibc's defaults hand the pages back
    assert kept["faults"] < pages // 20, kept           # kept: reused


@pytest.mark.skipif(not _glibc(), reason="glibc's malloc")
@pytest.mark.parametrize("env", [{"TFPIPE_MALLOC_TUNING": "0"}, {"MALLOC_TRIM_THRESHOLD_": "131072"},
                                 {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=131072"}],
                         ids=["opt_out", "own_variable", "own_tunables"])
def test_opt_out_and_the_process_own_settings_are_left_alone(env):
    r = _run("keep", **env)
    assert r["set"] is False
