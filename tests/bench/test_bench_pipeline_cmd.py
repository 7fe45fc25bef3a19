"""`tfpipe bench pipeline`: smoke run on a tiny generated set (JSON + PNG), a given DIR, and bad arguments; the
no-step throughput's distribution over rounds and the row marked as tfpipe's default."""
from __future__ import annotations

import json
import os
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pipeline_data import write_indexed_set

from bench.commands.pipeline import MIN_STEP_MS, _epochs_for, choose_scenario, load_variants, one_epoch
from converters.cli import main
from converters.libsvm.synthetic import write_criteo_shards


def test_generated_smoke_json_and_png(tmp_path, capsys):
    js, png = tmp_path / "out.json", tmp_path / "out.png"
    rc = main(["bench", "pipeline", "--generate", "3000", "--batch-size", "256", "--step-ms", "5",
               "--steps", "6", "--warmup", "2", "--throughput-batches", "4", "--runs", "2",
               "--variants", "naive,vectorized,pipe", "--price-per-hour", "3.06",
               "--json-out", str(js), "--png", str(png)])
    assert rc == 0
    out = capsys.readouterr().out
    table = out.split("\n")
    head = next(line for line in table if line.startswith("variant"))
    for col in ("graph", "no-step rec/s", "min-max", "vs naive", "input wait %", "verdict", "idle $/epoch"):
        assert col in head
    marked = [line for line in table if "tfpipe default" in line]
    assert len(marked) == 1 and marked[0].startswith("vectorized")
    assert "median [min-max] of 2 round(s), load " in out
    assert len(re.findall(r"^tfpipe: variant=(naive|vectorized|pipe); input_wait_pct=[0-9.]+;", out, re.M)) == 3

    doc = json.loads(js.read_text())
    assert [v["name"] for v in doc["variants"]] == ["naive", "vectorized", "pipe"]
    for v in doc["variants"]:
        assert v["steps"] == 6 and v["records"] == 6 * 256
        assert v["verdict"] in ("not input-bound", "moderately input-bound", "highly input-bound")
        assert "idle_dollars_per_epoch" in v["extra"]
    meta = doc["meta"]
    assert meta["records"] == 3000 and meta["batch_size"] == 256 and meta["step_ms"] == 5
    assert meta["throughput"]["naive"]["vs_naive"] == pytest.approx(1.0)
    assert meta["throughput"]["vectorized"]["records_per_s"] > 0 and meta["default_variant"] == "vectorized"
    for t in meta["throughput"].values():
        assert t["runs"] == 2 and t["records_per_s_min"] <= t["records_per_s"] <= t["records_per_s_max"]
        assert 0 < t["cores"] <= os.cpu_count() + 0.5
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_existing_dir_without_throughput(tmp_path, capsys):
    write_criteo_shards(str(tmp_path / "set"), 1000, field_size=5)
    rc = main(["bench", "pipeline", str(tmp_path / "set"), "--batch-size", "100", "--step-ms", "1",
               "--steps", "3", "--warmup", "1", "--variants", "vectorized", "--no-throughput"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "no-step rec/s" not in out and "vectorized" in out


@pytest.mark.parametrize("argv, match", [
    (["SET", "--variants", "nope", "--steps", "1"], "unknown variant"),
    (["SET", "--generate", "10"], "either DIR or --generate"),
    ([str("/nonexistent/set"), "--steps", "1"], "nonexistent"),
])
def test_bad_arguments_are_one_line_errors(tmp_path, capsys, argv, match):
    write_criteo_shards(str(tmp_path / "set"), 200, field_size=3)
    argv = [str(tmp_path / "set") if a == "SET" else a for a in argv]
    rc = main(["bench", "pipeline", *argv, "--no-throughput"])
    err = capsys.readouterr().err
    assert rc != 0
    assert re.search(r"tfpipe: error: .*" + re.escape(match), err), err
    assert "Traceback" not in err


@pytest.mark.parametrize("argv, match", [  # usage errors: exit 64 before anything runs
    (["--batch-size", "0"], "argument --batch-size: expected a positive integer"),
    (["--steps", "0"], "argument --steps: expected a positive integer"),
    (["--step-ms", "-1"], "argument --step-ms: expected a step in milliseconds from 0 to 60000"),
    (["--generate", "0"], "argument --generate: expected a positive integer"),
    (["--json-out", "y.json", "--stepms", "1"], "hint: did you mean --step-ms?"),
])
def test_usage_errors(capsys, argv, match):
    with pytest.raises(SystemExit) as e:
        main(["bench", "pipeline", *argv])
    assert e.value.code == 64 and match in capsys.readouterr().err


@pytest.mark.parametrize("batches, batch, records, want", [(10, 100, 1000, 2), (11, 100, 1000, 3),
                                                           (50, 512, 100, 51), (1, 10, 5, 2)])
def test_epochs_for(batches, batch, records, want):
    assert _epochs_for(batches, batch, records) == want


@pytest.mark.parametrize("rows, batch, ranks, drop_remainder, want", [
    (1000, 300, 1, False, 4),     # a short last batch: rounding down would say 3
    (1000, 300, 1, True, 3),
    (1001, 100, 2, False, 5),     # every rank runs the smallest rank's steps (500 records), not rank 0's 501
    (999, 100, 2, True, 4),
    (1000, 300, 3, False, 2),
])
def test_one_epoch_is_the_batches_the_product_yields(tmp_path, rows, batch, ranks, drop_remainder, want):
    from pipeline import PipelineSpec, build_dataset

    write_indexed_set(tmp_path, rows)
    spec = PipelineSpec.from_manifest(str(tmp_path), batch, num_shards=ranks, shard_index=0,
                                      drop_remainder=drop_remainder)
    product = sum(1 for _ in build_dataset(spec))
    assert product == want
    assert one_epoch(rows // ranks, batch, drop_remainder=drop_remainder) == want


def test_default_scenario_is_chosen_from_the_throughputs(tmp_path, capsys):
    js, png = tmp_path / "out.json", tmp_path / "out.png"
    rc = main(["bench", "pipeline", "--generate", "3000", "--steps", "3", "--warmup", "1", "--throughput-batches",
               "4", "--variants", "naive,vectorized", "--json-out", str(js), "--png", str(png)])
    assert rc == 0
    out = capsys.readouterr().out
    assert re.search(r"^step scenario: batch \d+, step [0-9.]+ ms, chosen from the measured throughputs: the naive "
                     r"graph needs", out, re.M)
    meta = json.loads(js.read_text())["meta"]
    assert meta["step_chosen"] is True and meta["batch_size"] == 512
    naive = meta["throughput"]["naive"]["records_per_s"]
    vec = meta["throughput"]["vectorized"]["records_per_s"]
    assert (meta["step_batch_size"], meta["step_ms"]) == choose_scenario(naive, vec, 512)[:2]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("naive, default, batch, scale, want_batch, want_step", [
    (23_000, 450_000, 512, True, 8192, 120.0),      # this machine: 512 is too small a batch to separate them
    (29_000, 450_000, 4096, True, 8192, 95.0),
    (23_000, 450_000, 512, False, 512, 5.0),        # --batch-size given: only the step is chosen
])
def test_choose_scenario_table(naive, default, batch, scale, want_batch, want_step):
    got_batch, step, why = choose_scenario(naive, default, batch, scale_batch=scale)
    assert (got_batch, step) == (want_batch, want_step)
    assert ("no step separates them" in why) == (not scale and batch == 512)
    assert "highly input-bound" in why


@given(naive=st.floats(1_000, 200_000), speedup=st.floats(2, 100), batch=st.sampled_from([64, 256, 512, 4096]))
def test_choose_scenario_separates_when_it_says_so(naive, speedup, batch):
    default = naive * speedup
    got, step, why = choose_scenario(naive, default, batch)
    assert got % batch == 0 and (got // batch) & (got // batch - 1) == 0 and got <= 64 * batch
    t_naive, t_default = 1000 * got / naive, 1000 * got / default
    if "no step separates them" not in why:
        assert step >= MIN_STEP_MS - 2.5 and t_naive >= 2.5 * step and t_default <= 0.55 * step


def test_choose_scenario_rejects_nonsense():
    with pytest.raises(ValueError):
        choose_scenario(0, 1, 512)


def test_throughput_rounds_rotate_the_order_and_take_medians_of_per_round_ratios():
    from bench.commands.pipeline import roles, throughput_rounds

    orders, speed = [], iter([1, 4, 2, 2, 3, 9, 8, 1, 5, 3, 3, 3])

    class V:
        @staticmethod
        def run_speed_suite(data, batch, order, **kw):
            orders.append(list(order))
            rows = [{"variant": n, "records_per_s": float(next(speed)), "cpu_seconds": 1.5, "seconds": 1.0}
                    for n in order]
            tuned = max(r["records_per_s"] for r in rows if r["variant"] != "vectorized")
            return [{**r, "vs_naive": None, "vs_best_hand_tuned": r["records_per_s"] / tuned} for r in rows]

    names = ["vectorized", "a", "b"]
    t = throughput_rounds(V, "d", 8, names, runs=4, max_batches=1)
    assert orders == [names, ["a", "b", "vectorized"], ["b", "vectorized", "a"], names]
    v = t["vectorized"]      # rounds: (vec 1, a 4, b 2), (a 2, b 3, vec 9), (b 8, vec 1, a 5), (vec 3, a 3, b 3)
    assert v["rates"] == [1, 9, 1, 3] and (v["records_per_s_min"], v["records_per_s"], v["records_per_s_max"]) == (1, 2, 9)
    assert v["vs_best_hand_tuned"] == pytest.approx((1 / 4 + 3 / 3) / 2)     # median of 1/4, 9/3, 1/8, 3/3
    assert v["cores"] == pytest.approx(1.5)     # process CPU-seconds over wall seconds: the cores it got
    assert roles(names, ["a"]) == {"vectorized": "tfpipe default", "a": "hand-tuned", "b": ""}


def _tabular_set(out, target: str, layout: str, rows: int = 600) -> str:
    """A tabular set converted from ``rows`` Criteo-like TSV rows (label, 13 counts, 26 hex categories)."""
    import random

    rng = random.Random(7)
    tsv = out.parent / f"{out.name}.tsv"
    tsv.write_text("".join("\t".join([str(rng.randint(0, 1)), *(str(rng.randint(0, 50)) for _ in range(13)),
                                      *(f"{rng.randint(0, 30):08x}" for _ in range(26))]) + "\n"
                           for _ in range(rows)))
    assert main(["convert", "tabular", str(tsv), "--out", str(out), "--target", target, "--layout", layout]) == 0
    return str(out)


def _libsvm_columnar(out) -> str:
    from columnar_data import indexed_columns, write_columnar_set

    write_columnar_set(out, indexed_columns(600), block_rows=64, shard_rows=250)
    return str(out)


@pytest.mark.parametrize("kind", ["libsvm-columnar", "dlrm-columnar", "dlrm-example"])   # DeepFM: LibSVM's schema
def test_every_variant_runs_on_columnar_and_tabular_sets(tmp_path, capsys, kind):
    """Every variant reads the set as the product does (a columnar set's blocks decoded, not parsed as
    Examples), and the marked row is the default graph, which reads the set in its own layout."""
    fmt, layout = kind.split("-")
    path = _libsvm_columnar(tmp_path / kind) if fmt == "libsvm" else _tabular_set(tmp_path / kind, fmt, layout)
    js = tmp_path / "out.json"
    capsys.readouterr()
    rc = main(["bench", "pipeline", path, "--batch-size", "64", "--step-ms", "1", "--steps", "2", "--warmup", "1",
               "--throughput-batches", "2", "--runs", "1", "--json-out", str(js)])
    assert rc == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    marked = [line for line in out.splitlines() if "tfpipe default" in line]
    assert len(marked) == 1 and marked[0].startswith("vectorized")
    doc = json.loads(js.read_text())
    assert sorted(v["name"] for v in doc["variants"]) == sorted(load_variants().VARIANTS)
    assert all(t["records_per_s"] > 0 for t in doc["meta"]["throughput"].values())
    from pipeline import PipelineSpec
    from pipeline.plan.graphplan import plan_graph

    graph = plan_graph(PipelineSpec.from_manifest(path, 64)).graph
    assert graph == ("columnar" if layout == "columnar" else "plain")


@pytest.mark.parametrize("argv", [
    ["SET", "--png", "OUT"],                                 # a given set
    ["--generate", "100000", "--png", "OUT", "--json-out", "OUT.json"],   # before the set is generated
])
def test_png_without_matplotlib_is_refused_before_measuring(tmp_path, argv):
    """``--png`` on an install without matplotlib: one line naming the extra, exit 2, before any measurement
    (within seconds, nothing written). matplotlib is made unimportable by a sitecustomize shim."""
    import subprocess
    import sys
    import time

    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text("import sys\nsys.modules['matplotlib'] = None\n")
    write_criteo_shards(str(tmp_path / "set"), 200, field_size=3)
    out = tmp_path / "chart.png"
    argv = [str(tmp_path / "set") if a == "SET" else str(out) if a == "OUT" else f"{out}.json" if a == "OUT.json"
            else a for a in argv]
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "converters.cli", "bench", "pipeline", *argv], cwd=root,
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join([str(shim), root])})
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        "tfpipe: error: --png needs matplotlib, which is not installed: pip install 'tfpipe[bench]' (or leave out "
        "--png)"]
    assert r.stdout == "" and time.monotonic() - t0 < 30
    assert not out.exists() and not os.path.exists(f"{out}.json")
