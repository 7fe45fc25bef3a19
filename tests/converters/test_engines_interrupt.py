"""``converters.engines.interrupt``: a signal the kernel gives to another thread still stops the run."""
from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

# The main thread waits on an event with no timeout (as Beam's driver waits for a bundle's future) and the
# signal goes to another thread, which does not interrupt that wait: only the watcher's copy of the signal, sent
# to the main thread, does; the handler then stops the "workers" (sets the event) and raises.
_CHILD = textwrap.dedent("""
    import signal, sys, threading
    from converters.engines.interrupt import interruptible

    sig = int(sys.argv[1])
    released = threading.Event()
    started = threading.Event()

    def other():
        started.set()
        threading.Event().wait()

    t = threading.Thread(target=other, daemon=True)
    t.start()
    started.wait()
    try:
        with interruptible() as got:
            got.on_signal.append(released.set)
            signal.pthread_kill(t.ident, sig)
            released.wait()
            while True:  # the handler runs between two bytecodes
                pass
    except KeyboardInterrupt:
        print("KeyboardInterrupt", signal.set_wakeup_fd(-1))
    except SystemExit as e:
        print("SystemExit", e.code, signal.set_wakeup_fd(-1))
""")


@pytest.mark.parametrize("sig, expected", [
    (signal.SIGINT, "KeyboardInterrupt -1"),
    (signal.SIGTERM, "SystemExit 143 -1"),
])
def test_a_signal_taken_by_another_thread_wakes_a_main_thread_that_waits(sig, expected):
    r = subprocess.run([sys.executable, "-c", _CHILD, str(int(sig))], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == expected  # and the wake-up fd is given back


def test_a_wakeup_fd_in_use_is_left_alone():
    code = textwrap.dedent("""
        import os, signal
        from converters.engines.interrupt import interruptible
        r, w = os.pipe(); os.set_blocking(w, False)
        signal.set_wakeup_fd(w)
        with interruptible():
            inside = signal.set_wakeup_fd(w)
        print(inside == w, signal.set_wakeup_fd(-1) == w)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "True"]


def test_a_clean_up_stuck_after_the_signal_is_ended_by_the_deadline(tmp_path):
    """The handler's exception unwinds into a clean-up that never ends (as Beam's driver joining a lost worker's
    thread): ``grace`` seconds later the ``on_stuck`` callbacks run, the CLI's line is written, exit 143."""
    marker = tmp_path / "cleaned"
    code = textwrap.dedent(f"""
        import os, signal, threading
        from converters.engines.interrupt import interruptible, set_exit_lines
        set_exit_lines({{signal.SIGTERM: "tfpipe: terminated"}})
        with interruptible(grace=0.5) as got:
            got.on_stuck.append(lambda: open({str(marker)!r}, "w").close())
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                threading.Event().wait(30)
            finally:
                threading.Event().wait()  # stuck
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stderr) == (143, "tfpipe: terminated\n")
    assert marker.exists()


def test_a_caller_that_handles_the_interrupt_goes_on():
    """The deadline ends with the block: a library caller (a notebook) that catches the KeyboardInterrupt lives."""
    code = textwrap.dedent("""
        import os, signal, threading
        from converters.engines.interrupt import interruptible
        try:
            with interruptible(grace=0.2) as got:
                got.on_stuck.append(lambda: print("stuck"))
                os.kill(os.getpid(), signal.SIGINT)
                threading.Event().wait(30)
        except KeyboardInterrupt:
            pass
        threading.Event().wait(1.0)
        print("alive")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout) == (0, "alive\n"), r.stderr


@pytest.mark.parametrize("sig, code, line", [(signal.SIGINT, 130, "tfpipe: interrupted"),
                                             (signal.SIGTERM, 143, "tfpipe: terminated")])
def test_a_signal_dropped_inside_a_callback_is_not_reported_and_the_deadline_ends_the_run(tmp_path, sig, code,
                                                                                           line):
    """The handler's exception raised inside a ctypes callback (as in numba's compiler) is dropped by Python
    with an "Exception ignored" report: the block prints nothing of it, and the run ends by the deadline with
    the CLI's one line, its temporary files removed (``on_stuck``)."""
    marker = tmp_path / "cleaned"
    code_ = textwrap.dedent(f"""
        import ctypes, os, signal, sys, time
        from converters.engines.interrupt import interruptible, set_exit_lines
        set_exit_lines({{signal.SIGINT: "tfpipe: interrupted", signal.SIGTERM: "tfpipe: terminated"}})

        @ctypes.CFUNCTYPE(None)
        def callback():
            os.kill(os.getpid(), int(sys.argv[1]))
            for _ in range(1000):  # the handler runs between two of these bytecodes
                time.sleep(0.001)

        with interruptible(grace=0.5) as got:
            got.on_stuck.append(lambda: open({str(marker)!r}, "w").close())
            callback()
            print("the run went on")
            time.sleep(30)
        print("not ended by the deadline")
    """)
    r = subprocess.run([sys.executable, "-c", code_, str(int(sig))], capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout, r.stderr) == (code, "the run went on\n", line + "\n")
    assert marker.exists()
