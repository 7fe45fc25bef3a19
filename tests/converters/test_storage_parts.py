"""Every read of an S3 object under the one downloader's policy (``converters.storage.download`` and ``parts``):
moto's server on 127.0.0.1 behind the fault-injecting proxy (``moto_s3.FaultProxy``) that answers some GETs
with 503 SlowDown / 500 InternalError or resets the connection, or changes the object while it is read. The
read client never retries by itself, so what carries a read through a fault is the downloader's retry."""
from __future__ import annotations

import logging

import pytest

from converters.storage.beamfs import BeamFSStorage
from converters.storage.s3 import S3Storage
from converters.util.errors import InputError, TfpipeError

pytest.importorskip("boto3")
pytest.importorskip("moto.server")

MiB = 1 << 20
BIG = bytes(range(256)) * (48 * 1024)  # 12 MiB: three parts of 5 MiB (S3's smallest part), the last one short
NEW = bytes(reversed(range(256))) * (48 * 1024)


def _put(s3, key: str, data: bytes) -> None:
    s3.client.put_object(Bucket=s3.bucket, Key=key, Body=data)


def _storage(s3, p, **kw) -> S3Storage:
    return S3Storage(f"{s3.url}/set", endpoint_url=p.url, max_attempts=4, part_size=5 * MiB, max_concurrency=3,
                     **kw)


def _first_gets_fail(faults):
    """A rule: the first GET of every distinct Range (or of the whole object) answers with the next fault."""
    hit: set = set()

    def rule(method, path, n, headers=None):
        if method != "GET" or "obj" not in path:
            return None
        key = (headers or {}).get("Range", "whole")
        if key in hit:
            return None
        hit.add(key)
        return faults[len(hit) % len(faults)]
    return rule


READS = {
    "fetch (parallel parts)": lambda st, tmp: (st.fetch("obj", str(tmp / "x")), (tmp / "x").read_bytes())[1],
    "read_bytes": lambda st, tmp: st.read_bytes("obj"),
    "read_range": lambda st, tmp: st.read_range("obj", 5, len(BIG) - 3),
    "read_with_etag": lambda st, tmp: st.read_with_etag("obj")[0],
}
WANT = {"read_range": BIG[5:-3]}


@pytest.mark.parametrize("read", sorted(READS))
@pytest.mark.parametrize("fault", [(503, "SlowDown"), (500, "InternalError"), "reset"])
def test_transient_faults_are_retried_by_the_downloader(s3, proxy, tmp_path, caplog, read, fault):
    _put(s3, "set/obj", BIG)
    p = proxy(_first_gets_fail([fault]))
    with caplog.at_level(logging.WARNING, logger="converters.storage.download"):
        got = READS[read](_storage(s3, p), tmp_path)
    assert got == WANT.get(read, BIG)
    assert sum(p.injected.values()) >= 1 + 2 * read.startswith("fetch")  # every part failed once
    assert "retry 1 in" in caplog.text  # the downloader's retry, not botocore's (its read client has none)


def test_a_persistent_fault_ends_after_max_attempts_naming_the_object(s3, proxy, tmp_path):
    _put(s3, "set/obj", BIG)
    p = proxy(lambda method, path, n, headers=None: (503, "SlowDown") if method == "GET" else None)
    with pytest.raises(TfpipeError, match=r"s3://.*/set/obj: S3 kept failing \(SlowDown\) after 4 attempts"):
        _storage(s3, p).fetch("obj", str(tmp_path / "x"))
    assert not (tmp_path / "x").exists()  # no partial file under the caller's name
    assert p.injected["SlowDown"] >= 4


@pytest.mark.parametrize("size, cap", [(len(BIG), len(BIG) - 1), (3 * MiB, 3 * MiB - 1)])  # parts; one stream
def test_fetch_refuses_an_object_above_the_cap_by_name(s3, proxy, tmp_path, size, cap):
    _put(s3, "set/obj", BIG[:size])
    st = _storage(s3, proxy(lambda *a, **k: None))
    with pytest.raises(TfpipeError, match=rf"s3://.*/set/obj: {size} bytes, more than the cap of {cap} bytes"):
        st.fetch("obj", str(tmp_path / "x"), cap=cap)
    assert not (tmp_path / "x").exists()
    st.fetch("obj", str(tmp_path / "x"), cap=size)
    assert (tmp_path / "x").read_bytes() == BIG[:size]


@pytest.mark.parametrize("make", ["s3", "beamfs"])
def test_read_bytes_refuses_an_object_above_the_cap_by_name(s3, tmp_path, make):
    if make == "s3":
        _put(s3, "set/obj", BIG)
        st = S3Storage(f"{s3.url}/set", endpoint_url=s3.endpoint)
    else:
        pytest.importorskip("apache_beam")
        (tmp_path / "set").mkdir()
        (tmp_path / "set" / "obj").write_bytes(BIG)
        st = BeamFSStorage(str(tmp_path / "set"))
    with pytest.raises(TfpipeError, match=r"set/obj: larger than 1000 bytes: refusing to read it"):
        st.read_bytes("obj", cap=1000)
    with pytest.raises(TfpipeError, match=r"set/obj: .*more than the cap of 1000 bytes"):
        st.fetch("obj", str(tmp_path / "x"), cap=1000)
    assert not (tmp_path / "x").exists()
    assert st.read_bytes("obj") == BIG and st.read_range("obj", 7, 9) == BIG[7:9]


def _changes_once(s3, key: str):
    """A rule: on the second ranged GET, the object is replaced (straight in moto) before the GET goes on."""
    state = {"gets": 0}

    def rule(method, path, n, headers=None):
        if method == "GET" and "Range" in (headers or {}):
            state["gets"] += 1
            if state["gets"] == 2:
                _put(s3, key, NEW)
        return None
    return rule


def test_an_object_changed_mid_fetch_is_fetched_again_whole(s3, proxy, tmp_path, caplog):
    _put(s3, "set/obj", BIG)
    p = proxy(_changes_once(s3, "set/obj"))
    with caplog.at_level(logging.WARNING, logger="converters.storage.parts"):
        _storage(s3, p).fetch("obj", str(tmp_path / "x"))
    assert (tmp_path / "x").read_bytes() == NEW  # one version, never parts of two
    assert "changed while being fetched" in caplog.text


def test_a_pinned_range_of_a_changed_object_is_refused(s3, proxy):
    _put(s3, "set/obj", BIG)
    st = _storage(s3, proxy(lambda *a, **k: None))
    etag = st.head("obj")[1]
    assert st.read_range("obj", 0, 10, if_match=etag) == BIG[:10]
    _put(s3, "set/obj", NEW)
    with pytest.raises(InputError, match=r"set/obj changed during the run"):
        st.read_range("obj", 0, 10, if_match=etag)
