"""Hostile and careless use of the ``tfpipe`` CLI, one table: every case runs the real CLI in a process of its own
inside a sandbox (``hostile.py``) and must end within a minute in one error line, or in success with its
declared skips, with no traceback, no process left behind, nothing touched outside its output, no user
file lost and no manifest that fails verify. FIFOs sit where a stray read outside the set would go, so
such a read shows up as a hang. Cases that need processes of their own (concurrency, kill -9, SIGTERM,
mounts) are in ``test_hostile_process.py``."""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
from hostile import (
    check_contained,
    check_one_line_error,
    check_outputs,
    owned_by_tfpipe,
    run_cli,
    run_py,
    snapshot,
)

from converters.libsvm.synthetic import write_criteo_libsvm, write_criteo_shards


class Sandbox:
    """``data/`` (inputs), ``outside/`` (a FIFO and a file no run may touch), ``out/`` (the output)."""

    def __init__(self, root: Path):
        self.root = root
        self.data = root / "data"
        self.outside = root / "outside"
        self.out = root / "out"
        self.data.mkdir()
        self.outside.mkdir()
        os.mkfifo(self.outside / "secret.tfrecord")
        (self.outside / "keep.txt").write_text("not yours\n")

    def libsvm(self, name: str = "a.libsvm", n: int = 300) -> Path:
        p = self.data / name
        write_criteo_libsvm(p, n, field_size=39)
        return p

    def jsonl(self, name: str = "a.jsonl", lines: list[str] | None = None) -> Path:
        p = self.data / name
        docs = lines if lines is not None else [json.dumps({"text": f"document {i} " * 20}) for i in range(50)]
        p.write_text("\n".join(docs) + "\n")
        return p

    def shard_set(self, name: str = "set", n: int = 200, **kw) -> Path:
        d = self.root / name
        write_criteo_shards(str(d), n, shard_bytes=20_000, **kw)
        return d

    def edit_manifest(self, d: Path, fn: Callable[[dict], None]) -> Path:
        data = json.loads((d / "index.json").read_text())
        fn(data)
        (d / "index.json").write_text(json.dumps(data))
        return d


def _name(value):
    def fn(m):
        m["shards"][0]["name"] = value(m) if callable(value) else value
    return fn


@dataclass
class Case:
    id: str
    setup: Callable[[Sandbox], list[str]]     # builds the inputs, returns argv
    error: str | None                         # regex of the one error line; None: must succeed
    says: str = ""                            # success: regex that stdout + stderr must show (a declared skip)
    outs: tuple[str, ...] = ("out",)          # directories the run may write (relative to the sandbox)


def _bad_set(fn):
    def setup(sb):
        return sb.edit_manifest(sb.shard_set(), fn)
    return setup


