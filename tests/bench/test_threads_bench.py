"""bench.core.threads: planning (pure) and a smoke run of two tiny combinations in fresh processes."""
from __future__ import annotations

import json

import pytest

from bench.core.threads import ThreadCombo, best, candidate_combos, parse_combos, run_combo
from converters.cli import main


@pytest.mark.parametrize("cpus", [1, 2, 4, 16, 96])
def test_candidate_combos(cpus):
    combos = candidate_combos(cpus)
    assert combos[0] == ThreadCombo(0, 0, None)          # TensorFlow's defaults first
    assert len(combos) == len(set(combos))                # no duplicates
    assert ThreadCombo(cpus, cpus, cpus) in combos       # all vCPUs
    assert ThreadCombo(max(1, cpus // 2), max(1, cpus // 2), max(1, cpus // 2)) in combos  # half
    assert ThreadCombo(1, 1, 1) in combos
    assert all(c.intra <= cpus and c.inter <= cpus and (c.omp or 0) <= cpus for c in combos)


@pytest.mark.parametrize("text, want", [
    ("2,1,2", [ThreadCombo(2, 1, 2)]),
    ("2,1;1,1,-", [ThreadCombo(2, 1, None), ThreadCombo(1, 1, None)]),
    (" 0,0,4 ; ", [ThreadCombo(0, 0, 4)]),
])
def test_parse_combos(text, want):
    assert parse_combos(text) == want


@pytest.mark.parametrize("text, match", [("2", "intra,inter"), ("a,b", "numbers"), (";", "no thread"),
                                         ("-1,1", "intra"), ("1,1,0", "omp")])
def test_parse_combos_rejects(text, match):
    with pytest.raises(ValueError, match=match):
        parse_combos(text)


def test_env_sets_and_unsets_omp():
    assert ThreadCombo(1, 1, 3).env({"OMP_NUM_THREADS": "9"})["OMP_NUM_THREADS"] == "3"
    assert "OMP_NUM_THREADS" not in ThreadCombo(1, 1, None).env({"OMP_NUM_THREADS": "9"})


def test_cli_smoke_two_combinations(tmp_path, capsys):
    out = tmp_path / "threads.json"
    rc = main(["bench", "threads", "--combos", "1,1,1;2,1,2", "--steps", "3", "--warmup", "1",
               "--batch-size", "32", "--json-out", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "best: intra=" in text
    lines = text.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.strip().startswith("intra"))
    assert lines[head].rstrip().endswith("speed vs best")  # > 1 would mean faster than the best: never
    speeds = [float(ln.split()[-1].rstrip("x")) for ln in lines[head + 1:head + 3]]
    assert max(speeds) == 1.0 and min(speeds) <= 1.0, lines[head:head + 3]
    assert text.count("tfpipe: threads_intra=") == 2
    doc = json.loads(out.read_text())
    assert [(r["intra"], r["omp"]) for r in doc["results"]] == [(1, 1), (2, 2)]
    assert all(r["error"] == "" and r["step_ms_p50"] > 0 for r in doc["results"])
    assert doc["best"]["step_ms_p50"] == min(r["step_ms_p50"] for r in doc["results"])


def test_failed_child_is_reported_not_raised():
    r = run_combo(ThreadCombo(1, 1, 1), steps=1, warmup=0, batch_size=4, timeout=0.01)
    assert not r.ok and "timed out" in r.error
    assert best([r]) is None


@pytest.mark.parametrize("combo, want", [
    (ThreadCombo(2, 1, 2), "pipeline.configure_threads(intra=2, inter=1, omp=2)"),
    (ThreadCombo(0, 0, None), "leave threading at TensorFlow's defaults (set nothing)"),
    (ThreadCombo(4, 0, None), "tf.config.threading.set_intra_op_parallelism_threads(4)"),
    (ThreadCombo(0, 2, 1), "export OMP_NUM_THREADS=1; tf.config.threading.set_inter_op_parallelism_threads(2)"),
])
def test_apply_hint(combo, want):
    from bench.commands.threads import apply_hint

    assert apply_hint(combo) == want


def test_json_out_to_a_full_device_is_one_line_naming_the_path(tmp_path, capsys):
    import os
    import stat

    full = tmp_path / "full"
    try:
        os.mknod(full, 0o666 | stat.S_IFCHR, os.stat("/dev/full").st_rdev)
    except PermissionError:
        pytest.skip("creating a device node needs CAP_MKNOD")
    rc = main(["bench", "threads", "--combos", "1,1,1", "--steps", "2", "--warmup", "1", "--batch-size", "8",
               "--json-out", str(full)])
    err = capsys.readouterr().err
    assert rc == 1
    assert err.splitlines()[-1] == f"tfpipe: error: --json-out {full}: No space left on device", err
    assert stat.S_ISCHR(os.lstat(full).st_mode)
