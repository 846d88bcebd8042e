"""The network of a job's simulated hosts: one Linux bridge per job, one veth pair per host (pyroute2).

The bridge has no address on this machine and no route leads to it, so the hosts' subnet is never
routed off the machine and the hosts reach nothing but each other, as instances of one job in their
VPC do. Each host's end of its veth pair is ``eth0`` in the host's network namespace (SageMaker's
``network_interface_name``), addressed ``<subnet>.N`` for ``algo-N``. The subnet is a /24 picked at run
time from the private ranges the machine's routes and addresses do not use (``SMDIST_LOCAL_SUBNET``
chooses another); jobs have separate bridges, so they may share it.

What a host reaches outside the job goes through *forwarders*: the supervisor opens a listening socket
inside the host's namespace on the address and port of a loopback endpoint of the worker (moto's
server in tests, a local S3) and pipes each connection to the same endpoint outside, so the host uses
the very URL the worker uses. With ``EnableNetworkIsolation`` no forwarder is made.

A host's veth pair dies with its network namespace, so nothing is left when the hosts end, also after
kill -9 of the supervisor (the kernel does it a little later); the bridge and the hosts' links are
deleted by the supervisor before the job's final status, or by :func:`reclaim` (run by the
next submit or describe) when its supervisor is gone. Bridges are named ``smdb<8 hex>`` and registered
with their owner's PID and start time in ``/run/smdist/bridges``.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import ipaddress
import json
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

REGISTRY = Path(os.environ.get("SMDIST_LOCAL_NET_REGISTRY", "/run/smdist/bridges"))
CANDIDATES = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
_CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def bridge_name(job_dir: str) -> str:
    return "smdb" + hashlib.sha1(str(job_dir).encode()).hexdigest()[:8]


def host_link_prefix(bridge: str) -> str:
    """The names of a job's host links outside their namespaces start with this (a bridge name's 11th
    character is hex, never ``v``)."""
    return bridge[:10] + "v"


def _used_networks() -> list[ipaddress.IPv4Network]:
    from pyroute2 import IPRoute

    used = []
    with IPRoute() as ipr:
        for r in ipr.get_routes(family=socket.AF_INET):
            dst = r.get("dst") or r.get_attr("RTA_DST")
            if dst:
                used.append(ipaddress.ip_network(f"{dst}/{r['dst_len']}", strict=False))
        for a in ipr.get_addr(family=socket.AF_INET):
            used.append(ipaddress.ip_network(f"{a.get_attr('IFA_ADDRESS')}/{a['prefixlen']}", strict=False))
    return [n for n in used if not n.is_loopback]


def pick_subnet(seed: int = 0) -> ipaddress.IPv4Network:
    """A /24 in a private range that no route or address of this machine overlaps."""
    override = os.environ.get("SMDIST_LOCAL_SUBNET")
    if override:
        net = ipaddress.ip_network(override, strict=False)
        if net.prefixlen > 24:
            raise ValueError(f"SMDIST_LOCAL_SUBNET={override}: give a /24 or a larger network")
        return next(net.subnets(new_prefix=24))
    used = _used_networks()
    for block in map(ipaddress.ip_network, CANDIDATES):
        count = block.num_addresses // 256
        base = int(block.network_address)
        for i in range(count):
            net = ipaddress.IPv4Network((base + ((seed + i) % count) * 256, 24))
            if not any(net.overlaps(u) for u in used):
                return net
    raise RuntimeError("no private /24 free of this machine's routes: set SMDIST_LOCAL_SUBNET")


def _setns(fd: int) -> None:
    if _libc.setns(fd, _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@contextlib.contextmanager
def inside(pid: int) -> Iterator[None]:
    """The calling thread in the network namespace of ``pid`` (sockets made meanwhile stay in it)."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    try:
        _setns(target)
        try:
            yield
        finally:
            _setns(own)
    finally:
        os.close(own)
        os.close(target)


def _pipe(a: socket.socket, b: socket.socket) -> None:
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            b.sendall(data)
    except OSError:
        pass
    finally:
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _serve(listener: socket.socket, target: tuple[str, int]) -> None:
    while True:
        try:
            conn, _addr = listener.accept()
        except OSError:
            return
        try:
            out = socket.create_connection(target, timeout=10)
            out.settimeout(None)
        except OSError:
            conn.close()
            continue
        for a, b in ((conn, out), (out, conn)):
            threading.Thread(target=_pipe, args=(a, b), daemon=True).start()


