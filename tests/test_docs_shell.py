"""Every shell code block of README.md and docs/*.md runs as written.

A page's blocks run in order, with ``bash -e``, in one fresh directory per page (the README's tour as a newcomer
copies it: one directory, top to bottom), with ``tfpipe`` from THIS tree first on the PATH (PYTHONPATH set),
small generated inputs under the names the page uses (``INPUTS``), and a local moto server standing in for AWS
(``AWS_ENDPOINT_URL``; the docs' buckets created, emptied before each page). What the test changes in a block
before it runs is listed in ``SUBSTITUTIONS`` (each with its reason, each checked to still match the docs);
``pip install`` commands are not run, their extras are checked against setup.cfg instead. ``console`` blocks run
their ``$ `` lines; a command whose documented output is ``tfpipe: error: ...`` (or whose comment says
``refused: "..."``) must fail with that message, and in ``OUTPUT_CHECKED`` transcripts the documented output must
be printed. A block the test cannot run is skipped only with ``<!-- doc-test: skip (reason) -->`` on the line
before it (``EXEMPT`` lists them); an untagged block that holds commands fails the test, so nothing escapes by
leaving out the language tag. Usage synopses (an untagged block opening with ``tfpipe CMD ... [--opt ...]``) are
checked against ``--help``. The mechanics are in ``doc_shell.py``.
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from doc_shell import (
    PIP,
    SHELL_TAGS,
    SYNOPSIS,
    Block,
    blocks,
    console_commands,
    criteo,
    foreign_tfrecords,
    looks_like_commands,
    make_inputs,
    multilabel,
    pile,
    run_in_session,
    script,
    setup_extras,
    shard_set,
    sparse,
    strip_pip,
    text_file,
)

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
ALL = [b for p in PAGES for b in blocks(p, ROOT)]
SHELL = [b for b in ALL if b.tag in SHELL_TAGS]
BUCKETS = ("bucket", "my-bucket", "demo")      # the bucket names the docs write to (s3://b/ is only in a --dry-run)
BLOCK_TIMEOUT = 150   # seconds; the slowest block takes ~25 s on a loaded 2-core machine
SETS_ITS_OWN_ENDPOINT = {"docs/shardsets.md"}   # "Try the S3 features locally" exports its endpoint and keys

# -- what the test changes before a block runs: (page, text in the docs, what runs instead, why) ----------------

SUBSTITUTIONS = [
    ("README.md", "python3 -m pytest -n 3 -q",
     '(cd "$TFPIPE_REPO" && python3 -m pytest -q tests/sharding/test_topology.py)',
     "the whole suite is what .ci/run runs (test_docs checks the command equals it); one quick module (it "
     "imports no TensorFlow) stands in, from the repository root as a developer runs it"),
    ("README.md", "python3 -m pytest tests/sharding/test_plan.py",
     '(cd "$TFPIPE_REPO" && python3 -m pytest -q tests/sharding/test_plan.py)',
     "tests run from the repository root"),
    ("README.md", "tfpipe quickstart ", "tfpipe quickstart --lines 2000 ",
     "smoke size: 2,000 sample lines instead of 20,000"),
    ("README.md", "--input train=s3://b/raw/,sharded --wait", "--input train=s3://b/raw/,sharded --dry-run",
     "a real job needs an AWS account, an IAM role and an image: --dry-run builds and checks the same request "
     "and sends nothing"),
    ("README.md", "tfpipe pipeline tune shards/ --batch-size 512",
     "tfpipe pipeline tune shards/ --batch-size 512 --seconds 2 --repeats 1", "smoke size: a 2 s budget"),
    ("README.md", "tfpipe bench pipeline --png where.png",
     "tfpipe bench pipeline --generate 3000 --steps 3 --warmup 1 --throughput-batches 4 "
     "--variants naive,vectorized --png where.png", "smoke size: 3,000 records, 3 steps, two variants"),
    ("docs/pipeline.md", "tfpipe pipeline tune shards/ --batch-size 512",
     "tfpipe pipeline tune shards/ --batch-size 512 --seconds 2 --repeats 1", "smoke size: a 2 s budget"),
    ("docs/bench.md", "tfpipe bench tune --generate 400000",
     "tfpipe bench tune --generate 3000 --repeats 1 --tune-seconds 2 --window-batches 3 --max-seconds 0.5",
     "smoke size: 3,000 records, one round, a 2 s tuning budget"),
    ("docs/text.md", "--vocab-size 50257", "--vocab-size 2000",
     "the test's small corpus cannot fill a GPT-2 sized vocabulary"),
    ("docs/text.md", "--workers 16", "--workers 2", "the test machine has 2 cores"),
    ("docs/shardsets.md", "moto_server -p 5000", "true",
     "the test's own moto server (started for the test) stands in for the one the docs start in another terminal"),
    ("docs/shardsets.md", "tfpipe quickstart --out qs/", "tfpipe quickstart --out qs/ --lines 2000",
     "smoke size: 2,000 sample lines instead of 20,000"),
    ("docs/shardsets.md", "http://127.0.0.1:5000", "$TFPIPE_MOTO", "the test's moto server's address"),
    ("docs/sharding.md", "/opt/ml/data/criteo8", "opt/ml/data/criteo8",
     "the test writes only inside its own directory"),
    ("docs/sharding.md", "AWS_ENDPOINT_URL=http://minio:9000", "AWS_ENDPOINT_URL=$TFPIPE_MOTO",
     "the test's moto server stands in for MinIO"),
]


def substituted(b: Block) -> str:
    text = b.text
    for page, old, new, _ in SUBSTITUTIONS:
        if page == b.page:
            text = text.replace(old, new)
    return text


# -- the inputs each page names, generated small ------------------------------------------------------------

BAD_LINES = "1 1:1 2:2\n0 1:0.5 2:1\n1 2:1 1:1\nabc 1:1 2:1\n0 1:1 2:3\n"   # lines 3 and 4 as docs/libsvm.md shows

# page -> [(path, maker, args)]: what a reader of that page is assumed to have before its first block
INPUTS = {
    "README.md": [
        ("data/day_0.libsvm.gz", criteo, (2000, 1)), ("data/day_1/part-0.libsvm", criteo, (1500, 2)),
        ("more/part-0.libsvm.zst", criteo, (1000, 3)), ("data/pile/00.jsonl.zst", pile, (40, 1)),
        ("data/pile/01.jsonl.zst", pile, (40, 2)), ("day/00.libsvm", criteo, (1500, 4)),
        ("day/01.libsvm", criteo, (1500, 5)),
        ("data/criteo", shard_set, (6000, 7)),   # 8 record-balanced shards of 750: a step for each of 2 x 4 ranks
    ],
    "docs/libsvm.md": [
        ("data/day_0.libsvm.gz", criteo, (1000, 1)), ("data/day_1/part-0.libsvm", criteo, (800, 2)),
        ("more/part-0.libsvm.zst", criteo, (600, 3)), ("rcv1_train.binary", sparse, (300,)),
        ("mslr/Fold1/train.txt", sparse, (300, True)), ("rcv1_topics.svm", multilabel, (300,)),
        ("bad.txt", text_file, (BAD_LINES,)), ("s3://bucket/criteo/day-0/part-0.libsvm", criteo, (500, 7)),
    ],
    "docs/text.md": [("data/pile/00.jsonl.zst", pile, (60, 1)), ("data/pile/01.jsonl.zst", pile, (60, 2))],
    "docs/layout.md": [("data/pile/00.jsonl.zst", pile, (60, 1)), ("data/pile/01.jsonl.zst", pile, (60, 2))],
    "docs/prep.md": [("day/00.libsvm", criteo, (1500, 4)), ("day/01.libsvm", criteo, (1500, 5)),
                     ("pile/00.jsonl.zst", pile, (40, 1))],
    "docs/shardsets.md": [("out", shard_set, (2000, 2)), ("data/train.tfrecords", foreign_tfrecords, (1500, 1)),
                          ("data/val.tfrecords", foreign_tfrecords, (500, 2))],
    "docs/sharding.md": [("data/criteo", shard_set, (20_000, 7)), ("data/other", shard_set, (500, 1)),
                         ("day0.txt", criteo, (500, 6))],
    "docs/processing.md": [("data/criteo/day-0.libsvm", criteo, (1500, 1)),
                           ("data/criteo/day-1.libsvm", criteo, (1500, 2))],
    "docs/pipeline.md": [("shards", shard_set, (20_000, 8))],
    "docs/bench.md": [("shards", shard_set, (6000, 4))],
    "docs/offload.md": [("shards", shard_set, (4000, 4))],
}


# console blocks whose documented output must appear as shown (the test's inputs are made to match them): every
# output line without an ellipsis, whitespace runs compared as one space
OUTPUT_CHECKED = {("docs/libsvm.md", "tfpipe convert libsvm bad.txt"), ("docs/sharding.md", "tfpipe shard plan")}


def script_for(b: Block) -> str:
    text = substituted(b)
    cmds = console_commands(text) if b.tag == "console" else []
    checked = bool(cmds) and any(b.page == page and cmds[0].text.startswith(first) for page, first in OUTPUT_CHECKED)
    return script(b.tag, text, check_output=checked)


# -- the tests ----------------------------------------------------------------------------------------------

def test_blocks_are_found():
    assert len(SHELL) >= 25, [b.id for b in SHELL]
    assert {b.page for b in SHELL} >= {"README.md", "docs/libsvm.md", "docs/sharding.md", "docs/processing.md"}
    assert set(INPUTS) <= set(RUN_PAGES), f"inputs for pages without shell blocks: {set(INPUTS) - set(RUN_PAGES)}"
    assert all(any(b.page == page and first in b.text for b in SHELL) for page, first in OUTPUT_CHECKED)


@pytest.mark.parametrize("b", [b for b in ALL if b.tag not in SHELL_TAGS | {"python"}], ids=lambda b: b.id)
def test_no_untagged_commands(b):
    """A block holding commands carries a shell tag (so it runs); output and synopses may stay untagged."""
    assert not looks_like_commands(b), (f"{b.id}: this block holds shell commands: tag it ```console (with "
                                         "'$ ' prompts) or ```bash so that tests/test_docs_shell.py runs it")


EXEMPT = [   # (page, the reason's first words): every exemption, so that they stay few and deliberate
    ("docs/processing.md", "launches a real SageMaker Processing job"),
]


def test_exemptions_stay_few():
    skipped = [(b.page, b.note[1]) for b in SHELL if b.note and b.note[0] == "skip"]
    assert all(reason for _, reason in skipped), f"an exemption without its reason: {skipped}"
    assert len(skipped) == len(EXEMPT) and all(page == p and reason.startswith(r) for (page, reason), (p, r)
                                               in zip(skipped, EXEMPT)), f"exemptions in the docs: {skipped}"
    assert len(EXEMPT) <= 3
    bad = [b.id for b in ALL if b.note and b.note[0] != "skip"]
    assert not bad, f"unknown doc-test notes (only 'skip (reason)' exists): {bad}"


@pytest.mark.parametrize("sub", SUBSTITUTIONS, ids=lambda s: f"{s[0]}:{s[1][:30]}")
def test_substitution_still_matches_the_docs(sub):
    page, old, new, reason = sub
    assert reason and old != new
    assert any(old in b.text for b in SHELL if b.page == page), f"{page} has no shell block with {old!r}: drop it"


@pytest.mark.parametrize("b", [b for b in SHELL if any(PIP.match(p.strip()) for ln in b.text.splitlines()
                                                         for p in ln.split("&&"))], ids=lambda b: b.id)
def test_pip_install_names_real_extras(b):
    _, extras = strip_pip(b.text)
    assert extras, f"{b.id}: a pip install without an extra"
    unknown = sorted(set(extras) - setup_extras(ROOT / "setup.cfg"))
    assert not unknown, f"{b.id}: extras {unknown} are not in setup.cfg's [options.extras_require]"


def test_console_parsing():
    cmds = console_commands('$ tfpipe a \\\n  --b\nout\n$ tfpipe c   # refused: "no ..."\n'
                            "$ tfpipe d\ntfpipe: error: bad thing (1) ... more\n")
    assert [c.text for c in cmds] == ["tfpipe a \\\n  --b", 'tfpipe c   # refused: "no ..."', "tfpipe d"]
    assert [c.error for c in cmds] == [None, "no", "tfpipe: error: bad thing (1)"]
    assert strip_pip("pip install -e '.[dev]' && tfpipe quickstart  # x\npip install 'tfpipe[beam]'\nls") == \
        ("tfpipe quickstart  # x\nls", ["dev", "beam"])


@pytest.fixture(scope="module")
def moto(moto_endpoint):
    """The local S3 with the docs' buckets; the test's stand-in for AWS."""
    import boto3

    client = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    for name in BUCKETS:
        client.create_bucket(Bucket=name)
    client.close()
    return moto_endpoint


def _empty_buckets(endpoint: str) -> None:
    """Each page starts with the docs' buckets empty (two pages upload to the same s3://bucket/criteo8)."""
    import boto3

    s3 = boto3.resource("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                        aws_secret_access_key="testing")
    for name in BUCKETS:
        s3.Bucket(name).objects.all().delete()


def _env(tmp: Path, moto: str, page: str) -> dict:
    """``tfpipe`` of this tree first on the PATH; AWS is the local moto server (a page that sets its own endpoint
    and credentials gets none: only what its blocks set makes them work); private caches and home."""
    from moto_s3 import FAKE_AWS

    bin_dir = tmp / ".bin"
    bin_dir.mkdir()
    tfpipe = bin_dir / "tfpipe"
    tfpipe.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m converters.cli "$@"\n')
    tfpipe.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    if page not in SETS_ITS_OWN_ENDPOINT:
        env.update(FAKE_AWS, AWS_ENDPOINT_URL=moto)
    env.update(AWS_CONFIG_FILE="/nonexistent", AWS_SHARED_CREDENTIALS_FILE="/nonexistent",
               AWS_EC2_METADATA_DISABLED="true", TFPIPE_MOTO=moto,
               PATH=f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
               PYTHONPATH=str(ROOT), TFPIPE_REPO=str(ROOT), TFPIPE_CACHE=str(tmp / ".cache"),
               HOME=str(tmp / ".home"), PYTEST_ADDOPTS="-p no:cacheprovider", TF_CPP_MIN_LOG_LEVEL="2",
               TF_ENABLE_ONEDNN_OPTS="0")
    return env


def run_block(b: Block, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    """The block's script under ``bash -e`` (stdin empty); past BLOCK_TIMEOUT its whole process group is killed
    (no command of it is left running) and TimeoutExpired raised."""
    path = cwd / f".doc-test-{b.line}.sh"
    path.write_text(script_for(b))
    argv = ["bash", "-e", "-o", "pipefail", str(path)]
    return run_in_session(argv, cwd=cwd, env=env, timeout=BLOCK_TIMEOUT)


@pytest.mark.parametrize("tag, text, ok", [
    ("bash", "tfpipe inspect --no-such-flag x/", False),
    ("bash", "tfpipe --version\nfalse\ntfpipe --version", False),                      # bash -e: any line counts
    ("console", "$ tfpipe inspect nowhere/\ntfpipe: error: no manifest at nowhere/index.json: not ...", True),
    ("console", "$ tfpipe inspect nowhere/\ntfpipe: error: no such set ...", False),     # another message
    ("console", "$ tfpipe --version\ntfpipe: error: fails ...", False),                  # a failure that succeeds
    ("console", "$ tfpipe --help\nusage: tfpipe [-h] [--version] [-v] COMMAND ...", True),
    ("console", "$ tfpipe shard plan --help\na line it does not print", False),          # output checked there
])
def test_the_runner_can_fail(tag, text, ok, tmp_path, moto):
    b = Block("docs/sharding.md", 1, tag, text, None)
    r = run_block(b, tmp_path, _env(tmp_path, moto, b.page))
    assert (r.returncode == 0) == ok, r.stderr


def test_a_block_past_its_time_is_killed_whole(tmp_path, moto, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "BLOCK_TIMEOUT", 1)
    b = Block("docs/sharding.md", 1, "bash", "sleep 60 &\necho $! > sleeper.pid\nwait", None)
    with pytest.raises(subprocess.TimeoutExpired):
        run_block(b, tmp_path, _env(tmp_path, moto, b.page))
    pid = int((tmp_path / "sleeper.pid").read_text())
    def alive() -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
        except FileNotFoundError:
            return False

    deadline = time.monotonic() + 5
    while alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(), f"the block's background command {pid} still runs"


RUN_PAGES = sorted({b.page for b in SHELL}, key=[p.relative_to(ROOT).as_posix() for p in PAGES].index)


@pytest.mark.parametrize("page", RUN_PAGES)
def test_page_shell_blocks_run(page, tmp_path, moto):
    """Every shell block of the page, in order, in one directory: each must succeed (its documented failures
    must fail with their message)."""
    _empty_buckets(moto)
    make_inputs(INPUTS.get(page, []), tmp_path, moto)
    env = _env(tmp_path, moto, page)
    failures, took = [], []
    for b in (b for b in SHELL if b.page == page):
        if b.note and b.note[0] == "skip":
            continue
        started = time.monotonic()
        try:
            r = run_block(b, tmp_path, env)
        except subprocess.TimeoutExpired:
            failures.append(f"{b.id}: still running after {BLOCK_TIMEOUT} s (killed)")
            continue
        took.append(f"{b.id} {time.monotonic() - started:.1f} s")
        if r.returncode != 0:
            failures.append(f"{b.id} exited {r.returncode}:\n--- ran\n{script_for(b)}--- stdout (end)\n"
                            f"{r.stdout[-2000:]}\n--- stderr (end)\n{r.stderr[-3000:]}")
    print("\n".join(took))
    assert not failures, "\n\n".join(failures)


SYNOPSES = [b for b in ALL if b.tag in ("", "text") and b.text.strip() and SYNOPSIS.match(b.text.lstrip())]


def test_synopses_are_found():
    assert len(SYNOPSES) >= 4, [b.id for b in SYNOPSES]


@pytest.mark.parametrize("b", SYNOPSES, ids=lambda b: b.id)
def test_synopsis_options_exist(b):
    """A usage synopsis (``tfpipe bench tune [DIR] [--repeats 7] ...``) names only options its command has."""
    words = []
    for tok in b.text.split()[1:]:
        if not re.fullmatch(r"[a-z][a-z-]*", tok):
            break
        words.append(tok)
    from converters.cli.main import build_parser

    out, err = io.StringIO(), io.StringIO()   # the parser's --help in-process: the same text, no interpreter start
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as done:
        build_parser().parse_args([*words, "--help"])
    assert done.value.code == 0, f"{b.id}: tfpipe {' '.join(words)} --help failed: {err.getvalue()[-500:]}"
    documented = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", b.text))
    unknown = sorted(f for f in documented if not re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", out.getvalue()))
    assert not unknown, f"{b.id}: tfpipe {' '.join(words)} has no {unknown}"


def test_readme_lists_every_extra():
    """The README's "Extras:" sentence (what a newcomer reads before ``pip install``) names every extra."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    para = text[text.index("Extras:"):].split("\n\n")[0]
    listed = set(re.findall(r"`([\w-]+)`", para))
    missing = sorted(setup_extras(ROOT / "setup.cfg") - listed)
    assert not missing, f"README.md's Extras sentence lacks {missing}"
