"""Tests that hold on to a Ctrl-C, run by ``test_ctrl_c.py`` in a ``pytest -n N --dist each`` of its own (the suite does not
collect this file: its name does not start with ``test_``). A holding test starts a child in a session of its
own (no Ctrl-C reaches it), writes ``<its pid> <the child's pid>`` to ``<name>.started`` in
``$TFPIPE_TEST_INTERRUPT_DIR``, then waits long past any bound the test checks."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = os.environ.get("TFPIPE_TEST_INTERRUPT_DIR")
pytestmark = pytest.mark.skipif(not HERE, reason="run by tests/test_ctrl_c.py only")
LONG = 300.0


def _hold(name: str) -> None:
    child = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({LONG})"], start_new_session=True)
    (Path(HERE) / f"{name}.tmp").write_text(f"{os.getpid()} {child.pid}")
    os.rename(Path(HERE) / f"{name}.tmp", Path(HERE) / f"{name}.started")
    end = time.monotonic() + LONG
    while time.monotonic() < end:
        try:
            time.sleep(0.1)
        except KeyboardInterrupt:
            pass


def test_holds_the_interrupt():
    """Run by every worker (``--dist each``): gw0 swallows the interrupt as the CLI's ``main()`` called in-process
    does (it becomes a return value, the test goes on); the others ignore SIGINT in a handler of their own."""
    if os.environ.get("PYTEST_XDIST_WORKER") == "gw0":
        _hold("swallows")
        return
    previous = signal.signal(signal.SIGINT, lambda *a: None)
    try:
        _hold(f"ignores-{os.environ.get('PYTEST_XDIST_WORKER')}")
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("k", range(5))
def test_more(k):
    """What a worker would go on to run."""
    time.sleep(0.1)
