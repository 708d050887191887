"""Loopback checks (Linux): which interfaces exist, and where processes listen.

A local cluster must bind and dial 127.0.0.1 only. These read ``/proc`` and
need no privileges: :func:`listening_sockets` lists every TCP socket in the
LISTEN state and every bound UDP socket that a set of processes holds, with
its address; :func:`descendants` finds a process tree (a local Ray's node
processes and workers are children of the process that started them);
:func:`only_loopback_interfaces` says whether this network namespace has no
interface but ``lo`` (tests that start Ray refuse to run otherwise).
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Listener",
    "descendants",
    "interfaces",
    "is_loopback",
    "listening_sockets",
    "only_loopback_interfaces",
]

_PROC = Path("/proc")


@dataclass(frozen=True)
class Listener:
    """A socket a process listens on (TCP) or is bound to (UDP)."""

    pid: int
    protocol: str  # tcp, tcp6, udp, udp6
    address: str
    port: int


def interfaces() -> list[str]:
    """Return the names of this network namespace's interfaces."""
    return sorted(name for _, name in socket.if_nameindex())


def only_loopback_interfaces() -> bool:
    """Return True if ``lo`` is the only interface (a loopback-only network namespace)."""
    return interfaces() == ["lo"]


def is_loopback(address: str) -> bool:
    """Return True for 127.0.0.0/8, ::1 and IPv4-mapped loopback (``::ffff:127.0.0.1``)."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def descendants(root: int) -> list[int]:
    """Return ``root`` and every live process below it."""
    children: dict[int, list[int]] = {}
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: the fields follow the last ')'.
        fields = stat[stat.rfind(")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: list[int] = []
    stack = [root]
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, []))
    return found


def _socket_inodes(pid: int) -> set[str]:
    inodes: set[str] = set()
    try:
        fds = list((_PROC / str(pid) / "fd").iterdir())
    except OSError:
        return inodes
    for fd in fds:
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def _decode_address(hex_address: str) -> tuple[str, int]:
    host, port = hex_address.split(":")
    raw = bytes.fromhex(host)
    if len(raw) == 4:
        address = socket.inet_ntop(socket.AF_INET, raw[::-1])
    else:  # four little-endian 32-bit words
        words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
        address = socket.inet_ntop(socket.AF_INET6, words)
    return address, int(port, 16)


def listening_sockets(pids: Iterable[int]) -> list[Listener]:
    """Return the TCP sockets in LISTEN and the UDP sockets bound to a port that ``pids`` hold.

    The tables are this network namespace's; a socket of another namespace is not seen.
    """
    owners: dict[str, int] = {}
    for pid in pids:
        for inode in _socket_inodes(pid):
            owners.setdefault(inode, pid)
    found: list[Listener] = []
    for protocol in ("tcp", "tcp6", "udp", "udp6"):
        try:
            lines = (_PROC / "net" / protocol).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if inode not in owners:
                continue
            if protocol.startswith("tcp") and state != "0A":  # 0A: LISTEN
                continue
            address, port = _decode_address(local)
            if port == 0:  # a UDP socket not bound to a port (a resolver's, say)
                continue
            found.append(Listener(owners[inode], protocol, address, port))
    return found
