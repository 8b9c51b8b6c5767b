"""HTTP transports for the suite's Python clients: Envoy as their HTTP proxy, connecting from a
chosen local address. The shipped envoy/envoy.yaml names the tenant by the client's address, so a
test gives each tenant an address of its own on the loopback (every 127/8 address is this host's;
Envoy listens on 127.0.0.1).

httpx2's HTTPTransport takes local_address, but its proxy connections do not use it; a network
backend that binds every connection does."""

from __future__ import annotations

import httpcore2
import httpx2


class _FromAddress(httpcore2.SyncBackend):
    def __init__(self, source: str):
        self.source = source

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        return super().connect_tcp(host, port, timeout=timeout, local_address=self.source, socket_options=socket_options)


def transport(proxy: str, source: str | None = None) -> httpx2.HTTPTransport:
    """A transport through proxy (http://host:port), connecting from source when given."""
    t = httpx2.HTTPTransport(proxy=proxy, trust_env=False, verify=False)
    if source:
        t._pool._network_backend = _FromAddress(source)
    return t
