"""Conversion inputs given as URLs: ``s3://`` objects on a real S3 API (moto's server on 127.0.0.1) and a Beam
file-system scheme (Beam's local file system under a test scheme: no cloud bucket is reachable here), read by
``--engine beam`` and by the local engine. The shards must be byte-identical to converting the same files from
a local directory, and the manifest the same but for the inputs' paths (which carry the URLs)."""
from __future__ import annotations

import io
import os
import shutil

import pytest
from engines_data import (
    bad_jsonl,
    compressed_libsvm_files,
    libsvm_files,
    spoil,
    text_files,
)
from notices import without_compile_notices

from converters.cli import main
from converters.libsvm.convert import run as libsvm_local
from converters.libsvm.options import LibsvmOptions
from converters.shardset.manifest import MANIFEST_NAME
from converters.shardset.options import ShardOutputOptions
from converters.sources import expand_inputs, input_size, open_input
from converters.storage.objects import _RangeReader, list_objects, open_object
from converters.text.convert import run as text_local
from converters.text.options import TextOptions
from converters.util.errors import TfpipeError

beam = pytest.importorskip("converters.engines.beam", exc_type=ImportError)


def _libsvm_opts(on_error="raise", shard_size=64 << 10):
    return LibsvmOptions(39, output=ShardOutputOptions(shard_size=shard_size, on_error=on_error))


def _upload(s3, files, prefix: str) -> str:
    """Put local files under ``s3://bucket/prefix/`` by base name; the prefix's URL."""
    for f in files:
        s3.client.upload_file(str(f), s3.bucket, f"{prefix}/{os.path.basename(f)}")
    return f"s3://{s3.bucket}/{prefix}"


def _same_but_paths(local_out, remote_out, local_dir, url, *more) -> None:
    """Same file names and bytes; ``index.json`` the same once the inputs' local directory reads as ``url``
    (``more``: further ``local_dir, url`` pairs)."""
    names = sorted(os.listdir(local_out))
    assert names == sorted(os.listdir(remote_out)) and MANIFEST_NAME in names
    pairs = [(local_dir, url), *zip(more[::2], more[1::2])]
    for n in names:
        a, b = (open(os.path.join(d, n), "rb").read() for d in (local_out, remote_out))
        if n == MANIFEST_NAME:
            for d, u in pairs:
                assert str(d).encode() in a and u.encode() not in a
                a = a.replace(str(d).rstrip("/").encode(), u.encode())
        assert a == b, f"{n} differs"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("remote-inputs")
    libsvm = libsvm_files(d / "libsvm", sizes=(5, 1500, 6000))
    with open(d / "libsvm" / ".hidden.libsvm", "wb") as f:  # skipped in a directory, locally and in a bucket
        f.write(b"garbage\n")
    bad = libsvm_files(d / "bad", sizes=(5, 700, 1600), seed=4)
    spoil(bad[2], {1200: b"1 2:1 1:1"})
    return {"libsvm": libsvm, "libsvm_dir": str(d / "libsvm"), "bad": bad,
            "compressed": compressed_libsvm_files(d / "compressed"), "text": text_files(d / "text"),
            "text_dir": str(d / "text"), "badtext": bad_jsonl(str(d / "bad.jsonl"))}


def test_libsvm_on_beam_from_a_bucket_prefix(data, s3, tmp_path):
    """Three objects of very different sizes (one of 5 lines) under a prefix, cut in byte-range units."""
    url = _upload(s3, data["libsvm"] + [os.path.join(data["libsvm_dir"], ".hidden.libsvm")], "in/libsvm")
    local = libsvm_local(data["libsvm_dir"], tmp_path / "local", _libsvm_opts(), workers=1)
    m = beam.convert_libsvm(url, tmp_path / "beam", _libsvm_opts(), unit_size=128 << 10)
    _same_but_paths(tmp_path / "local", tmp_path / "beam", data["libsvm_dir"], url)
    assert [i.path for i in m.inputs] == [f"{url}/{n}" for n in ("a.libsvm", "b.libsvm", "c.libsvm")]
    assert [i.records_read for i in m.inputs] == [i.records_read for i in local.inputs] == [5, 1500, 6000]
    assert len(m.shards) > 5


