"""``tfpipe bench offload``: the verdict's arithmetic on hand-made figures; a smoke run against a dispatcher and
a worker started on this host (real processes); a bad ``--service`` refused with the value."""
from __future__ import annotations

import json

import pytest

from bench.commands.offload import format_report, verdict
from converters.cli import main


def fig(rec_s, us):
    return {"records_per_s": rec_s, "cpu_us_per_record": us}


@pytest.mark.parametrize("local, service, gpu, cpu, pays, dollars", [
    (fig(100, 4.0), fig(200, 1.0), None, None, True, None),       # input-bound locally: offload pays
    (fig(100, 4.0), fig(101, 1.0), None, None, False, None),      # the step is the bound: it does not
    (fig(100, 4.0), fig(200, 1.0), 4.0, 1.0, True, True),         # 1.25 x 0.5 = 0.625 < 1
    (fig(100, 4.0), fig(110, 1.0), 4.0, 1.0, True, False),        # 1.25 x 0.91 = 1.14 >= 1
    (fig(100, 4.0), fig(200, 1.0), 1.0, 1.0, True, False),        # 2.0 x 0.5 = 1.0: not < 1
])
def test_verdict(local, service, gpu, cpu, pays, dollars):
    v = verdict(local, service, gpu, cpu)
    assert v["pays"] is pays and v["cpu_ratio"] == pytest.approx(service["cpu_us_per_record"] / 4.0)
    assert v.get("pays_dollars") is dollars
    if gpu:
        assert v["cost_ratio"] == pytest.approx((gpu + cpu) / gpu * local["records_per_s"] / service["records_per_s"])


def test_smoke_run_starts_a_service_and_says_a_verdict(tmp_path, capsys):
    from converters.libsvm.synthetic import write_criteo_shards

    write_criteo_shards(str(tmp_path / "set"), 3000, shard_bytes=64 << 10)
    rc = main(["bench", "offload", str(tmp_path / "set"), "--repeats", "1", "--batches", "4", "--batch-size", "128",
               "--step-ms", "1", "--price-gpu", "3", "--price-cpu", "0.5", "--json"])
    out = capsys.readouterr().out
    assert rc == 0
    r = json.loads(out)
    assert r["service"].startswith("grpc://127.0.0.1:") and r["local_workers"] == 1
    for k in ("local", "service"):
        assert r["figures"][k]["records_per_s"]["median"] > 0
        assert r["figures"][k]["cpu_us_per_record"]["median"] > 0
    assert {"pays", "pays_dollars", "price_ratio", "cost_ratio"} <= set(r["verdict"])
    text = format_report(r)
    assert "verdict: offloading" in text and "in dollars" in text


def test_bad_service_is_refused_naming_it(tmp_path, capsys):
    assert main(["bench", "offload", str(tmp_path), "--service", "10.0.0.1:5050"]) == 2
    assert "'10.0.0.1:5050'" in capsys.readouterr().err


@pytest.mark.parametrize("flag, value", [("--step-ms", "1e18"), ("--step-ms", "60001"), ("--step-cpu-ms", "1e18"),
                                         ("--step-cpu-ms", "-1"), ("--step-ms", "nan"), ("--step-cpu-ms", "inf")])
def test_step_beyond_a_minute_is_refused_in_one_line(tmp_path, capsys, flag, value):
    with pytest.raises(SystemExit) as exc:
        main(["bench", "offload", str(tmp_path), flag, value])
    assert exc.value.code == 64
    err = capsys.readouterr().err
    assert f"argument {flag}: expected a step in milliseconds from 0 to 60000" in err and repr(value) in err and "Traceback" not in err


def test_verdict_takes_the_steps_own_cpu_out_of_the_inputs_cost():
    v = verdict(fig(100, 30.0), fig(200, 12.0), None, None, step_cpu_us_per_record=10.0)
    assert v["input_cpu_us_per_record"] == {"local": pytest.approx(20.0), "service": pytest.approx(2.0)}
    assert v["pays"] is True


def test_step_cpu_ms_burns_the_trainers_cpu(tmp_path):
    """The CPU step shows in the trainer's own CPU time: with --step-cpu-ms the run's CPU per record grows by at
    least the step's CPU per record (an independent clock: the process's CPU time, robust to other load)."""
    from bench.commands.offload import trainer
    from converters.libsvm.synthetic import write_criteo_shards

    write_criteo_shards(str(tmp_path / "set"), 2000, shard_bytes=64 << 10)
    cfg = {"path": str(tmp_path / "set"), "batch_size": 100, "step_ms": 0.0, "batches": 12, "core": None}
    plain = trainer({**cfg, "step_cpu_ms": 0.0})
    burnt = trainer({**cfg, "step_cpu_ms": 20.0})
    assert plain["records"] == burnt["records"] == 1100
    step_us = 1e3 * 20.0 / 100   # 200 CPU us per record
    assert burnt["cpu_us_per_record"] - plain["cpu_us_per_record"] >= 0.9 * step_us
    assert burnt["cpu_seconds"] >= 11 * 0.020


def test_report_names_the_cpu_step_and_the_inputs_cost():
    r = {"trainer_core": 0, "service": "grpc://127.0.0.1:1", "local_workers": 1, "worker_cores": [1], "step_ms": 5.0,
         "step_cpu_ms": 3.0, "batch_size": 100, "rounds": 1, "load": [1.0, 1.0],
         "figures": {k: {m: {"median": x, "min": x, "max": x} for m, x in (("records_per_s", rs), ("cpu_us_per_record", us))}
                     for k, rs, us in (("local", 100.0, 40.0), ("service", 150.0, 32.0))},
         "verdict": verdict(fig(100.0, 40.0), fig(150.0, 32.0), None, None, 30.0)}
    text = format_report(r)
    assert "step 5 ms + 3 ms of trainer CPU" in text
    assert "the input costs the trainer 10.00 CPU us/record here, 2.00 with the service (beside the step's own 30.00)" in text
