"""Every ``python`` code block of README.md and docs/*.md runs for real.

A page's Python blocks run in order in ONE namespace (a user pasting them into one session), in one fresh
directory, in a child process with a time limit (a hung block fails the test, it cannot hang the suite), with
PYTHONPATH set to this tree, a private TFPIPE_CACHE and HOME, and the local moto server standing in for AWS
(``test_docs_shell._env``). Before the first block the page's inputs are generated under the names the page uses
(``INPUTS``, made with ``doc_shell``'s makers) and the page's own shell commands that make what its Python reads
run (``SETUP``, each with its reason and checked to still be in the docs where the page shows it). A name the
docs use without defining it (a Keras ``model``, a ``train_step``) comes from ``PROVIDED`` (each with a reason),
bound just before each block that reads it without assigning it, built in a namespace of its own so that nothing
else leaks into the page's (a block that forgets an import still fails). What the test changes in a block is in
``SUBSTITUTIONS`` (each with its reason, each checked to still match the docs). A block is skipped only with
``<!-- doc-test: skip (reason) -->`` on the line before it (``EXEMPT`` lists them, at most 3).
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import test_docs_shell as shell_docs   # the module, not its names: pytest must not collect its tests twice
from doc_shell import blocks, criteo, run_in_session, make_inputs, pile, shard_set, text_file

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
PYTHON = [b for p in PAGES for b in blocks(p, ROOT) if b.tag == "python"]
RUN_PAGES = sorted({b.page for b in PYTHON}, key=[p.relative_to(ROOT).as_posix() for p in PAGES].index)
PAGE_TIMEOUT = 240   # seconds for all of a page's blocks; the slowest page takes ~40 s on a loaded 2-core machine

# -- what the test changes before a block runs: (page, text in the docs, what runs instead, why) ----------------

SUBSTITUTIONS = [
    ("README.md", "workers=8)", "workers=2)", "the test machine has 2 cores"),
    ("docs/text.md", "workers=8)", "workers=2)", "the test machine has 2 cores"),
    ("README.md", "steps=200, warmup=20", "steps=20, warmup=2", "smoke size: 20 measured steps"),
    ("docs/bench.md", "steps=200, warmup=20", "steps=20, warmup=2", "smoke size: 20 measured steps"),
    ("docs/libsvm.md",
     'beam_options={"runner": "DataflowRunner", "project": "my-project", "region": "us-central1",\n'
     '                                 "temp_location": "gs://my-bucket/beam-tmp", '
     '"setup_file": "/src/tfpipe/pyproject.toml"})',
     'beam_options={"runner": "DirectRunner", "direct_num_workers": 1})',
     "Dataflow needs a Google Cloud project: Beam's local runner runs the same pipeline (the output still goes to "
     "s3://bucket/, the moto server)"),
    ("docs/pipeline.md", "model.fit(train, epochs=10, steps_per_epoch=epoch_steps(spec), shuffle=False)",
     "model.fit(train, epochs=1, steps_per_epoch=epoch_steps(spec), shuffle=False)", "smoke size: one epoch"),
    ("docs/pipeline.md", 'keras_dataset("shards/"', 'keras_dataset("sparse/"',
     "the page's shards/ is the fixed-width set of the other examples; this one needs a sparse (rcv1-like) set"),
    ("docs/pipeline.md", "model.fit(train, epochs=5, steps_per_epoch=1000, shuffle=False)",
     "model.fit(train, epochs=1, steps_per_epoch=2, shuffle=False)", "smoke size: two steps"),
    ("docs/pipeline.md", 'stream_cache_dir="/local/nvme/tfpipe"', 'stream_cache_dir="local-nvme/tfpipe"',
     "the test writes only inside its own directory"),
]

# -- names the docs use without defining them: (page, name, code that binds it, why) ---------------------------

_CRITEO_MODEL = """
import keras
ids = keras.Input(shape=(39,), dtype="int64", name="ids")
values = keras.Input(shape=(39,), dtype="float32", name="values")
x = keras.layers.Concatenate()([keras.layers.Rescaling(1e-9)(keras.ops.cast(ids, "float32")), values])
model = keras.Model({"ids": ids, "values": values}, keras.layers.Dense(1)(x))
model.compile(optimizer="sgd", loss="mse")
"""
PROVIDED = [
    ("docs/pipeline.md", "model", _CRITEO_MODEL,
     "the page trains 'your model'; a tiny Keras model over the set's ids and values stands in"),
    ("docs/pipeline.md", "make_model", "def make_model():\n" + "".join(f"    {line}\n" for line in
                                                                     _CRITEO_MODEL.strip().splitlines())
     + "    return model\n", "the resume example builds 'your model' on a first run; the tiny model above"),
    ("docs/pipeline.md", "train_step", "def train_step(features, label):\n    pass\n",
     "the custom loop calls 'your' train step; a no-op stands in"),
    ("docs/pipeline.md", "my_plan",
     "from converters import read_manifest\nfrom sharding import Topology, plan\n"
     "my_plan = plan(read_manifest('s3://bucket/pile-train'), Topology(hosts=1, workers_per_host=2), batch_size=8)\n",
     "a plan made as docs/sharding.md shows, for two workers on this host"),
    ("docs/pipeline.md", "rank", "rank = 1\n", "this worker's rank in the plan above"),
    ("docs/sharding.md", "estimator",
     "class Estimator:\n    def fit(self, inputs):\n        assert inputs and all(hasattr(v, 'config') for v in inputs.values())\n"
     "estimator = Estimator()\n",
     "a SageMaker estimator needs an AWS account and the sagemaker SDK; a stand-in takes the inputs"),
    ("docs/sharding.md", "TrainingInput",
     "class TrainingInput:\n    def __init__(self, s3_data, **kw):\n        self.config = dict(kw, S3Uri=s3_data)\n",
     "sagemaker.inputs.TrainingInput (the sagemaker SDK is not a tfpipe dependency); a stand-in with its "
     "s3_data argument"),
]

# -- what a page's reader has before its first Python block ----------------------------------------------------

BYLABEL_DAY = [("day/00.libsvm", criteo, (800, 4)), ("day/01.libsvm", criteo, (800, 5))]
RCV1_LIKE = "1 3:0.5 47237:1\n0 1:1 20:0.25 300:2\n" * 64   # one-based ids up to 47,237: num_features 47,237

INPUTS = {
    "README.md": [("00.jsonl.zst", pile, (30, 1)), ("shards", shard_set, (3000, 2)),
                  ("data/criteo", shard_set, (3000, 8))],
    "docs/bench.md": [("shards", shard_set, (3000, 4))],
    "docs/libsvm.md": shell_docs.INPUTS["docs/libsvm.md"],
    "docs/pipeline.md": [("shards", shard_set, (2000, 4)), ("rcv1.svm", text_file, (RCV1_LIKE,))] + BYLABEL_DAY,
    "docs/sharding.md": [("data/criteo", shard_set, (24_000, 40))],   # >= 32 files of > 512 records: 4 x 8 workers,
    "docs/shardsets.md": shell_docs.INPUTS["docs/shardsets.md"],
    "docs/text.md": [("00.jsonl.zst", pile, (30, 1))],
    "docs/layout.md": [("data/pile/00.jsonl.zst", pile, (30, 1))],
    "docs/offload.md": [("shards", shard_set, (4000, 4))],
}

# page -> [(shell command, the page whose shell block shows it, why)]: run (bash -e) after INPUTS, before the blocks
_TOKENIZER = "tfpipe tokenizer train 00.jsonl.zst --vocab-size 1000 --out tokenizer.json"
SETUP = {
    "README.md": [(_TOKENIZER, "docs/text.md", "the block converts with a trained tokenizer.json (docs/text.md)")],
    "docs/text.md": [(_TOKENIZER, "docs/text.md", "the block converts with the tokenizer.json trained above it")],
    "docs/libsvm.md": [("tfpipe convert libsvm data/day_0.libsvm.gz data/day_1/ 'more/*.zst' --out shards/ "
                        "--field-size 39", "docs/libsvm.md", "the trainer's parse spec reads the page's shards/")],
    "docs/shardsets.md": [("tfpipe index data/", "docs/shardsets.md",
                           "the block reads the set `tfpipe index` adopts above it")],
    "docs/pipeline.md": [
        ("tfpipe convert libsvm day/ --out bylabel/ --field-size 39 --split-by-label", "docs/prep.md",
         "the per-label group the balancing example reads, made as docs/prep.md shows"),
        ("tfpipe convert libsvm rcv1.svm --out sparse/ --sparse", "docs/libsvm.md",
         "the sparse set the Keras sparse-input example reads"),
        ("tfpipe convert libsvm day/ --out s3://bucket/pile-train/ --field-size 39 --shard-size 64KiB", "docs/libsvm.md",
         "the remote set the streaming example reads (any set will do; moto stands in for S3)"),
    ],
}

# (page, text of the block): a block the docs say must come first in the script, run first on its page
FIRST = [("docs/pipeline.md", "configure_threads()          # first thing in the script")]

EXEMPT: list[tuple[str, str]] = []   # (page, the reason's first words) of every skipped Python block


def substituted(page: str, text: str) -> str:
    for p, old, new, _ in SUBSTITUTIONS:
        if p == page:
            text = text.replace(old, new)
    return text


def names(text: str) -> tuple[set[str], set[str]]:
    """(names the block reads, names it binds): assignments, imports, defs, loop targets."""
    read, bound = set(), set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            bound.add(node.name)
    return read, bound


def plan_page(page: str) -> list[dict]:
    """The page's blocks as the child runs them: id, text (substituted), and the provided names to bind first."""
    out = []
    first = [text for p, text in FIRST if p == page]
    for b in sorted((b for b in PYTHON if b.page == page), key=lambda b: not any(f in b.text for f in first)):
        if b.note and b.note[0] == "skip":
            continue
        text = substituted(page, b.text)
        read, bound = names(text)
        provide = {name: code for p, name, code, _ in PROVIDED if p == page and name in read - bound}
        out.append({"id": b.id, "text": text, "provide": provide})
    return out