def test_compressed_objects_on_beam_and_the_local_engine(data, s3, tmp_path):
    """.gz, .zst (two frames), .bz2 and a plain object: whole-file units through the same decompression."""
    url = _upload(s3, data["compressed"], "in/z")
    local_dir = os.path.dirname(data["compressed"][0])
    libsvm_local(local_dir, tmp_path / "local", _libsvm_opts(), workers=1)
    beam.convert_libsvm(url + "/", tmp_path / "beam", _libsvm_opts())
    _same_but_paths(tmp_path / "local", tmp_path / "beam", local_dir, url)
    libsvm_local(url, tmp_path / "local-from-s3", _libsvm_opts(), workers=2)  # worker processes read objects too
    _same_but_paths(tmp_path / "local", tmp_path / "local-from-s3", local_dir, url)


def test_text_on_beam_and_the_local_engine(data, s3, tmp_path):
    """jsonl (plain, .zst, .gz), .txt and .parquet objects (parquet through a seekable object reader)."""
    url = _upload(s3, data["text"], "in/text")
    opts = TextOptions(seq_len=63, output=ShardOutputOptions(shard_size=16 << 10))
    local = text_local(data["text_dir"], str(tmp_path / "local"), opts, workers=1)
    m = beam.convert_text(url, tmp_path / "beam", opts, chunk_tokens=4000)
    _same_but_paths(tmp_path / "local", tmp_path / "beam", data["text_dir"], url)
    assert len(m.inputs) == len(local.inputs) == 5 and m.inputs[4].path.endswith("e.parquet")
    text_local(url, str(tmp_path / "local-from-s3"), opts, workers=1)
    _same_but_paths(tmp_path / "local", tmp_path / "local-from-s3", data["text_dir"], url)


def _cli(argv, capsys):
    code = main(argv)
    return code, capsys.readouterr()


@pytest.mark.parametrize("engine", ["beam", "local"])
def test_a_bad_line_names_the_object_and_line(data, s3, tmp_path, capsys, engine):
    url = _upload(s3, data["bad"], "in/bad")
    args = ["--field-size", "39", "--shard-size", "64KiB", "--no-progress", "--engine", engine, "--strict-ids"]
    code_l, out_l = _cli(["convert", "libsvm", *data["bad"], *args, "--out", str(tmp_path / "local")], capsys)
    code_r, out_r = _cli(["convert", "libsvm", url, *args, "--out", str(tmp_path / "remote")], capsys)
    assert code_l == code_r == 2
    assert out_r.err == out_l.err.replace(os.path.dirname(data["bad"][2]), url)
    assert out_r.err == (f"tfpipe: error: {url}/c.libsvm:1200: unsorted_index: indices are not sorted in "
                         "increasing order ('1:1') (use --on-error skip to skip bad lines)\n")
    assert not os.path.exists(tmp_path / "remote") or os.listdir(tmp_path / "remote") == []


def test_a_bad_text_line_on_beam(data, s3, tmp_path, capsys):
    url = _upload(s3, [data["badtext"]], "in/badtext") + "/bad.jsonl"  # one object named explicitly
    code, out = _cli(["convert", "text", url, "--seq-len", "15", "--no-progress", "--engine", "beam", "--out",
                      str(tmp_path / "out")], capsys)
    err = without_compile_notices(out.err)
    assert code == 2 and err.startswith(f"tfpipe: error: {url}:4: invalid JSON") and err.count("\n") == 1


@pytest.mark.parametrize("engine", ["beam", "local"])
@pytest.mark.parametrize("what, message", [
    ("{bucket}/in/missing.libsvm", "input '{url}' does not exist"),
    ("{bucket}/in/missing/", "input '{url}' does not exist"),
    ("{bucket}/in/*.libsvm", "input '{url}': patterns are not supported in URLs; name an object or a prefix"),
    ("no-such-bucket-tfpipe/x", "cannot list s3://no-such-bucket-tfpipe/x/: bucket 'no-such-bucket-tfpipe' does "
                                "not exist"),
])
def test_a_missing_object_is_one_line_and_nothing_is_written(data, s3, tmp_path, capsys, engine, what, message):
    present = _upload(s3, data["libsvm"][:1], "in") + "/a.libsvm"  # read first: the error is about the next one
    url = f"s3://{what.format(bucket=s3.bucket)}"
    code, out = _cli(["convert", "libsvm", present, url, "--field-size", "39", "--out", str(tmp_path / "out"),
                      "--engine", engine, "--no-progress"], capsys)
    assert code != 0 and out.err == f"tfpipe: error: {message.format(url=url)}\n"
    assert not os.path.exists(tmp_path / "out")


