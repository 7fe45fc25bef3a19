"""converters.storage.local: a directory's names are read in one look, so a directory that another instance
creates meanwhile (Processing instances sharing a local output) is either absent (no names) or listed, never
"exists and is not a directory"; a file where the directory should be is refused in one line."""
from __future__ import annotations

import os
import threading

import pytest

from converters.storage import LocalStorage
from converters.util.errors import TfpipeError


@pytest.mark.parametrize("make, want", [
    (lambda p: None, []),
    (lambda p: os.mkdir(p), []),
    (lambda p: (os.mkdir(p), open(os.path.join(p, "b"), "w").close(), open(os.path.join(p, "a"), "w").close()),
     ["a", "b"]),
])
def test_list_reads_what_is_there(tmp_path, make, want):
    make(str(tmp_path / "out"))
    assert LocalStorage(tmp_path / "out").list() == want


def test_a_file_in_the_directorys_place_is_one_line(tmp_path):
    (tmp_path / "out").write_text("x")
    with pytest.raises(TfpipeError, match=r"^output .*out exists and is not a directory$"):
        LocalStorage(tmp_path / "out").list()


def test_a_directory_made_and_removed_meanwhile_is_never_taken_for_a_file(tmp_path):
    out, stop, seen = str(tmp_path / "out"), threading.Event(), []

    def churn():
        while not stop.is_set():
            os.mkdir(out)
            os.rmdir(out)

    t = threading.Thread(target=churn)
    t.start()
    try:
        st = LocalStorage(out)
        for _ in range(20_000):
            seen.append(st.list())
    finally:
        stop.set()
        t.join()
    assert seen.count([]) == len(seen)
