"""Conversion on Apache Beam, run for real (the in-process FnApiRunner; two worker processes in
multi-processing mode): byte-identical shards and equal manifests to the local converters, the same errors
for bad input, nothing left behind, runner and option handling."""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

import pytest
from engines_data import assert_same_output, bad_jsonl, libsvm_files, spoil, text_files

from converters.cli import main
from converters.libsvm.job import LibsvmJob
from converters.libsvm.convert import run as libsvm_local
from converters.libsvm.options import LibsvmOptions
from converters.shardset.options import ShardOutputOptions
from converters.shardset.reader import read_manifest
from converters.text.convert import run as text_local
from converters.text.options import TextOptions
from converters.util.errors import InputError, TfpipeError

beam = pytest.importorskip("converters.engines.beam", exc_type=ImportError)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MULTI = {"direct_num_workers": 2, "direct_running_mode": "multi_processing"}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("beam-inputs")
    bad = libsvm_files(d / "bad", sizes=(5, 700, 1600), seed=4)
    spoil(bad[2], {1200: b"1 2:1 1:1", 1500: b"label 1:1"})  # unsorted: bad with --strict-ids
    rep = libsvm_files(d / "rep", sizes=(40, 700, 1600), seed=6)
    spoil(rep[1], {7: REPEAT})
    spoil(rep[2], {3: REPEAT, 1400: REPEAT, 1401: REPEAT})
    return {"libsvm": libsvm_files(d / "libsvm"), "bad": bad, "rep": rep, "text": text_files(d / "text")[:3],
            "badtext": text_files(d / "text")[:1] + [bad_jsonl(str(d / "bad.jsonl"))]}


# a DeepFM row: numeric field 13 and the first categorical field both id 13 (positional data, not an error)
REPEAT = b"1 " + b" ".join(b"%d:1" % i for i in [*range(1, 14), 13, *range(15, 40)])


@pytest.fixture
def clean_cwd(tmp_path, monkeypatch):
    """Run in an empty current directory; the test checks it stays empty (no beam-temp-* or other files)."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd


def _libsvm_opts(on_error="raise", shard_size=64 << 10, strict_ids=False):
    return LibsvmOptions(39, output=ShardOutputOptions(shard_size=shard_size, on_error=on_error),
                         strict_ids=strict_ids)


def _text_opts(on_error="raise", shard_size=16 << 10):
    return TextOptions(seq_len=63, output=ShardOutputOptions(shard_size=shard_size, on_error=on_error))


@pytest.mark.parametrize("beam_options", [{}, pytest.param(MULTI, marks=pytest.mark.slow)], ids=["default", "2proc"])
def test_libsvm_same_bytes_as_local(data, tmp_path, clean_cwd, beam_options):
    opts = _libsvm_opts()
    local = libsvm_local(data["libsvm"], tmp_path / "local", opts, workers=1)
    m = beam.convert_libsvm(data["libsvm"], tmp_path / "beam", opts, beam_options=beam_options, unit_size=96 << 10)
    assert_same_output(tmp_path / "local", tmp_path / "beam")
    assert m == local and len(m.shards) > 5 and [i.records_read for i in m.inputs] == [5, 1500, 6000]
    assert list(clean_cwd.iterdir()) == []


def test_columnar_libsvm_same_bytes_as_local(data, tmp_path, clean_cwd):
    opts = LibsvmOptions(39, output=ShardOutputOptions(shard_size=64 << 10, layout="columnar", block_rows=128))
    local = libsvm_local(data["libsvm"], tmp_path / "local", opts, workers=1)
    m = beam.convert_libsvm(data["libsvm"], tmp_path / "beam", opts, unit_size=96 << 10)
    assert_same_output(tmp_path / "local", tmp_path / "beam")
    assert m == local and m.layout.columnar and len(m.shards) > 5
    assert all(s.records % 128 == 0 for s in m.shards[:-1]) and m.records == 7505


@pytest.mark.parametrize("beam_options", [{}, pytest.param(MULTI, marks=pytest.mark.slow)], ids=["default", "2proc"])
def test_text_jsonl_same_bytes_as_local(data, tmp_path, clean_cwd, beam_options):
    opts = _text_opts()
    local = text_local(data["text"], str(tmp_path / "local"), opts, workers=1)
    m = beam.convert_text(data["text"], tmp_path / "beam", opts, beam_options=beam_options, chunk_tokens=4000)
    assert_same_output(tmp_path / "local", tmp_path / "beam")
    assert m == local and len(m.shards) > 3
    assert list(clean_cwd.iterdir()) == []


def test_text_columnar_same_bytes_as_local(data, tmp_path, clean_cwd):

    opts = TextOptions(seq_len=63, output=ShardOutputOptions(shard_size=16 << 10, layout="columnar", block_rows=9))
    local = text_local(data["text"], str(tmp_path / "local"), opts, workers=1)
    m = beam.convert_text(data["text"], tmp_path / "beam", opts, chunk_tokens=4000)
    assert_same_output(tmp_path / "local", tmp_path / "beam")
    assert m == local and len(m.shards) > 3 and m.layout.columnar
    assert list(clean_cwd.iterdir()) == []

def _cli(argv, capsys):
    code = main(argv)
    return code, capsys.readouterr()


def test_bad_libsvm_raise_via_cli(data, tmp_path, clean_cwd, capsys):
    args = ["convert", "libsvm", *data["bad"], "--field-size", "39", "--shard-size", "64KiB", "--no-progress",
            "--strict-ids"]
    code_l, out_l = _cli(args + ["--out", str(tmp_path / "local")], capsys)
    code_b, out_b = _cli(args + ["--out", str(tmp_path / "beam"), "--engine", "beam"], capsys)
    assert code_l == code_b == 2
    assert out_b.err == out_l.err == (f"tfpipe: error: {data['bad'][2]}:1200: unsorted_index: indices are not "
                                      "sorted in increasing order ('1:1') (use --on-error skip to skip bad lines)\n")
    assert not (tmp_path / "beam").exists() and list(clean_cwd.iterdir()) == []


def test_bad_libsvm_skip_same_counts(data, tmp_path):
    opts = _libsvm_opts(on_error="skip", strict_ids=True)
    local = libsvm_local(data["bad"], tmp_path / "local", opts, workers=1)
    m = beam.convert_libsvm(data["bad"], tmp_path / "beam", opts, unit_size=48 << 10)
    assert_same_output(tmp_path / "local", tmp_path / "beam")
    assert m.skipped == local.skipped == {"bad_label": 1, "unsorted_index": 1}
    assert m.inputs[2].examples == local.inputs[2].examples


@pytest.mark.parametrize("engine_args", [{"unit_size": 48 << 10}, {"unit_size": 1 << 30}])
def test_positional_repeats_same_bytes_and_notes_as_local(data, tmp_path, engine_args):
    """Fixed-width ids are positional by default: rows with a repeated id are written as they are (ids as
    written) and counted per input, by Beam's units as by the local blocks and packs."""
    opts = _libsvm_opts()
    local = libsvm_local(data["rep"], tmp_path / "local", opts, workers=2)
    m = beam.convert_libsvm(data["rep"], tmp_path / "beam", opts, **engine_args)
    assert_same_output(tmp_path / "local", tmp_path / "beam")
    assert [i.notes for i in m.inputs] == [i.notes for i in local.inputs] == [{}, {"ids_unordered": 1},
                                                                               {"ids_unordered": 3}]
    assert m.skipped == {} and m.records == 2340 and m.options["index_base_used"] == "asis"


