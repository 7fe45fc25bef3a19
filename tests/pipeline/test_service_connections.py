"""pipeline.service.connections: this process's TCP connections to one server address are shut down (what both
watches do to a frozen worker), whatever form the address takes, and no other connection is touched."""
from __future__ import annotations

import socket

import pytest

from pipeline.service.connections import cut_connections


@pytest.fixture
def servers():
    """Two listening sockets on 127.0.0.1 that accept nothing (a frozen server's kernel still completes the
    handshake): their ports."""
    socks = []
    for _ in range(2):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        socks.append(s)
    yield [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::ffff:127.0.0.1]", "::ffff:7f00:1"])
def test_cut_connections_to_that_address_only(servers, host):
    frozen, other = servers
    to_frozen = [socket.create_connection(("127.0.0.1", frozen), timeout=5) for _ in range(2)]
    to_other = socket.create_connection(("127.0.0.1", other), timeout=5)
    try:
        address = f"[{host}]:{frozen}" if ":" in host and not host.startswith("[") else f"{host}:{frozen}"
        assert cut_connections(address) == 2
        for s in to_frozen:
            assert s.recv(1) == b""                        # shut down: a blocked read ends at once
        to_other.settimeout(0.3)
        with pytest.raises(TimeoutError):                  # untouched: still waits for its server
            to_other.recv(1)
    finally:
        for s in [*to_frozen, to_other]:
            s.close()


@pytest.mark.parametrize("address", ["nohost", "127.0.0.1:0", "no-such-host.invalid:5050"])
def test_cut_connections_to_what_is_no_address_cuts_nothing(address):
    assert cut_connections(address) == 0
