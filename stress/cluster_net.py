"""Network check of a local cluster: every connect() any of its processes makes is to loopback.

``python -m stress --only cluster`` runs it (in a loopback-only namespace):
a child process (``python -m stress.cluster_net --child``) starts a local
Ray through :func:`retinue.cluster.start_local_ray`, opens a 2-shard
cluster, runs trees, messages and waits on it and shuts it down, all under
``strace -f -e trace=connect``; every traced connect() of the child, Ray's
node processes and the shard workers is then read back. A problem is any
IPv4 or IPv6 connect to an address that is not loopback (Unix sockets and
``AF_UNSPEC`` disconnects are fine). The child also checks that every socket
its cluster listens on is bound to loopback.

Measured inside the namespace: Ray's core logs that it could not learn the
local address "via external connectivity" (8.8.8.8:53): it looks the route
up over netlink first, finds none, and makes no connect.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from retinue.cluster.loopback import is_loopback

__all__ = ["run"]

_CONNECT = re.compile(r"^(\d+)\s+connect\(\d+, \{sa_family=(AF_\w+)(.*?)\}")
_INET4 = re.compile(r'inet_addr\("([^"]+)"\)')
_INET6 = re.compile(r'inet_pton\(AF_INET6, "([^"]+)"')


def parse(trace: str) -> tuple[int, list[str]]:
    """Return the number of IP connects in an strace log and the non-loopback ones."""
    count = 0
    outside: list[str] = []
    for line in trace.splitlines():
        match = _CONNECT.match(line)
        if match is None or match.group(2) not in ("AF_INET", "AF_INET6"):
            continue
        rest = match.group(3)
        address = _INET4.search(rest) or _INET6.search(rest)
        count += 1
        if address is None or not is_loopback(address.group(1)):
            outside.append(line.strip()[:200])
    return count, outside


def child() -> int:
    """The traced workload; exit 1 if a cluster process listens outside loopback."""
    from retinue import Profile
    from retinue.cluster import Cluster
    from retinue.cluster.loopback import descendants, listening_sockets
    from stress.cluster_common import clusterlib, ray_session

    with ray_session(), tempfile.TemporaryDirectory() as tmp:
        profiles = [
            Profile("lead", subagents=["mid"], runner=clusterlib.lead),
            Profile("mid", subagents=["leaf"], runner=clusterlib.mid),
            Profile("leaf", runner=clusterlib.leaf),
            Profile("talker", runner=clusterlib.talker),
        ]
        with Cluster.open(Path(tmp) / "c", shards=2, profiles=profiles) as cluster:
            leads = [cluster.spawn("lead", f"T{i}", name=f"t{i}") for i in range(4)]
            for lead in leads:
                cluster.wait(lead.id, timeout=120)
            cluster.spawn("talker", "t", name="talker")
            cluster.messages(timeout=30)
            listeners = listening_sockets(descendants(os.getpid()))
            bad = [lst for lst in listeners if not is_loopback(lst.address)]
            print(f"LISTENERS {len(listeners)} OUTSIDE {len(bad)}", flush=True)
    return 1 if bad else 0


def run() -> dict[str, Any]:
    """Trace the child; return the row (``problems`` must be empty)."""
    strace = shutil.which("strace")
    if strace is None:
        return {"problems": ["strace is not installed (apt-get install -y strace)"]}
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "connect.log"
        done = subprocess.run(
            [
                strace,
                "-f",
                "-qq",
                "-e",
                "trace=connect",
                "-o",
                str(log),
                sys.executable,
                "-m",
                "stress.cluster_net",
                "--child",
            ],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        count, outside = parse(log.read_text(errors="replace"))
    problems = [f"connect outside loopback: {line}" for line in outside[:20]]
    listened = re.search(r"LISTENERS (\d+) OUTSIDE (\d+)", done.stdout)
    if done.returncode != 0 or listened is None:
        problems.append(f"the traced cluster failed (exit {done.returncode}): {done.stderr[-500:]}")
    return {
        "ip_connects_traced": count,
        "outside_loopback": len(outside),
        "listening_sockets": int(listened.group(1)) if listened else None,
        "listening_outside_loopback": int(listened.group(2)) if listened else None,
        "problems": problems,
    }


if __name__ == "__main__":
    sys.exit(child() if "--child" in sys.argv else (1 if run()["problems"] else 0))
