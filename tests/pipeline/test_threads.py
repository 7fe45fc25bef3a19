"""configure_threads: defaults from SM_NUM_CPUS / cores, applied before TF starts, clear error after."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pipeline.threads import KMP_AFFINITY_DEFAULT, ThreadConfig, default_threads

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("cpus,args,want", [
    (2, {}, (2, 1, 1)),
    (8, {}, (8, 4, 4)),
    (1, {}, (1, 1, 1)),
    (96, {"inter": 2}, (96, 2, 48)),
    (8, {"intra": 4, "omp": 3}, (4, 4, 3)),
])
def test_default_threads_table(cpus, args, want):
    cfg = default_threads(cpus=cpus, **args)
    assert (cfg.intra, cfg.inter, cfg.omp) == want


def test_sm_num_cpus_wins(monkeypatch):
    monkeypatch.setenv("SM_NUM_CPUS", "16")
    cfg = default_threads()
    assert (cfg.intra, cfg.inter, cfg.omp) == (16, 8, 8)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_bad_values_rejected(bad):
    with pytest.raises(ValueError, match=repr(bad)):
        ThreadConfig(intra=bad, inter=1, omp=1, kmp_affinity="")


def _run(code: str, env=None) -> subprocess.CompletedProcess:
    e = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **(env or {})}
    e.pop("KMP_AFFINITY", None)
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=e, capture_output=True, text=True,
                          timeout=120)


def test_configure_before_tf_runs_ops_applies_everything():
    code = (
        "import json, os\n"
        "from pipeline import configure_threads\n"
        "cfg = configure_threads(intra=3, inter=2, omp=2)\n"
        "import tensorflow as tf\n"
        "tf.constant(1) + 1\n"
        "print(json.dumps([tf.config.threading.get_intra_op_parallelism_threads(),\n"
        "                  tf.config.threading.get_inter_op_parallelism_threads(),\n"
        "                  os.environ['OMP_NUM_THREADS'], os.environ['KMP_AFFINITY']]))\n")
    r = _run(code)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1]) == [3, 2, "2", KMP_AFFINITY_DEFAULT]


def test_configure_after_tf_ran_ops_is_a_clear_error():
    code = (
        "import tensorflow as tf\n"
        "tf.constant(1) + 1\n"
        "from converters.util.errors import TfpipeError\n"
        "from pipeline import configure_threads\n"
        "try:\n"
        "    configure_threads(intra=3, inter=2)\n"
        "except TfpipeError as e:\n"
        "    print('ERR', e)\n")
    r = _run(code)
    assert r.returncode == 0, r.stderr
    assert "ERR configure_threads must be called before TensorFlow runs its first op" in r.stdout