# the child's script; guarded, so that a worker process started by spawn/forkserver (which imports the main
# module again) does not run the blocks again
RUNNER = r'''
import json, sys, traceback


def main():
    ns = {"__name__": "__main__"}
    for b in json.load(open(sys.argv[1])):
        print(f"doc-test: running {b['id']}", flush=True)
        for name, code in b["provide"].items():
            own = {"__name__": "doc_test_provided"}
            exec(code, own)
            ns[name] = own[name]
        try:
            exec(compile(b["text"], b["id"], "exec"), ns)
        except BaseException:
            traceback.print_exc()
            print(f"doc-test: FAILED {b['id']}", flush=True)
            sys.exit(1)
    print("doc-test: all blocks ran", flush=True)


if __name__ == "__main__":
    main()
'''


def run_page(page: str, cwd: Path, env: dict, timeout: float = PAGE_TIMEOUT) -> subprocess.CompletedProcess:
    """The page's blocks in a child Python; past ``timeout`` its process group is killed and TimeoutExpired
    raised."""
    (cwd / ".doc-test-blocks.json").write_text(json.dumps(plan_page(page)))
    (cwd / ".doc-test-run.py").write_text(RUNNER)
    argv = [sys.executable, ".doc-test-run.py", ".doc-test-blocks.json"]
    return run_in_session(argv, cwd=cwd, env=env, timeout=timeout, merge_stderr=True)


