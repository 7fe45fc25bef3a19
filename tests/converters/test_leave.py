"""``converters.cli.leave``: the console script ends with the command's code, atexit handlers run and output
flushed, the interpreter's module teardown skipped, and the ordinary exit while a waited-for thread runs."""
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(code: str, tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "MARKS": str(tmp_path)})


PRELUDE = """
    import atexit, os, sys, threading, time
    from converters.cli.leave import leave
    marks = os.environ["MARKS"]

    def mark(name):
        open(os.path.join(marks, name), "w").close()

    class Teardown:                      # finalized only by the interpreter's teardown of this module
        def __del__(self, _open=open, _path=os.path.join(marks, "teardown")):
            _open(_path, "w").close()

    keep = Teardown()
    atexit.register(mark, "atexit")
    sys.stdout.write("no newline, still buffered")
"""


@pytest.mark.parametrize("code", [0, 3, 143])
def test_exit_code_atexit_and_flushed_output_without_teardown(tmp_path, code):
    r = _run(PRELUDE + f"    leave({code})\n", tmp_path)
    assert r.returncode == code, r.stderr
    assert r.stdout == "no newline, still buffered"
    assert sorted(os.listdir(tmp_path)) == ["atexit"]          # atexit ran; the module teardown did not


def test_ordinary_exit_while_a_thread_is_waited_for(tmp_path):
    r = _run(PRELUDE + """
    def late():
        time.sleep(0.5)
        mark("thread")

    threading.Thread(target=late).start()
    leave(5)
""", tmp_path)
    assert r.returncode == 5, r.stderr
    assert r.stdout == "no newline, still buffered"
    assert sorted(os.listdir(tmp_path)) == ["atexit", "teardown", "thread"]


@pytest.mark.parametrize("hook", ["setprofile", "settrace"])
def test_ordinary_exit_under_a_profiler_or_tracer(tmp_path, hook):
    """``python3 -m cProfile`` and coverage write their reports after the command returns: the ordinary exit."""
    r = _run(PRELUDE + f"""
    sys.{hook}(lambda *a: None)
    leave(4)
""", tmp_path)
    assert r.returncode == 4, r.stderr
    assert sorted(os.listdir(tmp_path)) == ["atexit", "teardown"]


def test_cprofile_of_the_module_entry_point_writes_its_report(tmp_path):
    out = tmp_path / "cli.prof"
    r = subprocess.run([sys.executable, "-m", "cProfile", "-o", str(out), "-m", "converters.cli", "inspect",
                        str(tmp_path / "no-set")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "tfpipe: error: no manifest at" in r.stderr       # (cProfile itself ends with 0 whatever the code)
    assert out.stat().st_size > 0


def test_daemon_threads_do_not_hold_the_exit(tmp_path):
    r = _run(PRELUDE + """
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
    leave(0)
""", tmp_path)
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(tmp_path)) == ["atexit"]


@pytest.mark.parametrize("argv, code, stream, text", [
    (["--version"], 0, "stdout", "tfpipe "),
    (["inspect", "/nonexistent-set"], 2, "stderr", "tfpipe: error: no manifest at /nonexistent-set"),
])
def test_module_entry_point_ends_with_the_commands_code(argv, code, stream, text):
    r = subprocess.run([sys.executable, "-m", "converters.cli", *argv], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == code, r.stderr
    assert text in getattr(r, stream)


def test_closed_stdout_is_not_an_error(tmp_path):
    """The reader of the output went away (``tfpipe ... | head -1``): the code stands, no traceback."""
    r = subprocess.run(f"{sys.executable} -m converters.cli --help | head -c 10", shell=True, cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0
    assert "Traceback" not in r.stderr and "Exception ignored" not in r.stderr, r.stderr
