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
    marked = [line for line in text.splitlines() if "<- tfpipe's default" in line]   # streaming, per link
    assert len(marked) == 2 and all(line.lstrip().startswith("stream ") for line in marked)
    assert not list(tmp_path.iterdir())  # its temporary directory is gone


def test_bench_stream_is_registered():
    import argparse

    from bench.cli import register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="cmd"))
    args = parser.parse_args(["bench", "stream", "--rates", "25,0", "--repeats", "1"])
    assert args.rates == [25.0, 0.0] and args.repeats == 1 and callable(args.func)


@pytest.mark.parametrize("rates", ["inf", "nan", "abc", "25,inf", "-1", "", "25,,0"])
def test_bad_rates_are_refused_while_parsing_naming_the_option(rates, capsys):
    from converters.cli import main
    from converters.util.errors import USAGE_EXIT

    with pytest.raises(SystemExit) as exc:
        main(["bench", "stream", "--rates", rates])
    assert exc.value.code == USAGE_EXIT
    errors = [ln for ln in capsys.readouterr().err.splitlines() if ": error: " in ln]
    assert len(errors) == 1 and f"argument --rates: expected comma-separated finite numbers >= 0, got {rates!r}" \
        in errors[0], errors


@pytest.mark.parametrize("rates", [(float("inf"),), (float("nan"),), (-1,), ()])
def test_run_benchmark_refuses_bad_rates(rates):
    from bench.commands.stream import run_benchmark

    with pytest.raises(ValueError, match="rates_mib must be finite numbers >= 0"):
        run_benchmark(rates_mib=rates)
