"""``tfpipe pipeline explain --service``: a warning when the service's workers outnumber the rank's files
(DYNAMIC sharding gives each file to one worker, so the others sit idle): the pure rule, and the CLI against a
real dispatcher with two workers in this process, and with none answering."""
from __future__ import annotations

import socket

import pytest
from pipeline_data import write_indexed_set
from service_procs import service  # noqa: F401 (a fixture)

from converters.cli import main
from pipeline.plan.servicejob import idle_workers_warning

tf = pytest.importorskip("tensorflow")


@pytest.mark.parametrize("files, workers, want", [
    (1, 2, "1 of the service's 2 workers will sit idle"),
    (3, 8, "5 of the service's 8 workers will sit idle"),
    (2, 2, None),
    (9, 4, None),
    (1, None, "this rank reads one file, so one worker"),
    (2, None, None),
])
def test_idle_workers_warning(files, workers, want):
    got = idle_workers_warning(files, workers)
    if want is None:
        assert got is None
    else:
        assert got.startswith("warning: ") and want in got and "reshard" in got


def _explain(path, service, capsys) -> list[str]:
    assert main(["pipeline", "explain", str(path), "--batch-size", "16", "--service", service]) == 0
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning:")]


def test_explain_warns_of_idle_workers(service, tmp_path, capsys):
    from pipeline.service.probe import dispatcher_workers

    assert len(dispatcher_workers(service, 30.0)) == 2   # both workers registered before explain asks
    one = write_indexed_set(tmp_path / "one", 200, shard_bytes=1 << 20)
    assert len(one.shards) == 1
    assert _explain(tmp_path / "one", service, capsys) == [idle_workers_warning(1, 2)]
    many = write_indexed_set(tmp_path / "many", 1500, shard_bytes=4 << 10)
    assert len(many.shards) >= 2
    assert _explain(tmp_path / "many", service, capsys) == []


def test_explain_without_a_dispatcher_warns_of_a_one_file_set(tmp_path, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    write_indexed_set(tmp_path / "one", 200, shard_bytes=1 << 20)
    assert _explain(tmp_path / "one", f"grpc://127.0.0.1:{port}", capsys) == [idle_workers_warning(1, None)]
