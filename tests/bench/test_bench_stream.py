"""``tfpipe bench stream`` smoke test: a tiny set through one limited link and no limit, one run each."""
from __future__ import annotations

import pytest

pytest.importorskip("moto.server")


def test_bench_stream_smoke(tmp_path):
    from bench.commands.stream import format_report, run_benchmark

    r = run_benchmark(shards=3, shard_bytes=64 << 10, rates_mib=(50, 0), runs=1, batch_size=64,
                      workdir=str(tmp_path))
    assert r["shards"] == 3 and r["records"] > 0
    assert [ln["rate_mib"] for ln in r["links"]] == [50, 0]
    for ln in r["links"]:
        assert ln["stream_first_s"]["median"] > 0 and ln["stream_rps"]["median"] > 0
        assert ln["copy_first_s"]["median"] > 0 and ln["stream_vs_limit"] > 0
    assert r["links"][0]["limit_rps"] <= r["links"][0]["link_rps"]
    text = format_report(r)
    assert "link 50 MiB/s:" in text and "x the limit" in text and "copy first" in text
    assert not list(tmp_path.iterdir())  # its temporary directory is gone


def test_bench_stream_is_registered():
    import argparse

    from bench.cli import register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="cmd"))
    args = parser.parse_args(["bench", "stream", "--rates", "25,0", "--repeats", "1"])
    assert args.rates == "25,0" and args.repeats == 1 and callable(args.func)
