"""Many ``tfpipe`` command lines run one after another in one fresh Python process, each as ``main(argv)`` with
its own stdout and stderr, the way a user's ``tfpipe`` runs them: TensorFlow is not loaded there, so a
conversion's parser workers start by ``fork`` (in a test process that has imported TensorFlow every conversion
would start a ``forkserver`` pool, seconds each). One process start is paid for the whole list."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_SCRIPT = """
import contextlib, io, json, logging, sys, traceback
from converters.cli import main
argvs, results = json.loads(sys.stdin.read()), []
for argv in argvs:
    for h in logging.root.handlers[:]:  # main's logging.basicConfig writes to this command's stderr
        logging.root.removeHandler(h)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code
        except BaseException:
            code = None
            traceback.print_exc()
    results.append({"code": code, "out": out.getvalue(), "err": err.getvalue()})
with open(sys.argv[1], "w") as f:
    json.dump(results, f)
"""


@dataclass(frozen=True)
class Run:
    code: int | None  # main's return value (a usage error's SystemExit code; None if it raised)
    out: str
    err: str


def run_commands(argvs: list[list[str]], results: str, timeout: float = 600) -> list[Run]:
    """``main(argv)`` for each of ``argvs``, in order, in one new process; what each returned and printed
    (``results``: the file where the process leaves them)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, "-c", _SCRIPT, results], input=json.dumps(argvs), env=env,
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    with open(results, encoding="utf-8") as f:
        return [Run(**r) for r in json.load(f)]
