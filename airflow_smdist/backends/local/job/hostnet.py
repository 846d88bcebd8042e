"""The network of a job's simulated hosts: one Linux bridge per job, one veth pair per host (iproute2's ``ip``).

Each host's end of its veth pair is ``eth0`` in the host's network namespace (SageMaker's
``network_interface_name``), addressed ``<subnet>.N`` for ``algo-N``. The subnet is a /24 picked at run
time from the private ranges the machine's routes and addresses and the other running jobs do not use
(``SMDIST_LOCAL_SUBNET`` names a network to pick from instead).

What a host reaches outside the job, as a SageMaker container reaches the network of its VPC:

* the worker's *loopback* endpoints (moto's server in tests, a local S3) through *forwarders*: the
  supervisor opens a listening socket inside the host's namespace on the address and port of the endpoint
  and pipes each connection to the same endpoint outside, so the host uses the very URL the worker uses;
* everything else the worker reaches (its other addresses, its network, the internet where it has it)
  through the job's *gateway*: the bridge gets ``<subnet>.254``, every host a default route via it, and a
  per-job nftables table (``ip smdist_<bridge>``, made with ``nft -j``) masquerades the job's subnet out of
  the machine, as Docker's default bridge does, and forwards nothing *into* the job but replies (no other
  job's host, no other machine, opens a connection to a host). Forwarding off the machine needs
  ``net.ipv4.ip_forward=1``, which is machine-wide: it is turned on when a job needs it (the job's log says
  so) and left on, as Docker leaves it.

With ``EnableNetworkIsolation`` a job gets neither: its bridge has no address and no route leads to it, so
its hosts reach nothing but each other. Where the NAT cannot be made (no ``nft``, ``SMDIST_LOCAL_NAT=off``)
hosts reach only the forwarded loopback endpoints, and the job's log says so.

A host's veth pair dies with its network namespace; the bridge (its address and route with it), the hosts'
links and the nftables table are deleted by the supervisor before the job's final status, or by
:func:`reclaim` (run by the next submit or describe) when its supervisor is gone (kill -9). Bridges are
named ``smdb<8 hex>`` and registered with their owner's PID and start time and their subnet in
``/run/smdist/bridges``.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import ipaddress
import json
import os
import select
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

REGISTRY = Path(os.environ.get("SMDIST_LOCAL_NET_REGISTRY", "/run/smdist/bridges"))
CANDIDATES = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
GATEWAY = 254  # <subnet>.254 on the bridge (hosts are .1 to .253)
NAT_ENV = "SMDIST_LOCAL_NAT"
IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")
_CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def bridge_name(job_dir: str) -> str:
    return "smdb" + hashlib.sha1(str(job_dir).encode()).hexdigest()[:8]


def host_link_prefix(bridge: str) -> str:
    """The names of a job's host links outside their namespaces start with this (a bridge name's 11th
    character is hex, never ``v``)."""
    return bridge[:10] + "v"


def ip_path() -> str | None:
    """iproute2's ``ip``, which sets up every link, address and route of a job's network (a few milliseconds
    a call, where importing a netlink library costs a supervisor 0.15 s)."""
    return shutil.which("ip") or next((p for p in ("/usr/sbin/ip", "/sbin/ip", "/bin/ip") if os.access(p, os.X_OK)),
                                      None)


def ip(*args: str, batch: list[str] | None = None, check: bool = True) -> str:
    """Run ``ip args`` (with ``batch``: its commands, one transaction of lines on stdin, ``-batch -``); its output.
    A failure raises OSError with ip's message unless ``check`` is false. Run from a thread that is
    :func:`inside` a host, it acts in the host's network namespace (the child inherits the thread's)."""
    cmd = [ip_path() or "ip", *args, *(("-batch", "-") if batch is not None else ())]
    r = subprocess.run(cmd, input="".join(f"{line}\n" for line in batch) if batch is not None else None,
                       capture_output=True, text=True, timeout=20, check=False)
    if check and r.returncode != 0:
        raise OSError(f"ip {' '.join(args)}{': ' + '; '.join(batch) if batch else ''}: "
                      f"{r.stderr.strip() or f'exit {r.returncode}'}")
    return r.stdout


def _used_networks() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    used: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    for r in json.loads(ip("-j", "-4", "route", "show", "table", "all") or "[]"):
        if r.get("dst") and r["dst"] != "default":  # "10.1.2.0/24", or a host route "10.1.2.3"
            used.append(ipaddress.ip_network(r["dst"], strict=False))
    for link in json.loads(ip("-j", "-4", "addr", "show") or "[]"):
        for a in link.get("addr_info") or []:
            if a.get("local") and a.get("prefixlen") is not None:
                used.append(ipaddress.ip_network(f"{a['local']}/{a['prefixlen']}", strict=False))
    return [n for n in used if not n.is_loopback]


def pick_subnet(seed: int = 0, taken: tuple[ipaddress.IPv4Network, ...] = ()) -> ipaddress.IPv4Network:
    """A /24 that no route or address of this machine overlaps (in ``SMDIST_LOCAL_SUBNET`` where set, else
    in a private range) and that is not in ``taken`` (the subnets of the other running jobs)."""
    override = os.environ.get("SMDIST_LOCAL_SUBNET")
    used: list[ipaddress.IPv4Network | ipaddress.IPv6Network]
    if override:
        net = ipaddress.ip_network(override, strict=False)
        if net.prefixlen > 24 or not isinstance(net, ipaddress.IPv4Network):
            raise ValueError(f"SMDIST_LOCAL_SUBNET={override}: give an IPv4 /24 or a larger network")
        blocks, used = [net], list(taken)
    else:
        blocks, used = [ipaddress.IPv4Network(c) for c in CANDIDATES], [*_used_networks(), *taken]
    for block in blocks:
        count = block.num_addresses // 256
        base = int(block.network_address)
        for i in range(count):
            candidate = ipaddress.IPv4Network((base + ((seed + i) % count) * 256, 24))
            if not any(candidate.overlaps(u) for u in used):
                return candidate
    if override:
        raise RuntimeError(f"SMDIST_LOCAL_SUBNET={override}: every /24 in it is used by a running job; "
                           "give a larger network")
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


def nat_table(bridge: str) -> str:
    """The name of a job's nftables table (family ``ip``)."""
    return f"smdist_{bridge}"