CASES = [
    # 1. manifest entries that lead out of the set: an integrity error naming the entry, for every reader
    Case("verify-dotdot", lambda sb: ["verify", str(_bad_set(_name("../outside/secret.tfrecord"))(sb))],
         r"shards\[0\] name '\.\./outside/secret\.tfrecord'.*separator"),
    Case("inspect-absolute", lambda sb: ["inspect", str(_bad_set(_name(lambda m: str(sb.outside / "secret.tfrecord")))(sb))],
         r"shards\[0\] name '/.*secret\.tfrecord'"),
    Case("reshard-dotdot", lambda sb: ["reshard", str(_bad_set(_name("../outside/secret.tfrecord"))(sb)), "--out",
                                       str(sb.out), "--num-shards", "1"], r"not a shard of this set"),
    Case("plan-dotdot", lambda sb: ["shard", "plan", str(_bad_set(_name("../outside/secret.tfrecord"))(sb)),
                                    "--hosts", "1", "--batch-size", "4"], r"not a shard of this set"),
    Case("verify-newline-name", lambda sb: ["verify", str(_bad_set(_name("train-00000-of-00009.tfrecord\n"))(sb))],
         r"control character U\+000A"),
    Case("verify-duplicate-name", lambda sb: ["verify", str(_bad_set(
        lambda m: m["shards"].__setitem__(1, dict(m["shards"][1], name=m["shards"][0]["name"])))(sb))],
         r"listed twice"),
    Case("verify-tokenizer-path", lambda sb: ["verify", str(_bad_set(
        lambda m: m["options"].__setitem__("tokenizer", "../../outside/keep.txt"))(sb))],
         r"options\.tokenizer .* not a path"),
    Case("inspect-deep-json", lambda sb: ["inspect", str(_manifest_dir(sb, lambda p: p.write_text(
        '{"a": ' * 50_000 + "1" + "}" * 50_000)))], r"nested too deeply"),
    Case("verify-fifo-manifest", lambda sb: ["verify", str(_manifest_dir(sb, os.mkfifo))], r"FIFO"),
    Case("verify-shard-symlink-out", lambda sb: _swap_shard(sb, lambda p: p.symlink_to(sb.outside / "keep.txt")),
         r"symbolic link"),
    Case("verify-shard-is-fifo", lambda sb: _swap_shard(sb, os.mkfifo), r"FIFO \(named pipe\), not a regular file"),
    Case("inspect-a-shard-file", lambda sb: ["inspect", str(_shard_path(sb.shard_set()))],
         r"is a regular file, not a shard set"),
    # 2. --overwrite never deletes what tfpipe cannot prove it wrote
    Case("overwrite-user-index", lambda sb: _out_with(sb, {"index.json": '{"mine": true}\n'}) + _convert(sb),
         r"index\.json that is not a valid tfpipe manifest"),
    Case("overwrite-user-shard-name", lambda sb: _out_with(sb, {"eval-00000-of-00001.tfrecord": "mine"}) + _convert(sb),
         r"did not write.*eval-00000-of-00001\.tfrecord.*no tfpipe manifest"),
    Case("overwrite-set-and-notes", lambda sb: _set_in_out(sb, {"notes.txt": "mine"}) + _convert(sb),
         r"did not write.*notes\.txt"),
    Case("overwrite-own-set", lambda sb: _set_in_out(sb, {}) + _convert(sb), None, r"wrote 1 shard"),
    # 5. non-regular inputs: skipped in directory walks (counted), refused when named
    Case("libsvm-dir-with-fifo", lambda sb: _with_specials(sb, sb.libsvm) + _convert(sb, str(sb.data)),
         None, r"skipped 2 entries that are not regular files \(FIFO \(named pipe\): 1, character device: 1\)"),
    Case("text-dir-with-fifo", lambda sb: _with_specials(sb, sb.jsonl, ".jsonl") + [
        "convert", "text", str(sb.data), "--out", str(sb.out), "--seq-len", "16", "--no-progress"],
         None, r"skipped 2 entries"),
    Case("libsvm-fifo-named", lambda sb: _convert(sb, str(_special(sb.data / "f.libsvm", os.mkfifo))),
         r"is a FIFO \(named pipe\), not a regular file"),
    Case("text-dev-zero-named", lambda sb: ["convert", "text", str(_special(sb.data / "z.jsonl", _to_zero)), "--out",
                                            str(sb.out), "--seq-len", "8"], r"is a character device, not a regular file"),
    # 6. one line instead of a traceback
    Case("deep-json-skip", lambda sb: _deep(sb) + ["--on-error", "skip"], None, r"invalid_json 1"),
    Case("deep-json-raise", lambda sb: _deep(sb), r"a\.jsonl:2: invalid JSON: nested too deeply"),
    Case("huge-seq-len", lambda sb: ["convert", "text", str(sb.jsonl()), "--out", str(sb.out), "--seq-len",
                                     "100000000", "--no-cross-doc"], r"--seq-len 100000000 is longer than"),
    Case("prefix-300", lambda sb: _convert(sb) + ["--prefix", "p" * 300], r"prefix is 300 bytes long; at most 128"),
    Case("prefix-dot", lambda sb: _convert(sb) + ["--prefix", "."], r"must not start with '\.'|not a file name"),
    Case("prefix-newline", lambda sb: _convert(sb) + ["--prefix", "a\nb"], r"control character U\+000A"),
    Case("out-under-a-file", lambda sb: _convert(sb, out=str(sb.libsvm("x.libsvm") / "sub")),
         r"x\.libsvm.*Not a directory", outs=()),
    Case("input-inside-out", lambda sb: _set_in_out(sb, {}) + _convert(sb, str(sb.out)), r"inside the output"),
    # 7. integrity gaps
    Case("verify-says-gzip-over-plain", lambda sb: ["verify", str(_bad_set(
        lambda m: m.__setitem__("compression", "gzip"))(sb))], r"says gzip but the shard is not gzip-compressed"),
    Case("reshard-sha-mismatch", lambda sb: ["reshard", str(_bad_set(
        lambda m: m["shards"][0].__setitem__("sha256", "0" * 64))(sb)), "--out", str(sb.out), "--num-shards", "2"],
         r"sha256 .* differs from the manifest"),
]


