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