# -- the tests ----------------------------------------------------------------------------------------------

def test_blocks_are_found():
    assert len(PYTHON) >= 25, [b.id for b in PYTHON]
    assert set(INPUTS) | set(SETUP) <= set(RUN_PAGES), (set(INPUTS) | set(SETUP)) - set(RUN_PAGES)
    assert all(b.text.strip() for b in PYTHON)


@pytest.mark.parametrize("b", PYTHON, ids=lambda b: b.id)
def test_block_parses(b):
    compile(substituted(b.page, b.text), b.id, "exec")


def test_exemptions_stay_few():
    skipped = [(b.page, b.note[1]) for b in PYTHON if b.note and b.note[0] == "skip"]
    assert all(reason for _, reason in skipped), f"an exemption without its reason: {skipped}"
    assert len(skipped) == len(EXEMPT) and all(page == p and reason.startswith(r) for (page, reason), (p, r)
                                               in zip(skipped, EXEMPT)), f"exemptions in the docs: {skipped}"
    assert len(EXEMPT) <= 3


@pytest.mark.parametrize("sub", SUBSTITUTIONS, ids=lambda s: f"{s[0]}:{s[1][:30]}")
def test_substitution_still_matches_the_docs(sub):
    page, old, new, reason = sub
    assert reason and old != new
    assert any(old in b.text for b in PYTHON if b.page == page), f"{page} has no python block with {old!r}: drop it"