def test_objects_list_and_read_like_local_files(data, s3, tmp_path):
    """The storage layer on its own: listing order and filtering as a local directory, seekable reads."""
    _upload(s3, data["libsvm"], "t/d")
    _upload(s3, data["libsvm"][:1], "t/d/sub")
    _upload(s3, data["libsvm"][:1], "t/d/.cache")
    s3.client.put_object(Bucket=s3.bucket, Key="t/d/sub/", Body=b"")  # a console's "folder" marker
    url = f"s3://{s3.bucket}/t/d"
    local = tmp_path / "d"
    shutil.copytree(data["libsvm_dir"], local)
    shutil.copytree(data["libsvm_dir"], local / "sub")
    shutil.copytree(data["libsvm_dir"], local / ".cache")
    for extra in (local / "sub" / "b.libsvm", local / "sub" / "c.libsvm", local / "sub" / ".hidden.libsvm"):
        extra.unlink()
    want = [p.replace(str(local), url) for p in expand_inputs([str(local)])]
    assert expand_inputs([url]) == want == [f"{url}/{n}" for n in ("a.libsvm", "b.libsvm", "c.libsvm",
                                                                   "sub/a.libsvm")]
    assert [n for _, n in list_objects(url + "/a.libsvm")] == [os.path.getsize(data["libsvm"][0])]
    body = open(data["libsvm"][2], "rb").read()
    assert input_size(f"{url}/c.libsvm") == len(body)
    with open_object(f"{url}/c.libsvm") as f:
        assert f.seekable() and f.read(10) == body[:10]
        f.seek(len(body) - 7)
        assert f.read() == body[-7:] and f.read(5) == b""
        f.seek(-(2 << 20), io.SEEK_END)  # more than a buffer back: a fresh ranged read
        assert f.read(3 << 20) == body[-(2 << 20):]
    with open_input(f"{url}/c.libsvm") as f:
        assert f.read() == body
    with pytest.raises(TfpipeError, match=f"^{url}/nope.libsvm: cannot open: no such object$"):
        open_input(f"{url}/nope.libsvm")
    with pytest.raises(TfpipeError, match="is inside the output"):
        libsvm_local(url, f"s3://{s3.bucket}/t", _libsvm_opts())


SCHEME = "tfpipetest"


@pytest.fixture(scope="module")
def beam_scheme():
    """Beam's own local file system registered under the scheme ``tfpipetest://`` (no cloud file system is
    reachable here): ``tfpipetest:///tmp/x`` is ``/tmp/x``. Inputs under it go through ``FileSystems.match`` and
    ``FileSystems.open`` like ``gs://`` ones."""
    from apache_beam.io.filesystem import FileMetadata, MatchResult
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.io.localfilesystem import LocalFileSystem

    prefix = f"{SCHEME}://"

    class LocalUnderScheme(LocalFileSystem):  # registered with Beam by being a FileSystem subclass
        @classmethod
        def scheme(cls):
            return SCHEME

        def match(self, patterns, limits=None):
            found = super().match([p[len(prefix):] for p in patterns], limits)
            return [MatchResult(prefix + r.pattern, [FileMetadata(prefix + m.path, m.size_in_bytes)
                                                     for m in r.metadata_list]) for r in found]

        def open(self, path, *args, **kwargs):
            return super().open(path[len(prefix):], *args, **kwargs)

        def exists(self, path):  # an object store's: objects exist, "directories" (prefixes) do not
            if not path.startswith(prefix):   # (Beam's own match calls it with local paths)
                return super().exists(path)
            return os.path.isfile(path[len(prefix):])

    assert isinstance(FileSystems.get_filesystem(prefix + "/x"), LocalUnderScheme)
    yield prefix  # Beam finds file systems among FileSystem.__subclasses__() (weak references): keep it alive
    del LocalUnderScheme


