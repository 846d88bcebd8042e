"""Simulated hosts behave like SageMaker instances: names, network stacks, /tmp, lifetime, containment.

Real local training jobs, in both host modes where it matters: namespaces (root, as CI runs) and the
loopback fallback (``SMDIST_LOCAL_ISOLATION=none``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import threading
import time
import uuid

import psutil
import pytest

from airflow_smdist.backends.local import LocalBackend
from airflow_smdist.backends.local.job import hostnet, launcher
from airflow_smdist.sourcedir import upload_source
from airflow_smdist.specs.training import build_training

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOSTS = os.path.join(REPO, "tests", "fixtures", "hosts")
MPI = os.path.join(REPO, "tests", "fixtures", "mpi")
ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
needs_namespaces = pytest.mark.skipif(launcher.namespace_prefix() is None,
                                      reason=f"hosts cannot be namespaced here: {launcher.namespaces_available()}")


@pytest.fixture
def backend(tmp_path):
    return LocalBackend(tmp_path / "jobs")


@pytest.fixture
def data(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    (d / "x.csv").write_text("1\n")
    return f"file://{d}"


def submit(backend, tmp_path, data, entry, *, instance_count=2, hps=None, source=HOSTS, **kw):
    name = f"{entry.split('.')[0].replace('_', '-')}-{uuid.uuid4().hex[:8]}"
    plan = build_training(job_name=name, role=ROLE, output_path=f"file://{tmp_path}/out", entry_point=entry,
                          source_dir=source, image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1",
                          instance_type="ml.m5.xlarge", instance_count=instance_count, hyperparameters=hps or {},
                          inputs={"train": data}, **kw)
    upload_source(plan.source_dir, entry, plan.source_uri)
    backend.submit("training", plan.request)
    return name


def wait(backend, name, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        d = backend.describe("training", name)
        if d["TrainingJobStatus"] in ("Completed", "Failed", "Stopped"):
            return d
        time.sleep(0.2)
    raise AssertionError(f"{name} still running: {backend.job_dir('training', name) / 'supervisor.log'}")


def model_files(d) -> dict[str, bytes]:
    with tarfile.open(d["ModelArtifacts"]["S3ModelArtifacts"][len("file://"):]) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def job_processes(job_dir) -> list[int]:
    """Live processes started for the job: every host process has the job's directory in its command line
    or working directory, or TRAINING_JOB_NAME in its environment."""
    name = os.path.basename(job_dir)
    found = []
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{pid}/stat") as f:
                zombie = f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            continue
        if not zombie and (f"TRAINING_JOB_NAME={name}".encode() in env or str(job_dir).encode() in cmd):
            found.append(pid)
    return found


def assert_nothing_left(backend, name):
    job_dir = backend.job_dir("training", name)
    state = json.loads((job_dir / "state.json").read_text())
    deadline = time.time() + 10
    while job_processes(job_dir) and time.time() < deadline:
        time.sleep(0.1)
    assert job_processes(job_dir) == [], "a process of the job outlived it"
    bridge = hostnet.bridge_name(str(job_dir))
    assert state.get("network", {}).get("bridge", bridge) == bridge
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        names = [link.get("ifname") for link in ipr.get_links()]
    assert not [n for n in names if n.startswith(bridge[:10])], "an interface of the job was left behind"
    assert not (hostnet.REGISTRY / bridge).exists()
    if hostnet.nat_unavailable() is None:
        out = subprocess.run(["nft", "-j", "list", "tables", "ip"], capture_output=True, text=True, check=True).stdout
        tables = [e["table"]["name"] for e in json.loads(out)["nftables"] if "table" in e]
        assert hostnet.nat_table(bridge) not in tables, "the job's nftables table was left behind"
    with open("/proc/self/mountinfo") as f:
        assert str(job_dir) not in f.read(), "a mount of the job was left behind"


@pytest.mark.slow
@needs_namespaces
def test_hosts_have_their_own_name_network_stack_and_tmp(backend, tmp_path, data):
    name = submit(backend, tmp_path, data, "net.py", hps={"learning-rate": 0.1, "nothing": None})
    d = wait(backend, name)
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    files = model_files(d)
    one, two = (json.loads(files[f"algo-{n}.json"]) for n in (1, 2))
    # both bound 0.0.0.0:2222; host 2 reached host 1 by SM_HOSTS[0]
    assert two["reply"] == "hello from algo-1"
    assert two["hostname"] == two["current"] == "algo-2" and one["hostname"] == "algo-1"
    assert two["resolved"]["algo-1"] == one["resolved"]["algo-1"] != "127.0.0.1"
    assert one["peer"] == two["resolved"]["algo-2"]  # from host 2's own address, never through the NAT
    assert one["tmp"] == ["smdist-test-algo-1"] and two["tmp"] == ["smdist-test-algo-2"]  # private /tmp
    # exec without a shell: a name with '-' survives; None is "" on the command line, as the toolkit passes it
    assert one["lr"] == "0.1" and one["argv"] == ["--learning-rate", "0.1", "--nothing", ""]
    assert_nothing_left(backend, name)


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ["namespace", "none"])
def test_head_daemon_pattern_completes_when_the_head_script_ends(backend, tmp_path, data, monkeypatch, isolation):
    if isolation == "namespace" and launcher.namespace_prefix() is None:
        pytest.skip(f"hosts cannot be namespaced here: {launcher.namespaces_available()}")
    monkeypatch.setenv("SMDIST_LOCAL_ISOLATION", isolation)
    name = submit(backend, tmp_path, data, "head_daemon.py")
    d = wait(backend, name, timeout=60)
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    events = backend.log_events("training", name)[0]
    head_end = next(e.timestamp for e in events if "script ends" in e.message)
    worker_end = next(e.timestamp for e in events if "daemon is gone" in e.message)
    assert worker_end - head_end < 5  # the daemon died with its host, as a container's do
    assert_nothing_left(backend, name)


@pytest.mark.slow
def test_fallback_hosts_binding_0000_fail_with_a_reason_that_says_to_bind_sm_current_host(backend, tmp_path, data,
                                                                                           monkeypatch):
    """Issue 12: without namespaces the hosts share one network stack, so two hosts binding 0.0.0.0:2222 (as
    net.py does, and as its namespaced run shows works on SageMaker) collide; the reason says what to do."""
    monkeypatch.setenv("SMDIST_LOCAL_ISOLATION", "none")
    name = submit(backend, tmp_path, data, "net.py")
    d = wait(backend, name, timeout=60)
    assert d["TrainingJobStatus"] == "Failed"
    reason = d["FailureReason"]
    assert len(reason) <= 1024
    assert "OSError: [Errno 98] Address already in use" in reason, reason  # the exception line stays
    assert reason.endswith("the simulated hosts share one network stack here: bind SM_CURRENT_HOST's address, "
                           "not 0.0.0.0"), reason
    assert_nothing_left(backend, name)


@pytest.mark.slow
@pytest.mark.parametrize("pid_reused", [False, True])
def test_kill_9_of_the_supervisor_ends_every_host_process(backend, tmp_path, data, pid_reused):
    """With ``pid_reused`` the dead supervisor's PID belongs to a live, unrelated process by the time describe
    looks (the PID exists, its start time is another's): the job still fails rather than stay InProgress."""
    name = submit(backend, tmp_path, data, "sleep_daemon.py")
    job_dir = backend.job_dir("training", name)
    deadline = time.time() + 60
    while sum("sleeping" in e.message for e in backend.log_events("training", name)[0]) < 2:
        assert time.time() < deadline, "the hosts never started"
        time.sleep(0.2)
    assert len(job_processes(job_dir)) >= 4  # two hosts, each a script and its daemon at least
    os.kill(int((job_dir / "supervisor.pid").read_text().split()[0]), signal.SIGKILL)
    deadline = time.time() + 10
    while job_processes(job_dir) and time.time() < deadline:  # no describe call needed
        time.sleep(0.1)
    assert job_processes(job_dir) == []
    other = subprocess.Popen(["sleep", "60"]) if pid_reused else None
    try:
        if other is not None:  # same recorded start time, another process at the PID
            started = (job_dir / "supervisor.pid").read_text().split()[1]
            (job_dir / "supervisor.pid").write_text(f"{other.pid} {started}")
            assert psutil.pid_exists(other.pid)
        d = backend.describe("training", name)  # reclaims the bridge of the dead supervisor
        assert d["TrainingJobStatus"] == "Failed" and "supervisor exited unexpectedly" in d["FailureReason"]
        assert other is None or other.poll() is None  # the unrelated process is left alone
    finally:
        if other is not None:
            other.kill()
            other.wait()
    assert_nothing_left(backend, name)


@pytest.mark.slow
@pytest.mark.parametrize("ending", ["stop", "max_runtime"])
@pytest.mark.parametrize("isolation", ["namespace", "none"])
def test_a_double_forked_daemon_ends_with_a_stopped_or_timed_out_job(backend, tmp_path, data, monkeypatch,
                                                                     isolation, ending):
    """Issue 12: a process a script double-forks with setsid must not survive Stop or MaxRuntimeInSeconds."""
    if isolation == "namespace" and launcher.namespace_prefix() is None:
        pytest.skip(f"hosts cannot be namespaced here: {launcher.namespaces_available()}")
    monkeypatch.setenv("SMDIST_LOCAL_ISOLATION", isolation)
    name = submit(backend, tmp_path, data, "sleep_daemon.py", max_run=4 if ending == "max_runtime" else 86400)
    job_dir = backend.job_dir("training", name)
    most = 0  # the job's live processes at their most: both hosts' scripts and their escaped daemons
    deadline = time.time() + 60
    while backend.describe("training", name)["TrainingJobStatus"] == "InProgress" and time.time() < deadline:
        most = max(most, len(job_processes(job_dir)))
        if ending == "stop" and most >= 4:
            backend.stop("training", name)
            break
        time.sleep(0.1)
    assert most >= 4, "the hosts and their daemons never all ran"
    d = wait(backend, name, timeout=60)
    assert d["TrainingJobStatus"] == "Stopped", d.get("FailureReason")
    assert d["SecondaryStatus"] == ("Stopped" if ending == "stop" else "MaxRuntimeExceeded")
    assert_nothing_left(backend, name)


@pytest.mark.slow
@needs_namespaces
@pytest.mark.parametrize("isolated", [False, True])
def test_hosts_reach_the_workers_loopback_s3_endpoint_unless_network_isolated(tmp_path, moto_server, data,
                                                                               isolated):
    backend = LocalBackend(tmp_path / "jobs", s3_endpoint_url=moto_server)
    # moto's test keys through the request's Environment: the worker's own credentials never reach a job
    name = submit(backend, tmp_path, data, "s3_reach.py", instance_count=1, enable_network_isolation=isolated,
                  environment={"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"})
    d = wait(backend, name)
    if isolated:
        assert d["TrainingJobStatus"] == "Failed"
        assert "Could not connect to the endpoint URL" in d["FailureReason"], d["FailureReason"]
    else:
        assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
        assert any(e.message.startswith("buckets ") for e in backend.log_events("training", name)[0])
    assert_nothing_left(backend, name)


#: an HTTP server that answers with the address it sees the client at
ECHO_SERVER = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = self.client_address[0].encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
server = http.server.HTTPServer((sys.argv[1], 0), H)  # a free port: 8080 may be taken on 0.0.0.0
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def delete_links(names) -> None:
    """Delete these links where they exist (a link whose namespace is going away may vanish meanwhile)."""
    from pyroute2 import IPRoute
    from pyroute2.netlink.exceptions import NetlinkError

    with IPRoute() as ipr:
        for name in names:
            try:
                if ipr.link_lookup(ifname=name):
                    ipr.link("del", ifname=name)
            except NetlinkError:
                pass


@pytest.fixture
def off_loopback():
    """Two HTTP servers no forwarder leads to: one on "another machine" (a network namespace behind a veth
    pair, at 198.51.100.2, with no route back to any job's subnet: only a masqueraded connection gets an
    answer), one on this machine's non-loopback address on that link (198.51.100.1)."""
    from pyroute2 import IPRoute

    links = ("smdtout0",)
    procs = []
    delete_links(links)
    with IPRoute() as ipr:
        remote = subprocess.Popen(["unshare", "--net", "--", sys.executable, "-c", ECHO_SERVER, "0.0.0.0"],
                                  stdout=subprocess.PIPE, text=True)
        procs.append(remote)
        remote_port = int(remote.stdout.readline())  # in its own namespace by now
        ipr.link("add", ifname="smdtout0", kind="veth", peer={"ifname": "eth0", "net_ns_pid": remote.pid})
        ipr.addr("add", index=ipr.link_lookup(ifname="smdtout0")[0], address="198.51.100.1", prefixlen=30)
        ipr.link("set", ifname="smdtout0", state="up")
    with hostnet.inside(remote.pid), IPRoute() as ns:
        eth0 = ns.link_lookup(ifname="eth0")[0]
        ns.addr("add", index=eth0, address="198.51.100.2", prefixlen=30)
        ns.link("set", index=eth0, state="up")
    local = subprocess.Popen([sys.executable, "-c", ECHO_SERVER, "198.51.100.1"], stdout=subprocess.PIPE, text=True)
    procs.append(local)
    try:
        local_port = int(local.stdout.readline())
        yield {"local": f"http://198.51.100.1:{local_port}/", "remote": f"http://198.51.100.2:{remote_port}/"}
    finally:
        for p in procs:
            p.kill()
            p.wait()
        delete_links(links)


@pytest.mark.slow
@pytest.mark.serial  # off_loopback's link (smdtout0) and addresses are the machine's: one such test at a time
@needs_namespaces
@pytest.mark.skipif(hostnet.nat_unavailable() is not None, reason=f"no NAT here: {hostnet.nat_unavailable()}")
@pytest.mark.parametrize("isolated", [False, True])
@pytest.mark.parametrize("hosts", [2, 1])  # a one-host job has no bridge: its host link is its one link
def test_hosts_reach_the_workers_network_through_nat_unless_network_isolated(backend, tmp_path, data, off_loopback,
                                                                              isolated, hosts):
    urls = [off_loopback["local"], off_loopback["remote"]]
    name = submit(backend, tmp_path, data, "reach.py", instance_count=hosts, hps={"urls": ",".join(urls)},
                  enable_network_isolation=isolated)
    d = wait(backend, name)
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    events = backend.log_events("training", name)[0]
    # "reached <url>: <client address the server saw>" or "unreachable <url>: <error>", per host and URL
    seen = {(e.host, e.message.split()[1].rstrip(":")): e.message.split()[0] + " " + e.message.split(": ", 1)[1]
            for e in events if e.message.startswith(("reached ", "unreachable "))}
    state = json.loads((backend.job_dir("training", name) / "state.json").read_text())
    if isolated:
        assert len(seen) == 2 * hosts and all(m.startswith("unreachable") for m in seen.values()), seen
        assert state["network"]["gateway"] is None
        assert any("reach nothing outside the job" in e.message for e in events if e.host == "platform")
    else:
        gateway = state["network"]["gateway"]
        assert gateway.endswith(".254")
        for host in [f"algo-{n}" for n in range(1, hosts + 1)]:
            address = f"{state['network']['subnet'].rsplit('.', 1)[0]}.{host[-1]}"
            # this machine's own address: reached through the gateway, from the host's own address
            assert seen[(host, urls[0])] == f"reached {address}", seen
            # another machine: reached from this machine's address (masqueraded), as a container behind NAT
            assert seen[(host, urls[1])] == "reached 198.51.100.1", seen
        assert any(f"through the job's gateway {gateway}" in e.message for e in events if e.host == "platform")
    assert_nothing_left(backend, name)


@needs_namespaces
@pytest.mark.skipif(hostnet.nat_unavailable() is not None, reason=f"no NAT here: {hostnet.nat_unavailable()}")
def test_jobs_with_nat_never_share_a_subnet_and_leave_nothing(tmp_path):
    """Two jobs with NAT on one /24 would have the machine route both jobs' replies to one bridge."""
    nets = [hostnet.JobNetwork.allocate(str(tmp_path / f"job-{i}"), seed=7, nat=True) for i in range(2)]
    try:
        assert [why for _net, why in nets] == [None, None]
        assert [net.settle() for net, _why in nets] == [None, None]  # the NAT tables, made meanwhile
        a, b = (net for net, _why in nets)
        assert a.subnet != b.subnet and a.gateway == a.address(254) and b.gateway == b.address(254)
        isolated, why = hostnet.JobNetwork.allocate(str(tmp_path / "job-isolated"), seed=7, nat=False)
        # an isolated job's bridge has no address at all
        assert why is None and isolated.settle() is None and isolated.gateway is None
        isolated.remove()
    finally:
        for net, _why in nets:
            net.remove()
    out = subprocess.run(["nft", "-j", "list", "tables", "ip"], capture_output=True, text=True, check=True).stdout
    tables = {e["table"]["name"] for e in json.loads(out)["nftables"] if "table" in e}
    assert not tables & {hostnet.nat_table(n.bridge) for n, _why in nets}
    assert not [p for p in hostnet.REGISTRY.iterdir() if p.name in (a.bridge, b.bridge, isolated.bridge)]


@needs_namespaces
@pytest.mark.skipif(hostnet.nat_unavailable() is not None, reason=f"no NAT here: {hostnet.nat_unavailable()}")
def test_reclaim_deletes_a_table_no_job_owns():
    import ipaddress

    hostnet._nft(hostnet.nat_ruleset("smdb0rphan00", ipaddress.ip_network("10.254.254.0/24")))
    assert hostnet.nat_table("smdb0rphan00") in hostnet._orphan_tables()
    hostnet.reclaim()
    assert hostnet.nat_table("smdb0rphan00") not in hostnet._orphan_tables()


@pytest.mark.slow
def test_fallback_jobs_started_together_never_share_the_master_port(tmp_path, data, monkeypatch):
    """Issue 12's port race: probe-and-release gave two jobs started at once both 7777."""
    monkeypatch.setenv("SMDIST_LOCAL_ISOLATION", "none")
    backend = LocalBackend(tmp_path / "jobs")
    names = []

    def start():
        names.append(submit(backend, tmp_path, data, "hold_port.py", instance_count=1))

    threads = [threading.Thread(target=start) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results = [wait(backend, n) for n in names]
    assert [r["TrainingJobStatus"] for r in results] == ["Completed"] * 2, [r.get("FailureReason") for r in results]
    ports = {json.loads((backend.job_dir("training", n) / "state.json").read_text())["master_port"] for n in names}
    assert len(ports) == 2


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ["namespace", "none"])
def test_mpi4py_allreduce_on_2_hosts_x_2_processes_is_one_world_of_4(backend, tmp_path, data, monkeypatch, isolation):
    if isolation == "namespace" and launcher.namespace_prefix() is None:
        pytest.skip(f"hosts cannot be namespaced here: {launcher.namespaces_available()}")
    monkeypatch.setenv("SMDIST_LOCAL_ISOLATION", isolation)
    name = submit(backend, tmp_path, data, "allreduce.py", source=MPI,
                  distribution={"mpi": {"enabled": True, "processes_per_host": 2}})
    d = wait(backend, name)
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    lines = [e.message for e in backend.log_events("training", name)[0] if "rank=" in e.message]
    ranks = {int(m.split("rank=")[1].split()[0]): m for m in lines}
    assert sorted(ranks) == [0, 1, 2, 3] and all("size=4 total=10" in m for m in lines)  # 1+2+3+4 over one world
    assert all(m.startswith(f"[1,{r}]<stdout>:") for r, m in ranks.items())  # mpirun --tag-output
    assert all("torch_rank=None" in m for m in lines)  # what Open MPI sets, not torch's RANK
    if isolation == "namespace":  # ranks 2 and 3 run on algo-2, with the master's SM_* values as -x exports them
        assert [m.split("host=")[1].split()[0] for _r, m in sorted(ranks.items())] == ["algo-1"] * 2 + ["algo-2"] * 2
        assert all("sm_current_host=algo-1" in m for m in lines)
    assert_nothing_left(backend, name)


@pytest.mark.slow
@needs_namespaces
def test_an_exception_in_rank_3_fails_the_job_with_its_traceback_and_ends_every_rank(backend, tmp_path, data):
    name = submit(backend, tmp_path, data, "allreduce.py", source=MPI, hps={"fail-rank": 3},
                  distribution={"mpi": {"enabled": True, "processes_per_host": 2}})
    d = wait(backend, name, timeout=60)  # the other ranks sleep 120 s: only the abort ends them sooner
    assert d["TrainingJobStatus"] == "Failed"
    assert "ValueError: rank 3 failed on purpose" in d["FailureReason"], d["FailureReason"]
    assert_nothing_left(backend, name)


def test_mpi_job_is_refused_before_it_starts_where_mpi_cannot_be_had(backend, tmp_path, data, monkeypatch):
    from airflow_smdist.backends.local.job import mpi
    from airflow_smdist.specs.errors import SpecError

    monkeypatch.setattr(mpi, "mpirun_path", lambda bin_dir=None: None)
    with pytest.raises(SpecError, match="pip install 'airflow-smdist\\[local\\]'"):
        submit(backend, tmp_path, data, "allreduce.py", source=MPI, distribution={"mpi": {"enabled": True}})
    assert not list(backend.store.root.rglob("request.json")) if backend.store.root.exists() else True


@pytest.mark.slow
@needs_namespaces
def test_multi_worker_mirrored_strategy_gets_the_tf_toolkits_tf_config(backend, tmp_path, data):
    """TF_CONFIG as the TensorFlow training toolkit builds it (workers on port 8890, "environment": "cloud"),
    checked key by key with a plain script (test_local_tensorflow.py runs a real MWMS job on TensorFlow)."""
    name = submit(backend, tmp_path, data, "tf_config.py",
                  distribution={"multi_worker_mirrored_strategy": {"enabled": True}})
    d = wait(backend, name)
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    events = backend.log_events("training", name)[0]
    assert any(e.host == "platform" and e.message ==
               "Running distributed training job with multi_worker_mirrored_strategy setup" for e in events)
    configs = {e.host: json.loads(e.message[len("TF_CONFIG="):]) for e in events if e.message.startswith("TF_CONFIG=")}
    assert configs["algo-2"] == {"cluster": {"worker": ["algo-1:8890", "algo-2:8890"]}, "environment": "cloud",
                                 "task": {"index": 1, "type": "worker"}}
    assert configs["algo-1"]["task"] == {"index": 0, "type": "worker"}
    assert sum("reached every peer" in e.message for e in events) == 2


@pytest.mark.slow
@needs_namespaces
def test_multi_worker_mirrored_strategy_on_one_host_still_gets_tf_config(backend, tmp_path, data):
    """The toolkit sets TF_CONFIG for MWMS whatever the host count (only the parameter server needs two hosts): a
    script that reads it on one instance runs there, so it runs here."""
    name = submit(backend, tmp_path, data, "tf_config.py", instance_count=1,
                  distribution={"multi_worker_mirrored_strategy": {"enabled": True}})
    d = wait(backend, name)
    events = backend.log_events("training", name)[0]
    assert d["TrainingJobStatus"] == "Completed", (d.get("FailureReason"), [e.message for e in events][-20:])
    configs = [json.loads(e.message[len("TF_CONFIG="):]) for e in events if e.message.startswith("TF_CONFIG=")]
    assert configs == [{"cluster": {"worker": ["algo-1:8890"]}, "environment": "cloud",
                        "task": {"index": 0, "type": "worker"}}]
    assert any("worker 0 of 1 reached every peer" in e.message for e in events)


@pytest.mark.slow
@needs_namespaces
def test_a_host_outside_the_distribution_groups_is_logged_as_the_plain_process_it_runs(backend, tmp_path, data):
    """A heterogeneous cluster whose MPI distribution names one group: the other group's host runs the entry
    point as one plain process (the toolkits' ProcessRunner), and the platform line says so, not "mpi runner"."""
    name = f"hello-{uuid.uuid4().hex[:8]}"
    plan = build_training(job_name=name, role=ROLE, output_path=f"file://{tmp_path}/out", entry_point="hello.py",
                          source_dir=HOSTS, image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1",
                          instance_groups=[{"instance_group_name": "ranks", "instance_type": "ml.m5.xlarge"},
                                           {"instance_group_name": "side", "instance_type": "ml.c5.xlarge"}],
                          inputs={"train": data},
                          distribution={"mpi": {"enabled": True}, "instance_groups": ["ranks"]})
    upload_source(plan.source_dir, "hello.py", plan.source_uri)
    backend.submit("training", plan.request)
    d = wait(backend, name)
    events = backend.log_events("training", name)[0]
    assert d["TrainingJobStatus"] == "Completed", (d.get("FailureReason"), [e.message for e in events][-20:])
    runners = {e.message.split(" ")[0]: e.message for e in events
               if e.host == "platform" and "process(es)" in e.message}
    assert runners.keys() == {"algo-1", "algo-2"}, runners
    assert "mpi runner, 1 process(es)" in runners["algo-1"]
    assert "process runner (not in the distribution instance groups), 1 process(es)" in runners["algo-2"]
    assert {e.host for e in events if "hello from " + e.host in e.message} == {"algo-1", "algo-2"}


@pytest.mark.slow
@pytest.mark.parametrize(("install", "ending"), [("sleeps", "max_runtime"), ("holds_output", "stop")])
def test_stop_and_max_runtime_hold_during_the_pre_run_install(backend, tmp_path, data, monkeypatch, install, ending):
    """Issue 43: a setup.py whose install never ends (it sleeps, or leaves a process holding the installer's
    output) is ended by MaxRuntimeInSeconds or StopTrainingJob within the stop grace, as on SageMaker, in
    every phase: the job ends Stopped with SageMaker's secondary status and none of its processes is left."""
    monkeypatch.setenv("SMDIST_LOCAL_STOP_GRACE", "2")
    name = submit(backend, tmp_path, data, "train.py", instance_count=1,
                  source=os.path.join(REPO, "tests", "fixtures", "install_hangs", install),
                  max_run=5 if ending == "max_runtime" else 86400)
    job_dir = backend.job_dir("training", name)
    log = job_dir / "supervisor.log"
    deadline = time.time() + 60
    while "installing the setup.py package" not in (log.read_text() if log.exists() else ""):
        assert time.time() < deadline, "the install never started"
        time.sleep(0.1)
    time.sleep(3)  # the build runs (and, for holds_output, its setup.py has ended)
    assert backend.describe("training", name)["SecondaryStatus"] == "Downloading"
    asked = time.time()
    if ending == "stop":
        backend.stop("training", name)
    d = wait(backend, name, timeout=60)
    assert d["TrainingJobStatus"] == "Stopped", d.get("FailureReason")
    assert d["SecondaryStatus"] == ("Stopped" if ending == "stop" else "MaxRuntimeExceeded")
    assert time.time() - asked < 20, "the job outlived its limit by more than the stop grace"
    assert "trained" not in log.read_text()
    assert_nothing_left(backend, name)