@pytest.mark.parametrize("page, text", FIRST)
def test_first_blocks_are_found_and_run_first(page, text):
    assert text in plan_page(page)[0]["text"]


@pytest.mark.parametrize("prov", PROVIDED, ids=lambda p: f"{p[0]}:{p[1]}")
def test_provided_name_is_still_needed(prov):
    page, name, code, reason = prov
    assert reason
    assert name in names(code)[1], f"the code for {name} does not bind it"
    assert any(name in item["provide"] for item in plan_page(page)), f"no block of {page} reads {name}: drop it"


@pytest.mark.parametrize("page, command, shown_in, reason",
                         [(page, *s) for page, setups in SETUP.items() for s in setups], ids=lambda x: str(x)[:40])
def test_setup_commands_are_the_docs(page, command, shown_in, reason):
    """A set-up command is one the docs show (its first words, before the test's paths and sizes)."""
    assert reason
    head = " ".join(command.split()[:3])
    assert any(head in b.text for b in shell_docs.SHELL if b.page == shown_in), f"{shown_in} shows no {head!r}"


def test_provided_names_do_not_leak(tmp_path):
    """A provided name's helpers stay out of the page's namespace: a block that forgets an import fails. The
    provided code imports a module and binds a helper, as ``_CRITEO_MODEL`` does with keras (json instead: the
    runner treats every module alike, and a keras import costs a TensorFlow start)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    provided = "import json\nhelper = {}\nmodel = json.dumps(helper)\n"
    for forgotten in ("json", "helper"):
        (tmp_path / ".doc-test-blocks.json").write_text(json.dumps([
            {"id": "x:1", "text": f"assert model == '{{}}'\n{forgotten}", "provide": {"model": provided}}]))
        (tmp_path / ".doc-test-run.py").write_text(RUNNER)
        r = subprocess.run([sys.executable, ".doc-test-run.py", ".doc-test-blocks.json"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 1 and f"NameError: name '{forgotten}'" in r.stderr + r.stdout, \
            (forgotten, r.stdout, r.stderr)


def test_a_failing_or_hung_page_fails(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "plan_page", lambda page: [
        {"id": "a:1", "text": "x = 1", "provide": {}}, {"id": "a:2", "text": "assert x == 2", "provide": {}}])
    r = run_page("a", tmp_path, {**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 1 and "doc-test: FAILED a:2" in r.stdout
    monkeypatch.setattr(sys.modules[__name__], "plan_page", lambda page: [
        {"id": "a:1", "text": "import time\ntime.sleep(60)", "provide": {}}])
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        run_page("a", tmp_path, {**os.environ, "PYTHONPATH": str(ROOT)}, timeout=1)
    assert time.monotonic() - started < 30


@pytest.fixture(scope="module")
def moto(moto_endpoint):
    import boto3

    client = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    for name in shell_docs.BUCKETS:
        client.create_bucket(Bucket=name)
    client.close()
    return moto_endpoint


@pytest.mark.parametrize("page", RUN_PAGES)
def test_page_python_blocks_run(page, tmp_path, moto):
    """Every Python block of the page, in order, in one namespace and one directory: each must run."""
    shell_docs._empty_buckets(moto)
    make_inputs(INPUTS.get(page, []), tmp_path, moto)
    env = shell_docs._env(tmp_path, moto, page)
    for command, _, _ in SETUP.get(page, []):
        r = subprocess.run(["bash", "-e", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=PAGE_TIMEOUT, stdin=subprocess.DEVNULL)
        assert r.returncode == 0, f"set-up {command!r} failed:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    try:
        r = run_page(page, tmp_path, env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{page}: its Python blocks still ran after {PAGE_TIMEOUT} s (killed)")
    assert r.returncode == 0 and "doc-test: all blocks ran" in r.stdout, r.stdout[-6000:]
