import bz2
import gzip
import os
import zlib

import pytest
import zstandard

from converters.sources import expand_inputs, iter_blocks, open_input
from converters.util.errors import InputError, MissingInputError, TfpipeError

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


@pytest.mark.parametrize("item", ["/nonexistent/x", "/nonexistent/*.txt", "{d}/dangling"])
def test_a_missing_input_is_a_missing_input_error(tmp_path, item):
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(MissingInputError) as exc:
        expand_inputs([item.format(d=tmp_path)])
    assert exc.value.exit_code == 2  # the one exit code of a missing input, every command


@pytest.mark.parametrize("names,suffixes,want", [
    (["a.csv", "b.dat"], (".jsonl", ".txt"),
     "holds no input files: it holds 2 file(s) (a.csv, b.dat), none named like an input of this format "
     "(*.jsonl, *.txt, each also as .gz/.bz2/.zst)"),
    ([f"f{i}.csv" for i in range(7)], (".txt",), "it holds 7 file(s) (f0.csv, f1.csv, f2.csv, f3.csv, f4.csv, ...)"),
    ([".hidden"], None, "holds no input files: it holds no files"),
    ([], (".txt",), "holds no input files: it holds no files"),
])
def test_a_directory_without_inputs_says_what_it_holds(tmp_path, names, suffixes, want):
    d = tmp_path / "d"
    d.mkdir()
    for n in names:
        (d / n).write_text("x\n")
    with pytest.raises(MissingInputError) as exc:
        expand_inputs([d], suffixes=suffixes)
    assert want in str(exc.value)


def _tfrecord(n: int = 3) -> bytes:
    from converters.tfrecord.crc import masked_crc32c

    out = b""
    for i in range(n):
        payload = f"record {i}".encode()
        length = len(payload).to_bytes(8, "little")
        out += (length + masked_crc32c(length).to_bytes(4, "little") + payload
                + masked_crc32c(payload).to_bytes(4, "little"))
    return out


@pytest.mark.parametrize("name,pack,kind", [
    ("part-0.tfrecord", None, "a TFRecord file"),
    ("part-0.tfrecord", gzip.compress, "a gzip-compressed TFRecord file"),  # gzip without the suffix
    ("part-0.tfrecord.gz", gzip.compress, "a gzip-compressed TFRecord file"),
    ("data.txt", None, "a TFRecord file"),  # whatever its name
])
def test_a_tfrecord_file_is_refused_with_the_command_that_adopts_it(tmp_path, name, pack, kind):
    data = _tfrecord()
    (tmp_path / name).write_bytes(pack(data) if pack else data)
    for item in (tmp_path / name, tmp_path):  # named, or found in a directory
        with pytest.raises(InputError) as exc:
            expand_inputs([item])
        assert str(exc.value) == (f"{tmp_path / name} is {kind}, not lines of text: adopt it as a shard set with "
                                  f"`tfpipe index {tmp_path / name}` (or the folder that holds it)")


@pytest.mark.parametrize("data", [
    b"1 1:0.5 2:0.25\n" * 3, b"", b"\x00" * 12, _tfrecord()[:11],  # text, empty, NULs (crc of 0 is not 0), short
    gzip.compress(b"1 1:0.5\n", mtime=0), b"\x1f\x8b not gzip at all",
])
def test_other_files_are_not_taken_for_tfrecords(tmp_path, data):
    (tmp_path / "a.txt").write_bytes(data)
    assert expand_inputs([tmp_path / "a.txt"]) == [str(tmp_path / "a.txt")]


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
    with pytest.raises(TfpipeError,
                       match=r"holds no input files: it holds 1 file\(s\) \(pipe.txt\) \(skipped 1 entry"):
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