def _first_shard(d: Path) -> str:
    return json.loads((d / "index.json").read_text())["shards"][0]["name"]


def _shard_path(d: Path) -> Path:
    return d / _first_shard(d)


def _manifest_dir(sb: Sandbox, make: Callable[[Path], object]) -> Path:
    d = sb.root / "m"
    d.mkdir()
    make(d / "index.json")
    return d


def _swap_shard(sb: Sandbox, make: Callable[[Path], None]) -> list[str]:
    d = sb.shard_set()
    p = d / _first_shard(d)
    p.unlink()
    make(p)
    return ["verify", str(d)]


def _out_with(sb: Sandbox, files: dict[str, str]) -> list[str]:
    sb.out.mkdir()
    for name, text in files.items():
        (sb.out / name).write_text(text)
    return []


def _set_in_out(sb: Sandbox, files: dict[str, str]) -> list[str]:
    write_criteo_shards(str(sb.out), 50)
    for name, text in files.items():
        (sb.out / name).write_text(text)
    return []


def _convert(sb: Sandbox, src: str | None = None, out: str | None = None) -> list[str]:
    return ["convert", "libsvm", src or str(sb.libsvm()), "--out", out or str(sb.out), "--field-size", "39",
            "--overwrite", "--no-progress"]


def _with_specials(sb: Sandbox, make, suffix: str = ".libsvm") -> list[str]:
    make()
    os.mkfifo(sb.data / f"pipe{suffix}")
    (sb.data / f"zero{suffix}").symlink_to("/dev/zero")
    return []


def _special(p: Path, make: Callable[[Path], object]) -> Path:
    make(p)
    return p


def _to_zero(p: Path) -> None:
    p.symlink_to("/dev/zero")


def _deep(sb: Sandbox) -> list[str]:
    src = sb.jsonl(lines=['{"text": "first"}', '{"text": ' + "[" * 100_000 + "]" * 100_000 + "}",
                          '{"text": "third"}'])
    return ["convert", "text", str(src), "--out", str(sb.out), "--seq-len", "4", "--no-progress"]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_cli(case: Case, tmp_path):
    sb = Sandbox(tmp_path)
    argv = case.setup(sb)
    outs = [tmp_path / o for o in case.outs]
    owned = {o: owned_by_tfpipe(o) for o in outs}
    before = snapshot(tmp_path)
    r = run_cli(argv)
    if case.error is not None:
        check_one_line_error(r, case.error)
    else:
        assert r.rc == 0 and "Traceback" not in r.err, r.err
    if case.says:
        assert re.search(case.says, r.out + r.err), f"{case.says!r} not in:\n{r.out}{r.err}"
    after = snapshot(tmp_path)
    check_contained(before, after, tmp_path, outs, owned)
    check_outputs(outs, before, after, tmp_path)