def test_bad_text_raise_and_cli_engine(data, tmp_path, capsys):
    args = ["convert", "text", *data["badtext"], "--seq-len", "15", "--no-progress"]
    code_l, out_l = _cli(args + ["--out", str(tmp_path / "local")], capsys)
    code_b, out_b = _cli(args + ["--out", str(tmp_path / "beam"), "--engine", "beam"], capsys)
    assert code_l == code_b == 2 and out_b.err == out_l.err and f"{data['badtext'][1]}:4: " in out_b.err
    assert not (tmp_path / "beam").exists()  # the failed run removed the --out it made
    code, out = _cli(args + ["--out", str(tmp_path / "skip"), "--engine", "beam", "--on-error", "skip"], capsys)
    assert code == 0 and read_manifest(tmp_path / "skip").skipped == {"empty_text": 1, "invalid_json": 1,
                                                                      "missing_text": 1}


def test_shuffle_and_split_by_label_via_cli_same_bytes_as_local(data, tmp_path, clean_cwd, capsys):
    """``--engine beam --shuffle --split-by-label``: the plan's sort, the scatter stage and pass 2 on Beam write the
    local converter's per-label sets and group manifest, byte for byte."""
    args = ["convert", "libsvm", *data["libsvm"], "--field-size", "39", "--shard-size", "64KiB", "--no-progress",
            "--shuffle", "--seed", "4", "--shuffle-memory", "1MiB", "--split-by-label"]
    code_l, out_l = _cli(args + ["--out", str(tmp_path / "local")], capsys)
    code_b, out_b = _cli(args + ["--out", str(tmp_path / "beam"), "--engine", "beam"], capsys)
    assert code_l == code_b == 0 and "part label=1:" in out_b.out
    assert_same_output(tmp_path / "local", tmp_path / "beam")
    m = read_manifest(tmp_path / "beam")
    assert [p.path for p in m.parts] == ["label=0", "label=1"] and m.options["shuffle"]["seed"] == 4
    assert list(clean_cwd.iterdir()) == []


