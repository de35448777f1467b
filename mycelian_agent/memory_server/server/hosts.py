"""Which Host and Origin headers the HTTP transport accepts (DNS rebinding protection), from the bind address."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Sequence

from mcp.server.transport_security import TransportSecuritySettings

__all__ = ["transport_security"]

_LOOPBACK = ("127.0.0.1", "localhost", "[::1]")


def _host_names(host: str) -> list[str]:
    """Names a client may put in the Host header to reach a server bound to ``host``."""
    if host in ("127.0.0.1", "localhost", "::1"):
        return []
    if host not in ("0.0.0.0", "::", ""):
        return [f"[{host}]" if ":" in host else host]
    names = {socket.gethostname(), socket.getfqdn()}
    with contextlib.suppress(OSError):  # the machine's own addresses, as far as its name resolves
        names |= {str(info[4][0]) for info in socket.getaddrinfo(socket.gethostname(), None)}
    return sorted(f"[{n}]" if ":" in n else n for n in names if n)


def transport_security(host: str, allowed_hosts: Sequence[str] = ()) -> TransportSecuritySettings:
    """Host and Origin checks (DNS rebinding protection) for a server bound to ``host``, on every bind.

    Accepted Host headers: the loopback names, the bind address (for 0.0.0.0 / ::, this machine's name and
    addresses) and ``allowed_hosts`` (e.g. a public DNS name or a proxy's address), each with or without a port.
    A browser's Origin header must name one of the same hosts; requests without Origin (every non-browser client)
    pass.
    """
    names = [*_LOOPBACK, *_host_names(host), *allowed_hosts]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[h for n in names for h in (n, f"{n}:*")],
        allowed_origins=[
            o for n in names for scheme in ("http", "https") for o in (f"{scheme}://{n}", f"{scheme}://{n}:*")
        ],
    )
