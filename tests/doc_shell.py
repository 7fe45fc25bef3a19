"""Shell code blocks of Markdown pages, as tests/test_docs_shell.py runs them: finding fenced blocks (and the
``<!-- doc-test: ... -->`` note before one), ``pip install`` lines and their extras, ``console`` transcripts
(commands, documented output and failures), the bash script a block becomes, and the small generated inputs the
docs' file names stand for."""
from __future__ import annotations

import configparser
import gzip
import os
import re
import shlex
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SHELL_TAGS = {"bash", "sh", "shell", "console", "zsh"}
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([\w+-]*)")
NOTE = re.compile(r"^<!--\s*doc-test:\s*(\w+)\s*(?:\((.*)\))?\s*-->\s*$")
PIP = re.compile(r"^(?:python3? -m )?pip3? install\b")
SYNOPSIS = re.compile(r"^tfpipe [a-z].*\[")   # a usage synopsis: tfpipe CMD ... [--opt ...]


@dataclass(frozen=True)
class Block:
    page: str          # path relative to the repository
    line: int          # line of the opening fence (1-based)
    tag: str           # the fence's language tag ('' if none)
    text: str
    note: tuple[str, str] | None   # ('skip', reason) from <!-- doc-test: skip (reason) -->

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(path: Path, root: Path) -> list[Block]:
    """Every fenced block of the page at ``path`` (``Block.page`` relative to ``root``)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, j = m.group(1), i + 1
        while j < len(lines) and not re.match(rf"^ {{0,3}}{fence[0]}{{{len(fence)},}}\s*$", lines[j]):
            j += 1
        prev = next((lines[k].strip() for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        note = NOTE.match(prev)
        out.append(Block(path.relative_to(root).as_posix(), i + 1, m.group(2).lower(), "\n".join(lines[i + 1:j]),
                         (note.group(1), (note.group(2) or "").strip()) if note else None))
        i = j + 1
    return out


def looks_like_commands(b: Block) -> bool:
    """Untagged text that holds commands: a ``$ `` prompt, or a first line ``tfpipe CMD`` that is no synopsis."""
    lines = [ln for ln in b.text.splitlines() if ln.strip()]
    return bool(lines) and (any(ln.startswith("$ ") for ln in lines)
                            or (re.match(r"^tfpipe [a-z]", lines[0]) is not None and not SYNOPSIS.match(lines[0])))


# -- generated inputs: maker(path, *args) --------------------------------------------------------------------

def criteo(path: Path, n: int, seed: int = 0) -> None:
    """Criteo-like LibSVM lines (39 fields); gzip or zstd by the suffix."""
    from converters.libsvm.synthetic import criteo_lines

    data = criteo_lines(n, seed=seed)
    if path.suffix == ".gz":
        data = gzip.compress(data, mtime=0)
    elif path.suffix == ".zst":
        import zstandard

        data = zstandard.ZstdCompressor().compress(data)
    path.write_bytes(data)


def pile(path: Path, n: int, seed: int = 0) -> None:
    from converters.text.synthetic import write_pile_jsonl

    write_pile_jsonl(path, n, seed=seed, mean_words=60)


def shard_set(path: Path, n: int, shards: int = 1, seed: int = 0) -> None:
    from converters.libsvm.synthetic import write_criteo_shards

    per_record = 330  # bytes of a framed Criteo-like record, about
    write_criteo_shards(str(path), n, seed=seed, shard_bytes=max(1 << 10, n * per_record // shards))


def foreign_tfrecords(path: Path, n: int, seed: int = 0) -> None:
    """A TFRecord file written by someone else's tool (no index.json): Criteo-like tf.train.Examples."""
    from converters.libsvm.options import libsvm_schema
    from converters.libsvm.synthetic import criteo_arrays
    from converters.tfrecord.examples import serialize_batch

    framed, _ = serialize_batch(libsvm_schema(39), criteo_arrays(n, seed=seed))
    path.write_bytes(framed.tobytes())


def sparse(path: Path, n: int, qid: bool = False) -> None:
    from converters.libsvm.synthetic import write_sparse_libsvm

    write_sparse_libsvm(path, n, max_nonzeros=20, max_index=5000, qid=qid)


def text_file(path: Path, text: str) -> None:
    path.write_text(text)


def multilabel(path: Path, n: int) -> None:
    """Sparse lines with label lists (``1,3,5 12:0.5 ...``), for ``--multilabel``."""
    rng = np.random.default_rng(3)
    lines = []
    for _ in range(n):
        labels = ",".join(map(str, sorted(rng.choice(10, rng.integers(1, 4), replace=False))))
        ids = np.unique(rng.integers(1, 3000, 8))
        lines.append(labels + " " + " ".join(f"{i}:{rng.random():.4g}" for i in ids))
    path.write_text("\n".join(lines) + "\n")


