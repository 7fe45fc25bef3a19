"""converters.util.outfile: the one writer of a command's output files keeps the path what it was — a link stays
a link (its target gets the bytes), a device or FIFO is written to directly, a directory is refused — and every
failure is one line naming the user's path; ``check_output`` refuses a bad path before any work."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading

import pytest

from converters.util.errors import OutputError
from converters.util.outfile import check_output, write_output


def _char_device_like(tmp_path, source: str):
    """A character device node with ``source``'s major/minor (``os.mknod``; needs root or CAP_MKNOD)."""
    rdev = os.stat(source).st_rdev
    node = tmp_path / os.path.basename(source)
    try:
        os.mknod(node, 0o666 | stat.S_IFCHR, rdev)
    except PermissionError:
        pytest.skip("creating a device node needs CAP_MKNOD")
    return node


def test_a_regular_file_is_replaced_atomically_and_keeps_its_permissions(tmp_path):
    out = tmp_path / "r.json"
    out.write_text("old")
    out.chmod(0o600)
    write_output(str(out), b"new\n")
    assert out.read_bytes() == b"new\n"
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]  # no temporary name left


def test_a_new_file_is_created(tmp_path):
    write_output(str(tmp_path / "new.json"), b"{}")
    assert (tmp_path / "new.json").read_bytes() == b"{}"


@pytest.mark.parametrize("target_exists", [True, False])
def test_a_symlink_stays_a_symlink_and_its_target_gets_the_bytes(tmp_path, target_exists):
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "report.json"
    if target_exists:
        target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    check_output(str(link))
    write_output(str(link), b"through the link")
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_bytes() == b"through the link"
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["report.json"]


def test_a_copy_of_dev_full_gives_one_line_naming_the_path_and_stays_a_device(tmp_path):
    node = _char_device_like(tmp_path, "/dev/full")
    check_output(str(node))  # writable: the failure comes at the write
    with pytest.raises(OutputError) as exc:
        write_output(str(node), b"x" * 100, what="--json-out")
    msg = str(exc.value)
    assert msg == f"--json-out {node}: No space left on device", msg
    assert stat.S_ISCHR(os.lstat(node).st_mode)


def test_a_copy_of_dev_null_is_written_to_not_replaced(tmp_path):
    node = _char_device_like(tmp_path, "/dev/null")
    write_output(str(node), b"discarded")
    assert stat.S_ISCHR(os.lstat(node).st_mode) and os.lstat(node).st_rdev == os.stat("/dev/null").st_rdev


def test_a_fifo_is_written_directly_to_its_reader(tmp_path):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()))
    reader.start()
    data = b"{\"records\": 1}\n" * 10_000  # more than a pipe buffer
    write_output(str(fifo), data)
    reader.join(timeout=30)
    assert not reader.is_alive() and got == [data]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.parametrize("check", [check_output, lambda p, what: write_output(p, b"x", what=what)],
                         ids=["check_output", "write_output"])
def test_a_directory_is_refused_with_one_line(tmp_path, check):
    d = tmp_path / "results"
    d.mkdir()
    with pytest.raises(OutputError) as exc:
        check(str(d), "--markdown")
    assert str(exc.value) == f"--markdown {d}: is a directory; give a file name"
    assert d.is_dir() and list(d.iterdir()) == []


@pytest.mark.parametrize("parent, expected", [
    ("missing", "its directory {t}/missing does not exist"),
    ("file", "Not a directory"),  # a file where the directory should be
    ("link-to-nowhere", "its directory {t}/nowhere does not exist"),  # a dangling link: its target's directory
])
def test_check_refuses_a_path_whose_directory_cannot_take_it(tmp_path, parent, expected):
    (tmp_path / "file").write_text("")
    (tmp_path / "link-to-nowhere").mkdir()
    (tmp_path / "link-to-nowhere" / "x.json").symlink_to(tmp_path / "nowhere" / "x.json")
    path = tmp_path / parent / "x.json"
    expected = expected.format(t=tmp_path)
    with pytest.raises(OutputError) as exc:
        check_output(str(path), "--json-out")
    msg = str(exc.value)
    assert msg.startswith(f"--json-out {path}: ") and expected in msg and "\n" not in msg, msg


def test_a_stream_reached_through_proc_fd_is_appended_to_not_replaced(tmp_path):
    """``/dev/stdout`` when stdout is a file: a link to ``/proc/self/fd/N``; the open file must not be swapped
    for a new one (the shell's descriptor would then point at a deleted file)."""
    log = tmp_path / "stdout.txt"
    with open(log, "ab") as f:
        f.write(b"table\n")
        f.flush()
        stdout = tmp_path / "stdout"
        stdout.symlink_to(f"/proc/self/fd/{f.fileno()}")
        inode = os.stat(log).st_ino
        write_output(str(stdout), b"json\n")
    assert log.read_bytes() == b"table\njson\n" and os.stat(log).st_ino == inode
    assert stdout.is_symlink()


def test_dev_stdout_is_written_through_and_stays_a_link():
    code = "from converters.util.outfile import write_output; write_output('/dev/stdout', b'to stdout')"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"to stdout"
    assert os.path.islink("/dev/stdout")


def test_a_device_is_refused_where_the_output_is_read_back(tmp_path):
    fifo = tmp_path / "tok.fifo"
    os.mkfifo(fifo)
    with pytest.raises(OutputError, match="is a FIFO"):
        write_output(str(fifo), b"{}", streams=False)


WRITES = r"write_atomic\(|open\([^)]*[\"'][wax]b?[\"']|savefig\((?!buf\b)|\.write_text\(|\.write_bytes\("
# files the commands write for themselves (inputs of a benchmark in its temporary directory; the Processing
# failure message, which has its own rule: only a new file or an earlier tfpipe message is written)
OWN_FILES = {"bench/commands/small_files.py", "bench/commands/tabular.py", "converters/cli/processing.py"}


def test_commands_write_user_paths_only_through_the_one_writer():
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[2]
    paths = [*(root / "bench").rglob("*.py"), *(root / "converters" / "cli").glob("*.py"),
             *root.glob("*/cli.py")]
    found = sorted({p.relative_to(root).as_posix() for p in paths if re.search(WRITES, p.read_text())})
    assert found == sorted(OWN_FILES)
