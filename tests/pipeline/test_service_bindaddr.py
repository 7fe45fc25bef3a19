"""The address a tf.data service server listens on (pipeline/service/bindaddr.py): what ``--bind`` names, an
IPv4-mapped IPv6 address read as its IPv4 address (the same address to the kernel), and a real dispatcher
bound to one."""
from __future__ import annotations

import pytest

from converters.util.errors import ServiceError
from pipeline.service.bindaddr import is_wildcard, listen_addresses, resolve_bind


@pytest.mark.parametrize("text, address", [
    ("127.0.0.1", "127.0.0.1"), ("::ffff:127.0.0.1", "127.0.0.1"), ("[::ffff:127.0.0.1]", "127.0.0.1"),
    ("::ffff:7f00:1", "127.0.0.1"), ("::ffff:10.0.0.5", "10.0.0.5"), ("::1", "::1"), ("[::1]", "::1"),
    ("0.0.0.0", "0.0.0.0"), ("::", "::"), ("::ffff:0.0.0.0", "0.0.0.0"), ("localhost", "127.0.0.1"),
])
def test_resolve_bind(text, address):
    assert resolve_bind(text) == address


@pytest.mark.parametrize("text, message", [
    ("", "--bind: expected an IP address or host name of this host, got ''"),
    ("h\u00e9te", "--bind: expected an IP address or host name of this host, got 'h\u00e9te'"),
    ("no-such-host.invalid", "--bind no-such-host.invalid: cannot resolve it"),
])
def test_resolve_bind_refusals(text, message):
    with pytest.raises(ServiceError) as exc:
        resolve_bind(text)
    assert str(exc.value).startswith(message)


@pytest.mark.parametrize("bind", ["::ffff:127.0.0.1", "127.0.0.1"])
def test_a_dispatcher_bound_to_the_mapped_loopback_listens_on_loopback_only(bind):
    """``--bind ::ffff:127.0.0.1`` is loopback: the dispatcher starts and listens on 127.0.0.1 alone."""
    pytest.importorskip("tensorflow")
    from pipeline.service.servers import start_dispatcher

    d = start_dispatcher(0, worker_timeout=None, bind=bind)
    try:
        assert d.bind == "127.0.0.1" and not is_wildcard(d.bind)
        assert listen_addresses(d.port) == ["127.0.0.1"]
    finally:
        d.server._stop()
