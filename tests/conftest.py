import os

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")


@pytest.fixture(autouse=True, scope="session")
def _private_tfpipe_cache(tmp_path_factory):
    """Tests never read or write the user's tfpipe cache (fetched shards, stored tuning results)."""
    os.environ["TFPIPE_CACHE"] = str(tmp_path_factory.mktemp("tfpipe-cache"))


@pytest.fixture()
def store(tmp_path, monkeypatch):
    """A private tfpipe cache for one test; returns where tuning results go (``<cache>/tune``)."""
    monkeypatch.setenv("TFPIPE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "tune"
