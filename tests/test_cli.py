import json
import subprocess
import sys
import time

import pytest

from converters.cli import main
from converters.synthetic import write_criteo_shards


@pytest.fixture(scope="module")
def shard_set(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "set"
    write_criteo_shards(str(out), 200, shard_bytes=20_000)
    return out


@pytest.mark.parametrize("argv,code,out_has,err_has", [
    (["inspect", "{set}"], 0, ["records     200", "ids", "(label)"], []),
    (["inspect", "{set}/index.json", "--json"], 0, ['"records": 200'], []),
    (["verify", "{set}", "--no-progress"], 0, ["OK", "200 records"], []),
    (["inspect", "{missing}"], 1, [], ["tfpipe: error: no manifest"]),
    (["verify", "{missing}"], 1, [], ["tfpipe: error: no manifest"]),
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
        assert len(err.strip().splitlines()) == 1


def test_inspect_json_is_the_manifest(shard_set, capsys):
    assert main(["inspect", str(shard_set), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads((shard_set / "index.json").read_text())


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
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[1:] == ["False", "False", "False"]
    assert float(out[0]) < 5


def test_console_script_help():
    r = subprocess.run(["tfpipe", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "convert" in r.stdout and "verify" in r.stdout
