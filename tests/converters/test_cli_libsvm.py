"""``tfpipe convert libsvm`` and ``tfpipe quickstart``: argv -> exit code and message."""
import json
import os
import subprocess
import sys

import pytest
from built_once import built_once
from cli_batch import Run, run_commands
from notices import without_compile_notices

from converters.cli import main
from converters.shardset.reader import read_manifest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _tfrecord() -> bytes:
    from converters.tfrecord.crc import masked_crc32c

    payload = b"not an Example, but framed as a record"
    length = len(payload).to_bytes(8, "little")
    return length + masked_crc32c(length).to_bytes(4, "little") + payload + masked_crc32c(payload).to_bytes(4, "little")


def _files(tmp_path):
    """The inputs of the tests, written into ``tmp_path`` (made if missing)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "good.txt").write_bytes(b"1 1:0.5 2:1\n0 1:1 3:2\n# c\n\n")
    (tmp_path / "bad.txt").write_bytes(b"1 1:1 2:1\n\n1 2:1 1:1\nabc 1:1 2:2\n")
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "mixed.txt").write_bytes(b"1 1:1 2:1\n0 1:1 2:1 3:1\n")
    (tmp_path / "shards").mkdir()
    (tmp_path / "shards" / "part.tfrecord").write_bytes(_tfrecord())
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("x")
    return tmp_path


@pytest.fixture
def files(tmp_path):
    return _files(tmp_path)


CASES = [
    # argv, exit code, stdout has, stderr has (one line when it is an error)
    (["{d}/good.txt", "--out", "{d}/o", "--field-size", "2"], 0,
     ["converted 1 input(s): 2 records read, 2 written, 0 skipped, 2 blank", "wrote 1 shard(s)", "index.json"], []),
    (["{d}/good.txt", "--out", "{d}/o", "--field-size", "2", "--compression", "gzip", "--shard-size", "1KiB",
      "--workers", "2", "--prefix", "part"], 0, ["GZIP"], []),
    (["{d}/bad.txt", "--out", "{d}/o", "--field-size", "2", "--strict-ids"], 2, [],
     ["tfpipe: error: {d}/bad.txt:3: unsorted_index: indices are not sorted", "--on-error skip"]),
    (["{d}/bad.txt", "--out", "{d}/o", "--field-size", "2", "--strict-ids", "--on-error", "skip"], 0,
     ["3 records read, 1 written, 2 skipped"],
     ["skipped 2 bad line(s): bad_label 1, unsorted_index 1", "{d}/bad.txt:3: unsorted_index",
      "{d}/bad.txt:4: bad_label"]),
    (["{d}/good.txt", "--out", "{d}/o", "--field-size", "3"], 2, [], ["good.txt:1: pair_count: wrong number"]),
    (["{d}/good.txt", "--out", "{d}/o", "--field-size", "3", "--pad"], 0, ["2 written"], []),
    (["{d}/good.txt", "--out", "{d}/o", "--field-size", "2", "--max-index", "2"], 2, [],
     ["good.txt:2: index_too_large"]),
    (["{d}/good.txt", "--out", "{d}/o", "--field-size", "2", "--index-base", "0"], 0, ["index base 0"], []),
    # fixed width is positional by default: ids as written, a row whose ids do not increase is data (counted)
    (["{d}/good.txt", "--out", "{d}/o", "--field-size", "2"], 0,
     ["index base asis", "ids: positional (line order, repeats kept), as written"], []),
    (["{d}/bad.txt", "--out", "{d}/o", "--field-size", "2", "--on-error", "skip"], 0,
     ["3 records read, 2 written, 1 skipped", "1 row(s) with ids that repeat or do not increase"],
     ["{d}/bad.txt:4: bad_label"]),
    (["{d}/good.txt", "--out", "{d}/o", "--field-size", "2", "--index-base", "asis"], 0, ["index base asis"], []),
    (["{d}/good.txt", "--out", "{d}/o", "--sparse"], 0, ["index base 1", "ids: sparse vector"], []),
    (["{d}/empty.txt", "--out", "{d}/o", "--field-size", "2"], 2, [], ["no records to write"]),
    (["{d}/missing.txt", "--out", "{d}/o", "--field-size", "2"], 2, [], ["does not exist"]),
    # a wrong --field-size: every line has the same other pair count -> the option is named, not --on-error skip
    (["{d}/good.txt", "--out", "{d}/o", "--field-size", "13"], 2, [],
     ["good.txt:1: pair_count: ", "every line has 2 pairs: did you mean --field-size 2?"]),
    (["{d}/good.txt", "--out", "{d}/o", "--field-size", "13", "--on-error", "skip"], 2, [],
     ["no records to write", "2 bad line(s) skipped): every line has 2 pairs: did you mean --field-size 2?"]),
    (["{d}/mixed.txt", "--out", "{d}/o", "--field-size", "4"], 2, [],  # counts differ: bad data, not the option
     ["mixed.txt:1: pair_count: ", "(use --on-error skip to skip bad lines)"]),
    # a TFRecord file is named as one, with the command that adopts it, whatever --on-error says
    (["{d}/shards/part.tfrecord", "--out", "{d}/o", "--field-size", "39"], 2, [],
     ["{d}/shards/part.tfrecord is a TFRecord file", "`tfpipe index {d}/shards/part.tfrecord`"]),
    (["{d}/shards", "--out", "{d}/o", "--field-size", "39", "--on-error", "skip"], 2, [],
     ["{d}/shards/part.tfrecord is a TFRecord file", "`tfpipe index {d}/shards/part.tfrecord`"]),
    (["{d}/good.txt", "--out", "{d}/taken", "--field-size", "2"], 3, [], ["is not empty", "--overwrite"]),
    (["{d}/good.txt", "--out", "{d}/taken", "--field-size", "2", "--overwrite"], 3, [], ["did not write"]),
    (["{d}/good.txt", "--out", "{d}/o", "--sparse"], 0,
     ["2 written", "sparse: num_features 3, nonzeros per row min 2 mean 2.0 max 2"], []),
    (["{d}/good.txt", "{d}/empty.txt", "--out", "{d}/o", "--sparse", "--multilabel"], 0, ["2 written"], []),
    (["{d}/bad.txt", "--out", "{d}/o", "--sparse"], 2, [], ["bad.txt:3: unsorted_index"]),
    (["{d}/bad.txt", "--out", "{d}/o", "--sparse", "--on-error", "skip"], 0, ["3 records read, 1 written"], []),
    (["{d}/good.txt", "--out", "{d}/o", "--sparse", "--keep-qid"], 2, [], ["good.txt:1: missing_qid"]),
]


@pytest.fixture(scope="module")
def table_runs(tmp_path_factory):
    """Every CASES command line run in one fresh process, as a user's ``tfpipe`` runs it (TensorFlow not loaded:
    parser workers start by fork), each on its own copy of the inputs; built once per test run, then only read.
    Per case: its input directory and what ``main`` returned and printed."""
    def build(root):
        dirs = [_files(root / f"case{i}") for i in range(len(CASES))]
        argvs = [["convert", "libsvm", *[a.format(d=d) for a in argv], "--no-progress"]
                 for d, (argv, *_) in zip(dirs, CASES)]
        run_commands(argvs, str(root / "runs.json"))

    root = built_once(tmp_path_factory, "cli-libsvm-table", build)
    with open(root / "runs.json", encoding="utf-8") as f:
        runs = [Run(**r) for r in json.load(f)]
    assert len(runs) == len(CASES)
    return [(root / f"case{i}", run) for i, run in enumerate(runs)]


@pytest.mark.parametrize("i,argv,code,out_has,err_has", [(i, *case) for i, case in enumerate(CASES)])
def test_convert_argv_table(table_runs, i, argv, code, out_has, err_has):
    files, run = table_runs[i]
    argv = [a.format(d=files) for a in argv]
    out, err = run.out, run.err
    assert run.code == code, (run.code, err)
    for s in out_has:
        assert s.format(d=files) in out
    for s in err_has:
        assert s.format(d=files) in err
    assert "Traceback" not in err
    manifest = files / "o" / "index.json"
    if code:
        assert len(without_compile_notices(err).strip().splitlines()) == 1
        assert not manifest.exists()
        if "every line has" in err or "TFRecord" in err:  # advice that cannot work is not given
            assert "--on-error skip" not in err
        if str(files / "o") in argv:  # a failed run leaves no --out it created behind
            assert not (files / "o").exists()
    elif "taken" not in argv:
        assert read_manifest(files / "o").records == int(out.split(" written")[0].split()[-1])


@pytest.mark.parametrize("bad_args", [
    ["--field-size", "0"], ["--field-size", "x"], ["--field-size", "2", "--shard-size", "lots"],
    ["--field-size", "2", "--index-base", "2"], ["--field-size", "2", "--workers", "0"],
    ["--field-size", "2", "--on-error", "ignore"], ["--field-size", "2", "--max-index", "-1"],
    [],  # --field-size (or --sparse) is required
    ["--field-size", "2", "--sparse"], ["--sparse", "--pad"], ["--sparse", "--truncate"],
    ["--field-size", "2", "--multilabel"], ["--field-size", "2", "--keep-qid"], ["--sparse", "--strict-ids"],
])
def test_usage_errors_exit_64(files, capsys, bad_args):
    with pytest.raises(SystemExit) as e:
        main(["convert", "libsvm", str(files / "good.txt"), "--out", str(files / "o"), *bad_args])
    assert e.value.code == 64  # usage errors have their own exit code (bad input is 2)
    assert "usage:" in capsys.readouterr().err


def test_real_process_exit_code_and_one_line(files):
    r = subprocess.run([sys.executable, "-c", "from converters.cli import main; raise SystemExit(main())",
                        "convert", "libsvm", str(files / "bad.txt"), "--out", str(files / "o"), "--field-size", "2",
                        "--strict-ids"],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ROOT})
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        f"tfpipe: error: {files}/bad.txt:3: unsorted_index: indices are not sorted in increasing order ('1:1') "
        "(use --on-error skip to skip bad lines)"]
    assert not (files / "o" / "index.json").exists()


def test_quickstart_runs_and_reruns(tmp_path, capsys):
    out = tmp_path / "qs"
    assert main(["quickstart", "--out", str(out), "--lines", "1500"]) == 0
    text = capsys.readouterr().out
    assert "read all 1,500 records back through tf.data" in text
    assert str(out / "shards") in text and "verified" in text
    assert "tfpipe convert tabular" in text.split("Next:")[1]  # raw click logs: the next step names it
    assert read_manifest(out / "shards").records == 1500
    # quickstart may replace its own output
    assert main(["quickstart", "--out", str(out), "--lines", "700"]) == 0
    assert read_manifest(out / "shards").records == 700


# what the README's first command leaves out: `pip install -e '.[tf]'` must be enough for the quickstart
_NOT_IN_TF_EXTRA = ("apache_beam", "boto3", "botocore", "moto", "sklearn", "matplotlib", "tokenizers", "hypothesis",
                    "pytest", "pynvml", "sagemaker_tensorflow")
_BLOCK = """
import sys
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ImportError("blocked: " + name + " is not in tfpipe's base or [tf] dependencies")
sys.meta_path.insert(0, _Block())
from converters.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_quickstart_needs_only_the_tf_extra(tmp_path):
    """The README's first command installs ``.[tf]``: the quickstart imports nothing of the other extras (tried
    with them blocked, in a fresh process; numba's and numpy's optional imports are not blocked)."""
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    first = next(ln for ln in readme.splitlines() if "tfpipe quickstart" in ln and "pip install" in ln)
    assert "pip install -e '.[tf]' && tfpipe quickstart" in first
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-c", _BLOCK.format(blocked=_NOT_IN_TF_EXTRA), "quickstart", "--out",
                        str(tmp_path / "q"), "--lines", "300", "--no-progress"], env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "4. verified" in r.stdout


def test_quickstart_refuses_a_directory_it_did_not_make(files, capsys):
    assert main(["quickstart", "--out", str(files / "taken"), "--lines", "100"]) == 3
    assert "not made by quickstart" in capsys.readouterr().err
    assert (files / "taken" / "notes.txt").exists()