def _nft_path() -> str | None:
    return shutil.which("nft") or next((p for p in ("/usr/sbin/nft", "/sbin/nft") if os.access(p, os.X_OK)), None)


def nat_unavailable() -> str | None:
    """None when a job's hosts can be given NAT here, else why not."""
    if os.environ.get(NAT_ENV, "auto").strip().lower() in ("off", "0", "false", "no"):
        return f"{NAT_ENV}=off"
    if not _nft_path():
        return "nftables' nft is not installed (apt-get install nftables)"
    return None


def _nft(commands: list[dict[str, Any]]) -> None:
    """One atomic nftables transaction, given as JSON (``nft -j -f -``)."""
    _nft_wait(_nft_start(commands))


def _nft_start(commands: list[dict[str, Any]]) -> subprocess.Popen[str]:
    """:func:`_nft`, started: it runs while the caller does something else; :func:`_nft_wait` ends it."""
    proc = subprocess.Popen([_nft_path() or "nft", "-j", "-f", "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    with proc.stdin:  # a few kB: within a pipe's buffer, so nft reads it while the caller goes on
        proc.stdin.write(json.dumps({"nftables": commands}))
    return proc


def _nft_wait(proc: subprocess.Popen[str]) -> None:
    """Wait for an nft started by :func:`_nft_start`; OSError with its message if it failed."""
    assert proc.stdout is not None
    # its output ends when it exits: poll wakes then (Popen.wait with a timeout polls in sleeps of up to
    # 50 ms, which doubled the time of a 10 ms transaction)
    poller = select.poll()
    poller.register(proc.stdout, select.POLLIN)
    if not poller.poll(20_000):
        proc.kill()
    with proc.stdout:
        message = proc.stdout.read().strip()  # nft prints nothing but its errors: never a pipe's worth
    code = proc.wait()
    if code != 0:
        raise OSError(f"nft: {message or f'exit {code}'}")


def _match(key: dict[str, Any], value: object, op: str = "==") -> dict[str, Any]:
    return {"match": {"op": op, "left": key, "right": value}}


def nat_ruleset(bridge: str, subnet: ipaddress.IPv4Network, link: str | None = None) -> list[dict[str, Any]]:
    """The job's table, made anew: masquerade what leaves the job for anywhere but its link (its bridge, or a
    one-host job's host link); forward into the job only replies; never from the job to another job's links."""
    table = {"family": "ip", "table": nat_table(bridge)}
    link = link or bridge
    oif = {"meta": {"key": "oifname"}}
    saddr, daddr = ({"payload": {"protocol": "ip", "field": f}} for f in ("saddr", "daddr"))
    job = {"prefix": {"addr": str(subnet.network_address), "len": subnet.prefixlen}}
    # Between hosts of the job, by address: with br_netfilter (Docker loads it) bridged frames pass these
    # hooks too, with a bridge *port* as their interface, so an interface test would masquerade them.
    rules = [
        ("forward", [_match(saddr, job), _match(daddr, job), {"accept": None}]),
        ("forward", [_match(saddr, job), _match(oif, "smdb*"), {"drop": None}]),  # to another job's hosts
        ("forward", [_match(oif, link), _match({"ct": {"key": "state"}}, ["established", "related"], "in"),
                     {"accept": None}]),
        ("forward", [_match(oif, link), {"drop": None}]),  # nothing opens a connection into the job
        ("postrouting", [_match(saddr, job), _match(daddr, job, "!="), {"masquerade": None}]),
    ]
    return [
        {"add": {"table": {"family": "ip", "name": table["table"]}}},
        {"delete": {"table": {"family": "ip", "name": table["table"]}}},
        {"add": {"table": {"family": "ip", "name": table["table"]}}},
        {"add": {"chain": {**table, "name": "forward", "type": "filter", "hook": "forward", "prio": 0,
                           "policy": "accept"}}},
        {"add": {"chain": {**table, "name": "postrouting", "type": "nat", "hook": "postrouting", "prio": 100,
                           "policy": "accept"}}},
        *({"add": {"rule": {**table, "chain": chain, "expr": expr}}} for chain, expr in rules),
    ]


def delete_nat(bridge: str) -> None:
    """Delete a job's table if there is one (adding it first makes the delete never fail)."""
    if _nft_path():
        _nft(_drop_table(bridge))


def _drop_table(bridge: str) -> list[dict[str, Any]]:
    name = nat_table(bridge)
    return [{"add": {"table": {"family": "ip", "name": name}}}, {"delete": {"table": {"family": "ip", "name": name}}}]


def enable_forwarding() -> bool:
    """``net.ipv4.ip_forward=1`` (machine-wide, left on as Docker leaves it); True when this turned it on."""
    if IP_FORWARD.read_text().strip() == "1":
        return False
    IP_FORWARD.write_text("1\n")
    return True


def dns_note(resolv_conf: str = "/etc/resolv.conf") -> str:
    """A warning for the job's log when the hosts cannot resolve names: they share this machine's
    ``/etc/resolv.conf``, and a loopback nameserver (systemd-resolved's 127.0.0.53) is not theirs."""
    try:
        with open(resolv_conf) as f:
            servers = [p[1] for p in (line.split() for line in f) if len(p) > 1 and p[0] == "nameserver"]
    except OSError:
        return ""
    try:
        if servers and all(ipaddress.ip_address(s.split("%")[0]).is_loopback for s in servers):
            return (f"; names do not resolve in a host: {resolv_conf} names only loopback nameservers "
                    f"({', '.join(servers)})")
    except ValueError:
        return ""
    return ""


def _lock_path() -> Path:
    return REGISTRY.parent / (REGISTRY.name + ".lock")


def _registered() -> dict[str, dict[str, Any]]:
    """The registry's entries: bridge name -> {pid, create_time, subnet, nat}."""
    entries: dict[str, dict[str, Any]] = {}
    for entry in REGISTRY.iterdir() if REGISTRY.is_dir() else ():
        try:
            entries[entry.name] = json.loads(entry.read_text())
        except (ValueError, OSError):
            entries[entry.name] = {}
    return entries


class JobNetwork:
    """The bridge of one job (none for one host), its hosts' links and, unless isolated, its gateway and NAT."""

    def __init__(self, job_dir: str, subnet: ipaddress.IPv4Network, *, hosts: int = 2) -> None:
        self.bridge = bridge_name(job_dir)
        self.subnet = subnet
        #: a one-host job has no bridge: its host's link outside its namespace is the job's one link (the
        #: gateway's address on it); a bridge costs ~45 ms of kernel time to delete before the job may end
        self.single = hosts == 1
        self.listeners: list[socket.socket] = []
        self.gateway: str | None = None  # <subnet>.254 once the job has NAT
        self.forwarding_enabled = False  # this job turned net.ipv4.ip_forward on
        #: the NAT table's nftables transaction while it runs (see add_nat and settle)
        self.nat_pending: subprocess.Popen[str] | None = None

    @classmethod
    def allocate(cls, job_dir: str, seed: int, *, nat: bool, hosts: int = 2,
                 owner: dict[str, Any] | None = None) -> tuple[JobNetwork, str | None]:
        """Reclaim dead jobs' bridges, pick this job's subnet and make its bridge (a job of ``hosts`` > 1), all
        under one machine-wide lock (two jobs with NAT must not get one subnet: the machine would route both
        to one bridge). With ``nat``, also start its NAT (:meth:`add_nat`; :meth:`settle` finishes it, with the
        gateway); returns why the job cannot have NAT here (else None). ``owner``: the process the network
        belongs to, as :func:`..store.owner_alive` reads it (default: this one)."""
        from airflow_smdist.backends.local.store import locked, this_process

        owner = owner or this_process()
        with locked(_lock_path()):
            reclaim(tables=False)  # a job's end deletes tables of no job (remove), off the job's start
            taken = tuple(ipaddress.IPv4Network(e["subnet"]) for e in _registered().values()
                          if e.get("nat") and e.get("subnet"))
            net = cls(job_dir, pick_subnet(seed=seed, taken=taken), hosts=hosts)
            why = nat_unavailable() if nat else None
            REGISTRY.mkdir(parents=True, exist_ok=True)
            (REGISTRY / net.bridge).write_text(json.dumps({"pid": owner["pid"], "create_time": owner["create_time"],
                                                           "subnet": str(net.subnet), "nat": nat and not why}))
            net.create()
            if nat and not why:
                try:
                    net.add_nat()
                except OSError as e:
                    why = f"the hosts' NAT could not be set up: {e}"
        return net, why

    def address(self, n: int) -> str:
        return str(self.subnet.network_address + n)

    def outside(self, n: int) -> str:
        """The name of host ``n``'s link outside its namespace: smdb + 6 hex + v + N, at most 14 characters."""
        return f"{host_link_prefix(self.bridge)}{n}"

    @property
    def link(self) -> str:
        """The job's link on this machine's side: its bridge, or a one-host job's host link."""
        return self.outside(1) if self.single else self.bridge

    def create(self) -> None:
        if self.single:
            return
        make = [f"link add name {self.bridge} type bridge", f"link set {self.bridge} up"]
        try:
            ip(batch=make)
        except OSError:  # one left by an earlier job of this directory
            ip("link", "del", self.bridge, check=False)
            ip(batch=make)

    def add_nat(self) -> None:
        """Start the job's NAT table: one nftables transaction, whose commit takes the kernel ~15 ms, while the
        supervisor goes on starting its hosts. :meth:`settle` waits for it before any host is plugged."""
        self.nat_pending = _nft_start(nat_ruleset(self.bridge, self.subnet, self.link))

    def settle(self) -> str | None:
        """Finish the NAT :meth:`add_nat` started: the table first, then forwarding and the gateway's address,
        so the subnet is never routable here without its rules. Returns why the job has no NAT after all (it
        is undone, and the hosts reach the worker through forwarders only), else None."""
        proc, self.nat_pending = self.nat_pending, None
        if proc is None:
            return None
        try:
            _nft_wait(proc)
            self.forwarding_enabled = enable_forwarding()
            gateway = self.address(GATEWAY)
            if not self.single:  # a one-host job's link gets the gateway's address once it is made (plug)
                ip("addr", "add", f"{gateway}/{self.subnet.prefixlen}", "dev", self.bridge)
        except OSError as e:
            with contextlib.suppress(OSError):
                delete_nat(self.bridge)
            return f"the hosts' NAT could not be set up: {e}"
        self.gateway = gateway
        return None

    def plug(self, n: int, pid: int) -> None:
        """Give the host whose network namespace ``pid`` is in its ``eth0`` on the job's link, and ``lo``; and a
        default route via the job's gateway where it has one."""
        outside = self.outside(n)
        if not self.single:
            attach = [f"link set {outside} master {self.bridge} up"]
        else:  # the job's one link: up, with the gateway's address where the job has one
            gateway = [f"addr add {self.gateway}/{self.subnet.prefixlen} dev {outside}"] if self.gateway else []
            attach = [f"link set {outside} up", *gateway]
        ip(batch=[f"link add name {outside} type veth peer name eth0 netns {pid}", *attach])
        host = [f"addr add {self.address(n)}/{self.subnet.prefixlen} dev eth0", "link set eth0 up", "link set lo up"]
        if self.gateway:
            host.append(f"route add default via {self.gateway} dev eth0")
        with inside(pid):  # ip started from this thread runs in the host's namespace
            ip(batch=host)

    def unplug(self, n: int, timeout: float = 5) -> None:
        """Take host ``n``'s link away (a host that ran a pre-run step: the kernel frees a network namespace's
        links asynchronously, and the host's entry point gets the same link name)."""
        outside = self.outside(n)
        ip("link", "del", outside, check=False)
        deadline = time.monotonic() + timeout
        while os.path.exists(f"/sys/class/net/{outside}") and time.monotonic() < deadline:
            time.sleep(0.01)

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
        if self.nat_pending is not None:  # a job that ended before its first host: its table is made, then goes
            with contextlib.suppress(OSError):
                _nft_wait(self.nat_pending)
            self.nat_pending = None
        for s in self.listeners:
            try:
                s.close()
            except OSError:
                pass
        remove_bridge(self.bridge, hosts_ended=True)
        delete_orphan_tables()


def remove_bridge(name: str, *, hosts_ended: bool = False) -> None:
    """Delete a job's links, then its table, then its registry entry. With ``hosts_ended`` (its supervisor's own
    teardown: every host has exited, nothing sends through the job's links) the table goes while the kernel
    deletes the links (tens of milliseconds for a bridge) rather than after them."""
    nat = _nft_start(_drop_table(name)) if hosts_ended and _nft_path() else None
    hosts = host_link_prefix(name)
    # the hosts' veths first: one dies with its namespace, but the kernel tears a namespace down
    # asynchronously, so a link can outlive the job by seconds; deleting it takes both ends at once
    links = [link.get("ifname") for link in json.loads(ip("-j", "link", "show", check=False) or "[]")]
    gone = [n for n in links if n and (n.startswith(hosts) or n == name)]
    if gone:  # -force: a link that vanished meanwhile does not keep the others; a bridge takes its address and route
        ip("-force", batch=[f"link del {n}" for n in sorted(gone, key=lambda n: n == name)], check=False)
    try:
        _nft_wait(nat) if nat is not None else delete_nat(name)
    except OSError:
        return  # registered still: the next reclaim tries again
    try:
        (REGISTRY / name).unlink()
    except FileNotFoundError:
        pass


def _orphan_tables() -> list[str]:
    """Jobs' nftables tables with no registered bridge. A job is registered before its table is made and its
    table deleted before it is unregistered, so such a table belongs to no job (a reclaim by an older
    version, which knew no tables, left it)."""
    if not _nft_path():
        return []
    r = subprocess.run([_nft_path() or "nft", "-j", "list", "tables", "ip"], capture_output=True, text=True,
                       timeout=20, check=False)
    try:
        names = [e["table"]["name"] for e in json.loads(r.stdout)["nftables"] if "table" in e]
    except (ValueError, KeyError, TypeError):
        return []
    prefix = nat_table("smdb")
    return [n for n in names if n.startswith(prefix) and not (REGISTRY / n[len("smdist_"):]).exists()]


def delete_orphan_tables() -> None:
    """Delete the tables of no job (see :func:`_orphan_tables`)."""
    for table in _orphan_tables():
        with contextlib.suppress(OSError):
            delete_nat(table[len("smdist_"):])


def reclaim(*, tables: bool = True) -> list[str]:
    """Delete the bridges whose supervisor is gone (killed with -9, say), and (with ``tables``) tables of no
    job; returns the bridges' names. A job's start reclaims bridges only (reading the registry costs
    microseconds; listing nftables' tables takes a process): its end deletes tables of no job, after its
    final state (:meth:`JobNetwork.remove`)."""
    from airflow_smdist.backends.local.store import owner_alive

    if tables:
        delete_orphan_tables()
    if not REGISTRY.is_dir():
        return []
    gone = []
    for entry in REGISTRY.iterdir():
        try:
            alive = owner_alive(json.loads(entry.read_text()))
        except (ValueError, OSError):
            alive = False
        if not alive:
            remove_bridge(entry.name)
            gone.append(entry.name)
    return gone
