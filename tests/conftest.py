import os
import subprocess

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")


@pytest.fixture
def mounted():
    """``mount(args, target)``: mount (``mount ARGS TARGET``) for the test, unmounted after it; skips the test
    with the reason where the machine does not allow mounts."""
    done = []

    def mount(args: list[str], target) -> None:
        r = subprocess.run(["mount", *args, str(target)], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount here ({r.stderr.strip() or 'mount failed'}): needs root on a machine that "
                        "allows mounts")
        done.append(target)
    yield mount
    for target in reversed(done):
        subprocess.run(["umount", "-l", str(target)], check=False)
