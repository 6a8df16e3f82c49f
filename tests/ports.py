"""Loopback ports for a server a test starts later (a subprocess given ``--port``).

A free port of the kernel's ephemeral range (``bind(("127.0.0.1", 0))``, then released) is the
range the kernel hands out to every outgoing connection and every bind to port 0: until the server
binds it, another socket can be given it, and a client polling the not-yet-listening port can be
given it as its own source port and connect to itself (TCP simultaneous open), which then holds
the port and reads its own request as the reply. :func:`free_ports` takes ports below that range,
which the kernel never hands out by itself.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _ephemeral_low() -> int:
    """The lowest port of the ephemeral range (Linux's default, 32768, where it cannot be read)."""
    try:
        return int(RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count: int = 1, low: int = 20000) -> int:
    """The first of ``count`` consecutive loopback ports, each free now, from ``low`` (shifted by this
    process's id, so that two test runs on one machine look in different places) up to the
    ephemeral range.

    Raises:
        RuntimeError: no such ports below the ephemeral range."""
    high = _ephemeral_low()
    span = max(1, high - low - count)
    start = low + os.getpid() % span
    for offset in range(span):
        first = low + (start - low + offset) % span
        if all(_free(first + i) for i in range(count)):
            return first
    raise RuntimeError(f"no {count} consecutive free ports in {low}..{high}")
