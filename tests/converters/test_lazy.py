"""converters.util.lazy: a package's lazy public names, in a fresh interpreter each (what was imported before
matters): a public name keeps its value when the submodule of the same name is imported first."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PACKAGES = ("pipeline", "sharding", "converters", "converters.libsvm", "converters.text", "converters.engines",
            "bench")

# in a fresh process: every public name that shares its name with a submodule of its package, looked up after
# that submodule was imported (``import pipeline.describe``), then ``from PACKAGE import NAME``
_PROBE = """
import importlib, json, pkgutil, sys, types
out = []
for pkg in sys.argv[1:]:
    m = importlib.import_module(pkg)
    subs = {i.name for i in pkgutil.iter_modules(m.__path__)}
    for name in sorted(set(m.__all__) & subs):
        importlib.import_module(f"{pkg}.{name}")
        ns = {}
        exec(f"from {pkg} import {name} as value", ns)
        out.append([pkg, name, isinstance(ns["value"], types.ModuleType), getattr(m, name) is ns["value"]])
print(json.dumps(out))
"""


def _probe(*packages: str) -> list:
    r = subprocess.run([sys.executable, "-c", _PROBE, *packages], cwd=ROOT, capture_output=True, text=True,
                       timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


def test_a_public_name_is_not_hidden_by_its_submodule():
    found = _probe(*PACKAGES)
    assert ["pipeline", "describe"] in [f[:2] for f in found]   # the case exists: the probe can fail
    assert [f for f in found if f[2] or not f[3]] == [], found


def test_the_submodule_itself_is_still_importable():
    code = ("import pipeline.describe, sys; from pipeline.describe import plan_graph; "
            "print(type(sys.modules['pipeline.describe']).__name__, callable(plan_graph))")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0 and r.stdout.split() == ["module", "True"], r.stderr[-2000:]


@pytest.mark.parametrize("name", ["nothing_here", "_lazy"])
def test_an_unknown_name_is_an_attribute_error_naming_it(name):
    import pipeline

    with pytest.raises(AttributeError, match=f"'pipeline' has no attribute '{name}'"):
        getattr(pipeline, name)