def make_inputs(inputs, where: Path, endpoint: str) -> None:
    """``[(path, maker, args)]`` generated under ``where`` (an ``s3://`` one is generated aside, then uploaded to
    the S3 at ``endpoint``)."""
    import boto3

    for rel, maker, args in inputs:
        path = where / (".s3-staging" if rel.startswith("s3://") else "") / rel.removeprefix("s3://")
        path.parent.mkdir(parents=True, exist_ok=True)
        maker(path, *args)
        if rel.startswith("s3://"):
            bucket, _, key = rel.removeprefix("s3://").partition("/")
            boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                         aws_secret_access_key="testing").upload_file(str(path), bucket, key)


# -- a block as a bash script ----------------------------------------------------------------------------

def setup_extras(setup_cfg: Path) -> set[str]:
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(setup_cfg)
    return set(cfg["options.extras_require"])


def pip_extras(command: str) -> list[str]:
    """The extras a ``pip install`` command names: ``'.[dev]'`` -> ['dev'], ``'tfpipe[beam,s3]'`` -> [...]."""
    out = []
    for arg in shlex.split(command, comments=True):
        m = re.fullmatch(r"(?:\.|tfpipe|moto)\[([\w,-]+)\]", arg)
        if m and not arg.startswith("moto"):
            out += m.group(1).split(",")
    return out


def strip_pip(script: str) -> tuple[str, list[str]]:
    """``pip install X && rest`` -> ``rest``; a line that only installs goes. Returns (script, extras named)."""
    kept, extras = [], []
    for line in script.splitlines():
        parts = [p.strip() for p in line.split("&&")]
        installs = [p for p in parts if PIP.match(p)]
        for p in installs:
            extras += pip_extras(p)
        rest = [p for p in parts if not PIP.match(p)]
        if installs and not rest:
            continue
        kept.append(" && ".join(rest) if installs else line)
    return "\n".join(kept), extras


@dataclass(frozen=True)
class Command:
    text: str
    error: str | None   # the message a documented failure must print (None: must succeed)
    output: tuple[str, ...] = ()   # the documented output lines


def console_commands(text: str) -> list[Command]:
    """The ``$ `` commands of a console transcript (with continuation lines) and whether each must fail."""
    lines = text.splitlines()
    cmds: list[list[str]] = []
    outputs: list[list[str]] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("$ "):
            cmd = [line[2:]]
            while cmd[-1].rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                cmd.append(lines[i])
            cmds.append(cmd)
            outputs.append([])
        elif outputs:
            outputs[-1].append(line)
        i += 1
    out = []
    for cmd, output in zip(cmds, outputs):
        text = "\n".join(cmd)
        error = None
        m = re.search(r"#\s*refused:\s*\"(.*?)(?:\.\.\.)?\s*\"", text)
        if m:
            error = m.group(1).strip()
        elif output and output[0].startswith("tfpipe: error:"):
            error = output[0].split("...")[0].strip()
        out.append(Command(text, error, tuple(output)))
    return out


def squeeze(line: str) -> str:
    return " ".join(line.split())


def script(tag: str, text: str, check_output: bool = False) -> str:
    """The bash script a block becomes (``pip install`` left out). In a console transcript every ``$ `` command
    runs, a documented failure must fail with its message, and with ``check_output`` every documented output line
    without an ellipsis must be printed (whitespace runs compared as one space)."""
    text, _ = strip_pip(text)
    if tag != "console":
        return text + "\n"
    parts = []
    for c in console_commands(text):
        command = c.text.split("#")[0].strip()
        shown = [squeeze(ln) for ln in c.output if ln.strip() and "..." not in ln and "…" not in ln]
        if c.error is None and check_output and shown:
            parts.append(f"{command} > .doc-test-out 2>&1 || {{ cat .doc-test-out >&2; exit 1; }}\n"
                         "cat .doc-test-out\n"
                         "tr -s ' \\t' ' ' < .doc-test-out | sed 's/^ //; s/ $//' > .doc-test-squeezed")
            for ln in shown:
                parts.append(f"grep -qxF -- {shlex.quote(ln)} .doc-test-squeezed || {{ echo "
                             f"{shlex.quote(f'doc-test: the output lacks the documented line: {ln}')} >&2; exit 1; }}")
        elif c.error is None:
            parts.append(c.text)
        else:
            parts.append(f"if {command} 2> .doc-test-err; then\n"
                         f"  echo {shlex.quote(f'doc-test: expected to fail: {c.text}')} >&2; exit 1\n"
                         f"fi\ncat .doc-test-err >&2\n"
                         f"grep -qF -- {shlex.quote(c.error)} .doc-test-err || "
                         f"{{ echo {shlex.quote(f'doc-test: the message differs from the docs: {c.error}')} >&2; "
                         f"exit 1; }}")
    return "\n".join(parts) + "\n"


def run_in_session(argv: list[str], *, cwd, env, timeout: float, merge_stderr: bool = False):
    """Run ``argv`` in a session of its own with stdin empty; past ``timeout`` its whole process group is
    killed (no command of it is left running) and ``TimeoutExpired`` is raised."""
    err = subprocess.STDOUT if merge_stderr else subprocess.PIPE
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
                            text=True, start_new_session=True)
    try:
        out, errs = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    except BaseException:   # Ctrl-C: the block's session gets none
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, "" if merge_stderr else errs)