@dataclass(frozen=True)
class _BrokenJob(LibsvmJob):
    def pass2(self, spec):
        if spec.index == 1:
            raise TfpipeError("shard store on fire")
        return super().pass2(spec)


def test_a_failing_step_leaves_nothing(data, tmp_path, clean_cwd):
    job = LibsvmJob.create(data["libsvm"], tmp_path / "out", _libsvm_opts(), unit_size=96 << 10)
    broken = _BrokenJob(job.options, job.paths, job.area, job.unit_size, job.block_bytes)
    with pytest.raises(TfpipeError, match="^shard store on fire$"):
        beam.run_beam(broken)
    assert not (tmp_path / "out").exists() and list(clean_cwd.iterdir()) == []


def test_s3_output(data, tmp_path, s3):  # s3: the fixture in conftest.py (a real S3 endpoint on 127.0.0.1)
    opts = _libsvm_opts(shard_size=200 << 10)
    url = f"s3://{s3.bucket}/beam"
    m = beam.convert_libsvm(data["libsvm"], url, opts)
    local = libsvm_local(data["libsvm"], tmp_path / "local", opts, workers=1)
    assert m == local
    keys = sorted(o["Key"] for o in s3.client.list_objects_v2(Bucket=s3.bucket).get("Contents", []))
    assert keys == sorted(f"beam/{n}" for n in os.listdir(tmp_path / "local"))
    for n in os.listdir(tmp_path / "local"):
        body = s3.client.get_object(Bucket=s3.bucket, Key=f"beam/{n}")["Body"].read()
        assert body == (tmp_path / "local" / n).read_bytes()


@pytest.mark.parametrize("given, runner, check", [
    ({}, "FnApiRunner", {}),
    ({"runner": "DirectRunner", "direct_num_workers": "2"}, "FnApiRunner", {"direct_num_workers": 2}),
    ({"runner": "apache_beam.runners.direct.direct_runner.SwitchingDirectRunner"}, "FnApiRunner", {}),
    ({"runner": "DataflowRunner", "project": "p", "temp_location": "gs://b/t"}, "DataflowRunner",
     {"project": "p", "temp_location": "gs://b/t"}),
    ({"runner": "FlinkRunner", "flink_master": "host:8081", "save_main_session": True}, "FlinkRunner",
     {"save_main_session": True}),
])
def test_pipeline_options(given, runner, check):
    r, opts = beam.pipeline_options(given)
    assert (type(r).__name__ if not isinstance(r, str) else r) == runner
    assert opts.get_all_options()["runner"] == (None if runner == "FnApiRunner" else runner)
    every = opts.get_all_options()
    assert all(every[k] == v for k, v in check.items())


@pytest.mark.parametrize("given, match", [
    ({"runner": "PrismRunner"}, "downloads a runner binary"),
    ({"runner": "prism"}, "downloads a runner binary"),
    ({"direct_num_wrokers": "2"}, "unknown Beam pipeline option.*direct_num_wrokers"),
    ({"direct_num_workers": "two"}, "invalid int value: 'two'"),
    ({"direct_running_mode": "threads"}, "invalid choice"),
])
def test_pipeline_options_refused(given, match):
    with pytest.raises(ValueError, match=match):
        beam.pipeline_options(given)


@pytest.mark.parametrize("extra, message", [
    (["--beam-option", "runner=PrismRunner"], "downloads a runner binary"),
    (["--workers", "2"], "--workers is the local engine's"),
    (["--beam-option", "noequals"], "KEY=VALUE"),
])
def test_cli_engine_usage_errors(data, tmp_path, capsys, extra, message):
    code, out = _cli(["convert", "libsvm", data["libsvm"][0], "--out", str(tmp_path / "o"), "--field-size", "39",
                      "--engine", "beam", *extra], capsys)
    assert code == 2 and message in out.err
    assert not (tmp_path / "o").exists()
    code, out = _cli(["convert", "libsvm", data["libsvm"][0], "--out", str(tmp_path / "o"), "--field-size", "39",
                      "--beam-option", "runner=DirectRunner"], capsys)
    assert code == 2 and "--beam-option needs --engine beam" in out.err


def test_beam_is_imported_only_for_the_beam_engine():
    code = ("import sys\nfrom converters.cli import main\n"
            "try:\n    main(['convert', 'libsvm', '--help'])\nexcept SystemExit:\n    pass\n"
            "assert 'apache_beam' not in sys.modules, 'apache_beam imported'\n")
    env = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "--engine {local,beam}" in r.stdout and "--beam-option KEY=VALUE" in r.stdout