# -- the same through the Python API: a TfpipeError (or ValueError) with a one-line message -----------------

API_CASES = [
    ("read_manifest-dotdot", lambda sb: f"from converters import read_manifest; read_manifest({str(_bad_set(_name('../outside/secret.tfrecord'))(sb))!r})",
     "IntegrityError", r"shards\[0\] name '\.\./outside/secret\.tfrecord'"),
    ("verify-absolute", lambda sb: f"from converters import verify; verify({str(_bad_set(_name(str(sb.outside / 'secret.tfrecord')))(sb))!r})",
     "IntegrityError", r"shards\[0\] name '/"),
    ("pipeline-spec-dotdot", lambda sb: "from pipeline import PipelineSpec; PipelineSpec.from_manifest("
     f"{str(_bad_set(_name('../outside/secret.tfrecord'))(sb))!r}, 8)", "IntegrityError", r"not a shard of this set"),
    ("copy-set-dotdot", lambda sb: "from sharding.transfer import copy_set; copy_set("
     f"{str(_bad_set(_name('../outside/secret.tfrecord'))(sb))!r}, {str(sb.out)!r})", "IntegrityError", r"shards\[0\]"),
    ("reshard-fifo-shard", lambda sb: "from sharding import reshard; reshard("
     f"{_swap_shard(sb, os.mkfifo)[1]!r}, {str(sb.out)!r}, num_shards=1)", "IntegrityError", r"FIFO"),
    ("convert-libsvm-fifo", lambda sb: "from converters import convert_libsvm; convert_libsvm("
     f"{str(_special(sb.data / 'f.libsvm', os.mkfifo))!r}, {str(sb.out)!r}, field_size=39)", "TfpipeError", r"FIFO"),
    ("convert-text-zero", lambda sb: "from converters import convert_text; convert_text("
     f"[{str(_special(sb.data / 'z.jsonl', _to_zero))!r}], {str(sb.out)!r}, seq_len=8)", "TfpipeError",
     r"character device"),
    ("convert-prefix-long", lambda sb: "from converters import convert_libsvm; convert_libsvm("
     f"{str(sb.libsvm())!r}, {str(sb.out)!r}, field_size=39, prefix='p' * 300)", "ValueError", r"at most 128"),
    ("convert-overwrite-user-index", lambda sb: (_out_with(sb, {"index.json": "{}"}) or "") +
     "from converters import convert_libsvm; convert_libsvm("
     f"{str(sb.libsvm())!r}, {str(sb.out)!r}, field_size=39, overwrite=True)", "OutputExistsError",
     r"not a valid tfpipe manifest"),
    ("two-writers", lambda sb: "from converters.shardset.writer import ShardSetWriter; "
     f"a = ShardSetWriter({str(sb.out)!r}); ShardSetWriter({str(sb.out)!r})", "OutputInUseError", r"in use by"),
]


@pytest.mark.parametrize("case", API_CASES, ids=[c[0] for c in API_CASES])
def test_hostile_api(case, tmp_path):
    _, setup, error, pattern = case
    sb = Sandbox(tmp_path)
    code = setup(sb)
    owned = {sb.out: owned_by_tfpipe(sb.out)}
    before = snapshot(tmp_path)
    r = run_py(code)
    assert "Traceback" not in r.err, r.err
    lines = [ln for ln in r.out.splitlines() if ln.startswith("ERROR ")]
    assert r.rc == 3 and len(lines) == 1, f"expected one error:\n{r.out}\n{r.err}"
    assert lines[0].startswith(f"ERROR {error}: ") and re.search(pattern, lines[0]), lines[0]
    after = snapshot(tmp_path)
    check_contained(before, after, tmp_path, [sb.out], owned)
    check_outputs([sb.out], before, after, tmp_path)
