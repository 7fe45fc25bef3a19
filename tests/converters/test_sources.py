import bz2
import gzip
import os
import zlib

import pytest
import zstandard

from converters.sources import expand_inputs, iter_blocks, open_input
from converters.util.errors import InputError, TfpipeError

TEXT = b"1 1:2\n0 3:4\n\n1 5:6"


def _write(path, kind, data=TEXT):
    if kind == "gzip":
        data = gzip.compress(data)
    elif kind == "bz2":
        data = bz2.compress(data)
    elif kind == "zstd":
        c = zstandard.ZstdCompressor()
        half = len(data) // 2
        data = c.compress(data[:half]) + c.compress(data[half:])  # two frames
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("name,kind", [("a.txt", None), ("a.gz", "gzip"), ("a.bz2", "bz2"), ("a.zst", "zstd")])
@pytest.mark.parametrize("block", [1, 4, 1 << 20])
def test_blocks_reassemble_and_count_lines(tmp_path, name, kind, block):
    p = _write(tmp_path / name, kind)
    blocks = list(iter_blocks(str(p), block))
    assert b"".join(b for b, _, _ in blocks) == TEXT
    for b, line, off in blocks:
        assert TEXT[off:off + len(b)] == b
        assert TEXT[:off].count(b"\n") + 1 == line
        assert b.endswith(b"\n") or off + len(b) == len(TEXT)


@pytest.mark.parametrize("name,data,match", [
    ("plain.zst", b"hello\n", "not compressed"),
    ("gz.zst", gzip.compress(b"x\n", mtime=0), "gzip data"),
    ("empty.gz", b"", "empty file"),
])
def test_wrong_content_for_extension(tmp_path, name, data, match):
    (tmp_path / name).write_bytes(data)
    with pytest.raises(InputError, match=match) as exc:
        list(iter_blocks(str(tmp_path / name)))
    assert name in str(exc.value)


@pytest.mark.parametrize("name,kind", [("t.zst", "zstd"), ("t.gz", "gzip"), ("t.bz2", "bz2")])
def test_truncated_compressed_file_is_an_error(tmp_path, name, kind):
    import os

    p = _write(tmp_path / name, kind, os.urandom(50_000) + b"\n")
    p.write_bytes(p.read_bytes()[:-20])
    with pytest.raises(InputError, match="truncated or corrupt") as exc:
        list(iter_blocks(str(p)))
    assert name in str(exc.value)


def test_expand_inputs(tmp_path):
    (tmp_path / "d" / "sub").mkdir(parents=True)
    for n in ["d/b.txt", "d/a.txt", "d/sub/c.txt", "d/.hidden", "e.txt"]:
        (tmp_path / n).write_text("1 1:1\n")
    got = expand_inputs([tmp_path / "d", str(tmp_path / "*.txt"), tmp_path / "e.txt"])
    assert [p.replace(str(tmp_path) + "/", "") for p in got] == ["d/a.txt", "d/b.txt", "d/sub/c.txt", "e.txt"]


@pytest.mark.parametrize("inputs,match", [([], "no inputs"), (["/nonexistent/x"], "does not exist"),
                                          (["/nonexistent/*.txt"], "matches no files")])
def test_expand_inputs_errors(inputs, match):
    with pytest.raises(TfpipeError, match=match):
        expand_inputs(inputs)


def test_open_missing_file():
    with pytest.raises(InputError, match="cannot open"):
        open_input("/nonexistent/file.gz")


# -- hostile inputs: FIFOs, devices, truncated and padded compressed streams, endless lines ---------------