def test_input_error_values_survive_the_runner():
    """What the driver shows when a step raised inside the runner (in-memory: the exception itself;
    worker processes: the traceback text)."""
    e = InputError("bad", path="f.txt", line=3)
    assert str(beam._failure(RuntimeError("x"))) == "the Beam pipeline failed: x"
    got = beam._failure(RuntimeError(f"Traceback ...\nconverters.util.errors.InputError: {e} [while running 'P']"))
    assert type(got) is InputError and str(got) == "f.txt:3: bad"


def test_nothing_but_loopback_is_contacted(data, tmp_path, monkeypatch):
    """The default runner downloads nothing (no Prism): with every name lookup and connection except to this
    machine refused at once, a conversion runs and nothing tried the network (Beam's DirectRunner would try to
    download the Prism binary first)."""
    import socket

    local = ("127.0.0.1", "::1", "localhost", "0.0.0.0", "", None)
    real_connect, real_lookup = socket.socket.connect, socket.getaddrinfo
    tried = []

    def connect(self, address):
        if self.family != socket.AF_UNIX and address[0] not in local:
            tried.append(address)
            raise OSError(f"network unavailable in this test: {address}")
        return real_connect(self, address)

    def getaddrinfo(host, *args, **kwargs):
        if host not in local:
            tried.append(host)
            raise socket.gaierror(f"network unavailable in this test: {host}")
        return real_lookup(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    m = beam.convert_libsvm(data["libsvm"][:2], tmp_path / "out", _libsvm_opts())
    assert m.records == 1505 and tried == []


def test_text_job_ships_the_tokenizer_to_pass_1_only(data, tmp_path):
    from converters.text.job import TextJob
    from converters.text.tokenizers import train_bpe

    tok = str(tmp_path / "tok.json")
    train_bpe(data["text"][:1], 300, tok)
    job = TextJob.create(data["text"][:1], tmp_path / "out", TextOptions(seq_len=7, tokenizer=tok))
    assert job.tokenizer_json == open(tok, "rb").read() and job.lite().tokenizer_json is None
    os.unlink(tok)  # workers elsewhere do not have the file: pass 1 loads the shipped bytes
    m = beam.run_beam(job)
    assert m.extra["tokenizer"]["sha256"] == job.tokenizer_info.sha256 and m.records > 0


@pytest.mark.parametrize("args, shell", [("sleep 30", True), (["sleep", "30"], False)])
def test_worker_wrapper_ignores_stop_signals_and_runs_no_python_in_the_fork(args, shell):
    """Beam's multi_processing workers start through an exec wrapper (no ``preexec_fn``: Python code in a child
    forked from the threaded driver could wait forever on a lock): the worker ignores SIGINT/SIGTERM and is
    the process itself (no shell around it), and it dies with its parent (``PR_SET_PDEATHSIG``)."""
    import signal
    import subprocess
    import time

    from converters.engines.beamstop import worker_argv

    argv = worker_argv(args, shell)
    assert argv[:3] == [sys.executable, "-S", "-c"]
    proc = subprocess.Popen(argv)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:    # exec'd: the process is the worker, not python or a shell
            with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
                if f.read().split(b"\0")[0] == b"sleep":
                    break
            time.sleep(0.02)
        else:
            raise AssertionError("the wrapper never became the worker")
        for sig in (signal.SIGINT, signal.SIGTERM):
            proc.send_signal(sig)
        time.sleep(0.3)
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_worker_wrapper_exits_when_its_driver_is_gone():
    import subprocess

    from converters.engines.beamstop import worker_argv

    argv = worker_argv(["sleep", "30"], False)
    argv[4] = "1"        # a driver pid that is not its parent: it has gone before the worker started
    r = subprocess.run(argv, timeout=60)
    assert r.returncode == 137


def test_a_sampler_left_running_by_an_interrupted_bundle_is_stopped():
    """A signal between the start of Beam's state-sampler thread and ``StateSampler.start`` saying it started
    leaves a sampler that Beam's bundle clean-up does not stop (its thread is no daemon: the interpreter would
    wait for it at exit, forever). After an interrupted run the driver stops it; the process then exits."""
    code = (
        "from apache_beam.runners.worker import statesampler\n"
        "from apache_beam.utils.counters import CounterFactory\n"
        "from converters.engines.beamstop import stop_interrupted_sampler\n"
        "s = statesampler.StateSampler('interrupted', CounterFactory())\n"
        "statesampler.set_current_tracker(s)\n"
        "statesampler.statesampler_impl.StateSampler.start(s)  # the thread runs; started is still False\n"
        "s.stop_if_still_running()  # Beam's clean-up: does nothing here\n"
        "stop_interrupted_sampler()\n"
        "print(s.finished, statesampler.get_current_tracker())\n")
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    except subprocess.TimeoutExpired:
        pytest.fail("the process did not exit: the sampler's thread is still running")
    assert (r.returncode, r.stdout) == (0, "True None\n"), r.stderr
