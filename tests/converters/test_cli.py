import json
import os
import re
import subprocess
import textwrap
import sys
import time

import pytest
from notices import without_compile_notices

from converters.cli import main
from converters.libsvm.synthetic import write_criteo_shards


@pytest.fixture(scope="module")
def shard_set(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "set"
    write_criteo_shards(str(out), 200, shard_bytes=20_000)
    return out


@pytest.mark.parametrize("argv,code,out_has,err_has", [
    (["inspect", "{set}"], 0, ["records     200", "ids", "(label)"], []),
    (["inspect", "{set}/index.json", "--json"], 0, ['"records": 200'], []),
    (["verify", "{set}", "--no-progress"], 0, ["OK", "200 records"], []),
    (["inspect", "{missing}"], 2, [], ["tfpipe: error: no manifest"]),
    (["verify", "{missing}"], 2, [], ["tfpipe: error: no manifest"]),
])
def test_argv_table(shard_set, tmp_path, capsys, argv, code, out_has, err_has):
    argv = [a.format(set=shard_set, missing=tmp_path / "nope") for a in argv]
    assert main(argv) == code
    out, err = capsys.readouterr()
    for s in out_has:
        assert s in out
    for s in err_has:
        assert s in err
    assert "Traceback" not in err
    if err_has:
        assert len(without_compile_notices(err).strip().splitlines()) == 1


# every command that reads a path: a missing one is exit code 2 (bad input; docs/architecture.md's table), one line
MISSING_PATH = [
    ["inspect", "{m}"], ["verify", "{m}"], ["index", "{m}"], ["inspect", "{m}/index.json"],
    ["convert", "libsvm", "{m}", "--out", "{t}/o", "--field-size", "2"],
    ["convert", "libsvm", "{m}/*.libsvm", "--out", "{t}/o", "--sparse"],
    ["convert", "text", "{m}", "--out", "{t}/o", "--seq-len", "8"],
    ["reshard", "{m}", "--out", "{t}/o", "--num-shards", "2"],
    ["upload", "{m}", "s3://bucket/never-reached"],
    ["shard", "plan", "{m}", "--batch-size", "8"],
    ["pipeline", "explain", "{m}", "--batch-size", "8"],
    ["pipeline", "tune", "{m}", "--batch-size", "8"],
    ["pipeline", "offsets", "{m}"],
    ["tokenizer", "train", "{m}", "--out", "{t}/tok.json", "--vocab-size", "300"],
]


@pytest.mark.parametrize("argv", MISSING_PATH, ids=lambda a: " ".join(a[:2]))
def test_a_missing_path_is_exit_code_2_on_every_command(tmp_path, capsys, argv):
    missing = tmp_path / "nope"
    code = main([a.format(m=missing, t=tmp_path) for a in argv])
    err = capsys.readouterr().err
    assert code == 2, err
    last = err.strip().splitlines()[-1]  # (pipeline tune first says what it is about to do)
    assert last.startswith("tfpipe: error: ") and str(missing) in last and "Traceback" not in err
    assert err.count("error") == 1 and not (tmp_path / "o").exists()


def test_inspect_json_is_the_manifest(shard_set, capsys):
    assert main(["inspect", str(shard_set), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads((shard_set / "index.json").read_text())


def test_inspect_a_sparse_set(tmp_path, capsys):
    (tmp_path / "in.txt").write_bytes(b"1 qid:3 2:1 9:0\n0 qid:3\n")
    assert main(["convert", "libsvm", str(tmp_path / "in.txt"), "--out", str(tmp_path / "o"), "--sparse",
                 "--keep-qid", "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["inspect", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "ids              int64    [None]   (variable length)" in out and "qid              int64    []" in out
    assert "num_features 9" in out and "nonzeros    min 0 mean 1.0 max 2 total 2" in out
    assert main(["verify", str(tmp_path / "o"), "--no-progress"]) == 0


def test_verify_reports_damage(tmp_path, capsys):
    out = tmp_path / "s"
    m = write_criteo_shards(str(out), 100, shard_bytes=10_000)
    p = out / m.shards[0].name
    p.write_bytes(p.read_bytes()[:-1])
    assert main(["verify", str(out)]) == 4
    err = capsys.readouterr().err
    assert m.shards[0].name in err and "truncated" in err


def test_help_is_fast_and_imports_no_tensorflow():
    code = ("import sys, time; t=time.time(); from converters.cli import build_parser; build_parser(); "
            "print(time.time()-t, 'tensorflow' in sys.modules, 'numba' in sys.modules, 'boto3' in sys.modules)")
    t = time.monotonic()   # this host's clock of now: an interpreter that imports the standard library's parts
    subprocess.run([sys.executable, "-c", "import argparse, json, logging"], check=True)
    bare = time.monotonic() - t
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[1:] == ["False", "False", "False"]
    assert float(out[0]) < max(5.0, 20 * bare), (out[0], bare)


def test_console_script_help():
    r = subprocess.run(["tfpipe", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "convert" in r.stdout and "verify" in r.stdout


TF_START_UP = ("WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
               "I0000 00:00:1796064828.508722    8400 port.cc:153] oneDNN custom operations are on.\n"
               "I0000 00:00:1796065475.326702   23827 cpu_feature_guard.cc:227] This TensorFlow binary is optimized\n"
               "To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow.\n")


@pytest.mark.parametrize("text, kept", [
    (TF_START_UP, ""),
    (TF_START_UP + "E0000 00:00:1.5  1 cuda_dnn.cc:8] Unable to register cuDNN factory\n",
     "E0000 00:00:1.5  1 cuda_dnn.cc:8] Unable to register cuDNN factory\n"),
    ("W1130 18:48:01.000000    12 x.cc:1] a warning\nsomething a library printed\n", ""),
    ("a plain line\n" + TF_START_UP, "a plain line\n"),
    ("", ""),
])
def test_drop_tf_noise(text, kept):
    from converters.cli.quiet import drop_tf_noise

    assert drop_tf_noise(text) == kept


@pytest.mark.parametrize("verbose", [None, "after"])
def test_tensorflow_start_up_lines_stay_off_the_terminal_unless_verbose(tmp_path, verbose):
    """A command that imports TensorFlow (quickstart reads the shards back through tf.data) prints none of
    TensorFlow's C++ start-up log lines; with -v (before or after the subcommand) they come through. Which lines
    TensorFlow prints at the CLI's default level depends on the wheel and the machine (a GPU wheel's CUDA
    errors, a CPU-feature note), so the -v runs ask for every level (``TF_CPP_MIN_LOG_LEVEL=0``, as the docs
    say): TensorFlow then always prints its start-up lines, and -v must let them through. ``main`` counts a -v
    before the subcommand and one after it alike (``args.verbose + args.sub_verbose``): the parser is checked to
    count both, and the run is made with the one after."""
    argv = ["quickstart", "--lines", "300", "--out", str(tmp_path / "q"), "--no-progress"]
    if verbose is not None:
        from converters.cli.main import build_parser

        for where in (["-v", *argv], [*argv, "-v"]):
            args = build_parser().parse_args(where)
            assert args.verbose + getattr(args, "sub_verbose", 0) == 1, where
    argv = {None: argv, "after": [*argv, "-v"]}[verbose]
    code = (f"import sys; from converters.cli import main; rc = main({argv!r}); "
            f"print('keras loaded:', 'keras' in sys.modules, 'scipy.linalg:', 'scipy.linalg' in sys.modules); "
            f"raise SystemExit(rc)")
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "TF_ENABLE_ONEDNN_OPTS")}
    if verbose is not None:
        env["TF_CPP_MIN_LOG_LEVEL"] = "0"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    assert "read all 300 records back" in r.stdout
    # TensorFlow started without Keras, quiet or not, and numba without loading SciPy's linalg for its BLAS probe
    assert "keras loaded: False scipy.linalg: False" in r.stdout
    noisy = [ln for ln in r.stderr.splitlines() if "absl::InitializeLog" in ln or ln.startswith("I0000")]
    assert bool(noisy) == (verbose is not None), r.stderr


@pytest.mark.parametrize("lean", [False, True])
def test_tensorflow_starts_without_keras_in_the_cli_and_loads_it_when_used(lean):
    """``lean_tensorflow_import`` (the CLI's): ``import tensorflow`` leaves Keras (and scikit-learn, which Keras
    loads for its wrappers) unloaded; tf.data works; ``tf.keras`` and ``import keras`` then load and train as
    usual. Without it (a library user's process), TensorFlow loads Keras as it
    always does."""
    code = textwrap.dedent(f"""
        import sys
        from converters.cli.quiet import lean_tensorflow_import
        if {lean}:
            lean_tensorflow_import()
        import tensorflow as tf
        print("keras after import:", "keras" in sys.modules, "sklearn" in sys.modules)
        doubled = tf.data.Dataset.range(5).map(lambda x: x * 2)
        assert doubled.reduce(tf.constant(0, tf.int64), lambda a, b: a + b).numpy() == 20
        import keras
        model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(1)])
        model.compile("sgd", "mse")
        model.fit(tf.zeros((4, 3)), tf.zeros((4, 1)), verbose=0)
        print("keras after use:", "keras" in sys.modules, tf.keras.layers.Dense is keras.layers.Dense)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"keras after import: {not lean} {not lean and _has_sklearn()}" in r.stdout
    assert "keras after use: True True" in r.stdout


@pytest.mark.parametrize("skip", [False, True])
def test_numba_starts_without_its_blas_probe_in_the_cli_and_blas_kernels_still_compile(skip):
    """``skip_numba_blas_probe`` (the CLI's): the first kernel sets numba up without loading ``scipy.linalg``
    (numba's BLAS probe); a kernel that uses BLAS compiles, loads it and computes as usual. Without it, numba
    loads ``scipy.linalg`` with the first kernel."""
    pytest.importorskip("scipy.linalg")
    code = textwrap.dedent(f"""
        import sys
        import numpy as np
        from converters.util.blasprobe import skip_numba_blas_probe
        from converters.util.jit import njit
        if {skip}:
            skip_numba_blas_probe()
        total = njit(lambda a: a.sum())
        assert total(np.arange(4)) == 6
        print("linalg after a kernel:", "scipy.linalg" in sys.modules)
        dot = njit(lambda a, b: np.dot(a, b))
        assert dot(np.arange(3.0), np.arange(3.0)) == 5.0
        print("linalg after np.dot:", "scipy.linalg" in sys.modules)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"linalg after a kernel: {not skip}" in r.stdout
    assert "linalg after np.dot: True" in r.stdout


def _has_sklearn() -> bool:
    import importlib.util

    return importlib.util.find_spec("sklearn") is not None


# -- usage mistakes: exit 64 (not 2, bad input), the command's usage, one error line and a hint ---------------

@pytest.mark.parametrize("argv, error, hint", [
    (["convert", "libsvm", "{x}", "--out", "{o}", "--feild-size", "39"], "unrecognized arguments: --feild-size",
     "did you mean --field-size?"),
    (["convert", "libsvm", "{x}", "--out", "{o}", "--field-size", "39", "--work", "2"],  # no abbreviations
     "unrecognized arguments: --work 2", "did you mean --workers?"),
    (["convert", "libsvm", "{x}", "--out", "{o}", "--field-size", "39", "--shard", "1MiB"],
     "unrecognized arguments: --shard 1MiB", "did you mean --shard-size?"),
    (["convert", "text", "{x}", "--out", "{o}", "--seq-len", "8", "--seq-lenght", "9"],
     "unrecognized arguments: --seq-lenght", "did you mean --seq-len?"),
    (["reshard", "{set}", "--out", "{o}", "--num-shard", "2"], "unrecognized arguments: --num-shard",
     "did you mean --num-shards?"),
    (["pipeline", "explain", "{set}", "--batch-size", "8", "--rnks", "2"], "unrecognized arguments: --rnks",
     "did you mean --ranks?"),
    (["convrt", "libsvm"], "invalid choice: 'convrt'", "did you mean 'convert'?"),
    (["convert", "libsvm", "{x}", "--out", "{o}"], "one of the arguments --field-size --sparse is required", None),
    (["convert", "libsvm", "{x}", "--out", "{o}", "--field-size", "0"], "argument --field-size: expected a "
     "positive integer, got '0'", None),
    (["inspect"], "the following arguments are required: SET", None),
    (["inspect", "{set}", "--jsn"], "unrecognized arguments: --jsn", "did you mean --json?"),
])
def test_usage_mistakes(shard_set, tmp_path, capsys, argv, error, hint):
    argv = [a.format(x=tmp_path / "x.txt", o=tmp_path / "o", set=shard_set) for a in argv]
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 64
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert lines[0].startswith("usage: tfpipe")
    errors = [ln for ln in lines if ": error: " in ln]
    hints = [ln for ln in lines if ": hint: " in ln]
    assert len(errors) == 1 and error in errors[0], err
    assert (hints == [] if hint is None else len(hints) == 1 and hint in hints[0]), err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("argv, needles, absent", [
    (["convert", "libsvm", "--help"], ["(--field-size N | --sparse)", "--endpoint-url URL"], []),
    (["convert", "text", "--help"], ["--endpoint-url URL"], []),
    (["reshard", "--help"], ["seed of --shuffle (required with it)", "SET"], ["--balance"]),
    (["quickstart", "--help"], ["--no-progress"], []),
    (["tokenizer", "train", "--help"], ["--no-progress"], []),
    (["pipeline", "explain", "--help"], ["--ranks N", "--rank I", "(default 0)", "(default file)"], ["--num-shards"]),
    (["bench", "tune", "--help"], ["--repeats N", "--json-out PATH"], ["``", "issue 14", "--rounds"]),
    (["bench", "pipeline", "--help"], ["--json-out PATH", "SET"], ["``"]),
    (["bench", "threads", "--help"], ["--cores N"], ["--cpus", "``"]),
    (["--help"], ["(Criteo TSV/CSV/Parquet -> DeepFM/DLRM", "LibSVM", "text"], []),
    (["processing", "run", "--help"], ["convert {libsvm|text|tabular} ..."], ["{libsvm|text}"]),
    (["processing", "launch", "--help"], ["-- convert {libsvm|text|tabular} ..."], ["{libsvm|text}"]),
])
def test_help_pages(capsys, argv, needles, absent):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 0
    out = capsys.readouterr().out
    for n in needles:
        assert n in out, n
    for n in absent:
        assert n not in out, n


@pytest.mark.parametrize("argv, hint", [
    (["pipeline", "explain", "SET", "--batch-size", "8", "--num-shards", "2"], "--ranks"),
    (["pipeline", "explain", "SET", "--batch-size", "8", "--shard-index", "1"], "--rank"),
    (["pipeline", "explain", "SET", "--batch-size", "8", "--cache-dir", "x"], "--stream-cache-dir"),
    (["bench", "tune", "SET", "--rounds", "2"], "--repeats"),
    (["bench", "threads", "--cpus", "2"], "--cores"),
    (["bench", "convert-libsvm", "--cpu", "1"], "--pin-core"),
    (["bench", "convert-text", "--threads", "2"], "--workers"),
])
def test_spellings_outside_the_vocabulary_are_refused_with_the_right_one(argv, hint, shard_set, capsys):
    argv = [str(shard_set) if a == "SET" else a for a in argv]
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 64
    err = capsys.readouterr().err
    assert f"unrecognized arguments: {argv[-2]}" in err and f"hint: did you mean {hint}?" in err, err


def test_inspect_a_text_set_shows_tokenizer_and_subsets(tmp_path, capsys):
    from converters.text.convert import convert_text
    from converters.text.synthetic import write_pile_jsonl

    write_pile_jsonl(tmp_path / "p.jsonl", 300, seed=1, mean_words=60)
    m = convert_text(str(tmp_path / "p.jsonl"), str(tmp_path / "o"), seq_len=64, workers=1)
    assert main(["inspect", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "tokenizer   byte   vocabulary 257, eod id 256" in out
    assert f"tokens      {m.extra['tokens']:,}" in out and m.extra["tokens"] >= 1000  # thousands separators
    assert "None" not in out  # absent fields (mask of an unpadded set) are left out
    subsets = m.extra["subsets"]
    assert f"subsets     {len(subsets)}" in out
    for name, c in subsets.items():
        assert re.search(rf"^  {re.escape(name)} +{c['documents']:,} +{c['tokens']:,}$", out, re.M), name


def test_sigterm_passes_through_code_that_swallows_all_but_exits(tmp_path):
    """Third-party code with ``except (KeyboardInterrupt, SystemExit): raise`` then a bare ``except`` (Beam's
    IPython probe while a pipeline is built) must not swallow the CLI's SIGTERM exception: the run still ends 143."""

    code = textwrap.dedent("""
        import os, signal, sys, time
        from converters.cli.main import _terminate_cleanly
        _terminate_cleanly()
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)
        except (KeyboardInterrupt, SystemExit):
            raise
        except:  # noqa: E722
            print("swallowed")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout) == (143, ""), r.stderr