def loopback_endpoint(url: str | None) -> tuple[str, int] | None:
    """(address, port) of an endpoint URL on this machine's loopback, else None."""
    if not url:
        return None
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        if host == "localhost" or ipaddress.ip_address(host).is_loopback:
            return ("127.0.0.1" if host == "localhost" else host,
                    parts.port or (443 if parts.scheme == "https" else 80))
    except ValueError:
        return None
    return None


class JobNetwork:
    """The bridge of one job and its hosts' links."""

    def __init__(self, job_dir: str, subnet: ipaddress.IPv4Network) -> None:
        self.bridge = bridge_name(job_dir)
        self.subnet = subnet
        self.listeners: list[socket.socket] = []

    def address(self, n: int) -> str:
        return str(self.subnet.network_address + n)

    def create(self) -> None:
        import psutil
        from pyroute2 import IPRoute

        REGISTRY.mkdir(parents=True, exist_ok=True)
        me = psutil.Process()
        (REGISTRY / self.bridge).write_text(json.dumps({"pid": me.pid, "create_time": me.create_time()}))
        with IPRoute() as ipr:
            if ipr.link_lookup(ifname=self.bridge):
                ipr.link("del", ifname=self.bridge)
            ipr.link("add", ifname=self.bridge, kind="bridge")
            ipr.link("set", ifname=self.bridge, state="up")

    def plug(self, n: int, pid: int) -> None:
        """Give the host whose network namespace ``pid`` is in its ``eth0`` on the bridge, and ``lo``."""
        from pyroute2 import IPRoute

        outside = f"{host_link_prefix(self.bridge)}{n}"  # smdb + 6 hex + v + N: at most 14 characters
        with IPRoute() as ipr:
            ipr.link("add", ifname=outside, kind="veth", peer={"ifname": "eth0", "net_ns_pid": pid})
            ipr.link("set", ifname=outside, master=ipr.link_lookup(ifname=self.bridge)[0], state="up")
        with inside(pid), IPRoute() as ns:  # a netlink socket opened in the host's namespace
            eth0 = ns.link_lookup(ifname="eth0")[0]
            ns.addr("add", index=eth0, address=self.address(n), prefixlen=self.subnet.prefixlen)
            ns.link("set", index=eth0, state="up")
            ns.link("set", index=ns.link_lookup(ifname="lo")[0], state="up")

    def forward(self, pid: int, endpoint: tuple[str, int]) -> None:
        """Let the host reach ``endpoint`` (a loopback address and port of this machine) at the same
        address and port inside its namespace."""
        with inside(pid):
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(endpoint)
            listener.listen(64)
        self.listeners.append(listener)
        threading.Thread(target=_serve, args=(listener, endpoint), daemon=True).start()

    def remove(self) -> None:
        for s in self.listeners:
            try:
                s.close()
            except OSError:
                pass
        remove_bridge(self.bridge)


def remove_bridge(name: str) -> None:
    from pyroute2 import IPRoute
    from pyroute2.netlink.exceptions import NetlinkError

    hosts = host_link_prefix(name)
    with IPRoute() as ipr:
        # the hosts' veths first: one dies with its namespace, but the kernel tears a namespace down
        # asynchronously, so a link can outlive the job by seconds; deleting it takes both ends at once
        links = [link.get("ifname") or link.get_attr("IFLA_IFNAME") for link in ipr.get_links()]
        for ifname in [n for n in links if n and n.startswith(hosts)] + [name]:
            try:
                if ipr.link_lookup(ifname=ifname):
                    ipr.link("del", ifname=ifname)
            except NetlinkError:
                pass
    try:
        (REGISTRY / name).unlink()
    except FileNotFoundError:
        pass


def reclaim() -> list[str]:
    """Delete the bridges whose supervisor is gone (killed with -9, say); returns their names."""
    import psutil

    if not REGISTRY.is_dir():
        return []
    gone = []
    for entry in REGISTRY.iterdir():
        try:
            owner = json.loads(entry.read_text())
            proc = psutil.Process(owner["pid"])
            alive = (abs(proc.create_time() - owner["create_time"]) < 0.01
                     and proc.status() != psutil.STATUS_ZOMBIE)
        except (psutil.NoSuchProcess, ValueError, KeyError, OSError):
            alive = False
        if not alive:
            remove_bridge(entry.name)
            gone.append(entry.name)
    return gone