def test_directory_walk_takes_regular_files_only(tmp_path, caplog):
    d = tmp_path / "d"
    d.mkdir()
    (d / "a.txt").write_text("1 1:1\n")
    os.mkfifo(d / "pipe.txt")
    (d / "zero.txt").symlink_to("/dev/zero")
    (d / "dangling.txt").symlink_to(tmp_path / "nowhere")
    (d / "linked.txt").symlink_to(d / "a.txt")
    got = expand_inputs([d])
    assert [p.rsplit("/", 1)[1] for p in got] == ["a.txt", "linked.txt"]
    assert ("skipped 3 entries that are not regular files (FIFO (named pipe): 1, broken symbolic link: 1, "
            "character device: 1)") in caplog.text
    with pytest.raises(TfpipeError, match=r"holds no input files \(skipped 1 entry"):
        os.unlink(d / "a.txt")
        os.unlink(d / "linked.txt")
        os.unlink(d / "zero.txt")
        os.unlink(d / "dangling.txt")
        expand_inputs([d])


@pytest.mark.parametrize("make,match", [
    (lambda p: os.mkfifo(p), r"is a FIFO \(named pipe\), not a regular file"),
    (lambda p: p.symlink_to("/dev/zero"), r"is a character device, not a regular file"),
    (lambda p: p.symlink_to("/nowhere/at/all"), r"is a broken symbolic link"),
])
def test_a_named_non_regular_input_is_refused_with_its_kind(tmp_path, make, match):
    make(tmp_path / "in.txt")
    with pytest.raises(TfpipeError, match=match):
        expand_inputs([tmp_path / "in.txt"])


@pytest.mark.parametrize("make", [lambda p: p.symlink_to("/dev/zero"), lambda p: p.symlink_to("/nowhere")])
def test_open_input_opens_regular_files_only(tmp_path, make):
    make(tmp_path / "in.txt")  # (a FIFO, which would block a test that regresses, is in test_hostile's table)
    with pytest.raises(InputError, match="cannot open"):
        open_input(str(tmp_path / "in.txt"))


def test_glob_skips_non_regular_matches(tmp_path):
    (tmp_path / "a.txt").write_text("x\n")
    os.mkfifo(tmp_path / "b.txt")
    assert expand_inputs([str(tmp_path / "*.txt")]) == [str(tmp_path / "a.txt")]


@pytest.mark.parametrize("kind,compress", [("gzip", gzip.compress), ("bz2", bz2.compress)])
def test_damage_loses_only_what_follows_it(tmp_path, kind, compress):
    """Every byte decodable before the cut is handed out, and the error names that uncompressed offset."""
    data = b"".join(b"%06d " % i + os.urandom(30).hex().encode() + b"\n" for i in range(40_000))
    cut = compress(data)[:-3000]
    p = tmp_path / f"t.{'gz' if kind == 'gzip' else 'bz2'}"
    p.write_bytes(cut)
    ref = (zlib.decompressobj(31) if kind == "gzip" else bz2.BZ2Decompressor()).decompress(cut)
    got = []
    with pytest.raises(InputError, match=rf"at byte {len(ref)}: cannot decompress") as exc:
        for block, _, _ in iter_blocks(str(p), 1 << 20):
            got.append(block)
    assert b"".join(got) == ref[: ref.rfind(b"\n") + 1]
    assert exc.value.offset == len(ref)


def test_multi_member_gzip_with_zero_padding(tmp_path):
    p = tmp_path / "m.gz"
    p.write_bytes(gzip.compress(b"a\nb\n") + gzip.compress(b"c\n") + b"\0" * 512)
    assert b"".join(b for b, _, _ in iter_blocks(str(p))) == b"a\nb\nc\n"
    p.write_bytes(gzip.compress(b"a\n") + b"garbage")
    with pytest.raises(InputError, match="corrupt gzip data"):
        list(iter_blocks(str(p)))


def test_a_line_without_end_is_bounded(tmp_path):
    p = tmp_path / "one.txt"
    p.write_bytes(b"ok\n" + b"x" * 5000)
    with pytest.raises(InputError, match=r"line 2 is longer than 1000 bytes without a newline") as exc:
        list(iter_blocks(str(p), 512, max_line=1000))
    assert exc.value.offset == 3