def test_inputs_on_a_beam_file_system(data, beam_scheme, tmp_path):
    """Plain objects in byte-range units (seeks on Beam's reader) and compressed ones, from two directories."""
    dirs = [data["libsvm_dir"], os.path.dirname(data["compressed"][0])]
    urls = [beam_scheme + d for d in dirs]
    libsvm_local(dirs, tmp_path / "local", _libsvm_opts(), workers=1)
    m = beam.convert_libsvm(urls, tmp_path / "beam", _libsvm_opts(), unit_size=128 << 10)
    _same_but_paths(tmp_path / "local", tmp_path / "beam", dirs[0], urls[0], dirs[1], urls[1])
    assert len(m.inputs) == 7 and all(i.path.startswith(beam_scheme) for i in m.inputs)
    with pytest.raises(TfpipeError, match=f"^input '{urls[0]}/nothing' does not exist$"):
        expand_inputs([urls[0] + "/nothing"])


@pytest.mark.parametrize("reads, gets", [
    ([("read", -1)], 1),                                       # a whole object: one GET, not one per 8 KiB
    ([("read", 10), ("seek", 500), ("read", 10)], 1),          # within the first buffered GET
    ([("read", 10), ("seek", 3 << 20), ("read", 10)], 2),      # past it: a fresh ranged GET
    ([("read", 5 << 20)], 1),                                  # a large read: one GET of that size
])
def test_object_reads_are_few_ranged_gets(reads, gets):
    body = os.urandom(6 << 20)
    asked = []

    def fetch(a, b):
        asked.append((a, b))
        return body[a:b]

    f = io.BufferedReader(_RangeReader("s3://b/k", len(body), fetch), buffer_size=1 << 20)
    at = 0
    for op, n in reads:
        if op == "seek":
            at = f.seek(n)
            continue
        got = f.read(n)
        assert got == body[at:at + n if n >= 0 else None]
        at += len(got)
    assert len(asked) == gets, asked


def test_local_workers_take_the_s3_settings_of_now(data, s3, tmp_path, monkeypatch):
    """Worker processes started from a forkserver that began before this run's S3 settings existed (as when an
    earlier conversion in the same process started it) read objects with the settings of now."""
    import multiprocessing.forkserver as forkserver

    from converters.libsvm import workers

    url = _upload(s3, data["libsvm"][1:], "in/workers")
    monkeypatch.setattr(workers, "start_method", lambda: "forkserver")
    with monkeypatch.context() as m:  # a forkserver without this test's endpoint and credentials
        for k in [k for k in os.environ if k.startswith("AWS_")]:
            m.delenv(k)
        forkserver.ensure_running()
    libsvm_local(data["libsvm"][1:], tmp_path / "local", _libsvm_opts(), workers=1)
    libsvm_local(url, tmp_path / "workers", _libsvm_opts(), workers=2)
    _same_but_paths(tmp_path / "local", tmp_path / "workers", os.path.dirname(data["libsvm"][1]), url)


def test_a_beam_input_read_is_retried_by_the_downloader(beam_scheme, tmp_path, monkeypatch):
    """A Beam file system whose reads fail (a reset) now and then: every range of the object is read again under
    the downloader's one policy, and the bytes come back whole."""
    from apache_beam.io.filesystems import FileSystems

    body = os.urandom(20 << 20)   # more than two 8 MiB ranges
    path = tmp_path / "obj.bin"
    path.write_bytes(body)
    cls = type(FileSystems.get_filesystem(beam_scheme + "/x"))
    real_open, failed = cls.open, []

    class Flaky:
        def __init__(self, f):
            self.f = f

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def read(self, n=-1):
            if len(failed) < 3:
                failed.append(n)
                raise ConnectionResetError("connection reset by peer")
            return self.f.read(n)

    monkeypatch.setattr(cls, "open", lambda self, p, *a, **k: Flaky(real_open(self, p, *a, **k)))
    with open_object(beam_scheme + str(path)) as f:
        assert f.read() == body
    assert len(failed) == 3
