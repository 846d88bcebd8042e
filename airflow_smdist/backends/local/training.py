"""The supervisor of one local training job: ``python -m airflow_smdist.backends.local.training <job dir>``.

It runs detached from the Airflow task that submitted the job (its own session), so the task may die and
a retry reattach. It stages the job as SageMaker would (config files, channels with ShardedByS3Key,
source code, checkpoints), starts one process tree per simulated host, streams every host's output into
``logs/<host>.jsonl`` and through the MetricDefinitions regexes, syncs checkpoints, and at the end packs
``model.tar.gz`` to ``<S3OutputPath>/<job>/output/model.tar.gz``. A host that fails fails the job and ends
the others; StopTrainingJob (the ``stop`` file plus SIGTERM) and MaxRuntimeInSeconds end every process.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import tarfile
import tempfile
import threading
import time
import traceback
from pathlib import Path

from airflow_smdist.backends.local import contract, launcher
from airflow_smdist.backends.local.metrics import MetricParser
from airflow_smdist.backends.local.store import JobStore, read_json, write_json_atomic
from airflow_smdist.storage import Storage, parse_uri, relative_key, safe_join

FAILURE_LIMIT = 1024
CHECKPOINT_DEFAULT = "/opt/ml/checkpoints"


def stop_grace() -> float:
    return float(os.environ.get("SMDIST_LOCAL_STOP_GRACE", "30"))


def shard(objects: list, rank: int, n_hosts: int) -> list:
    """ShardedByS3Key: keys sorted, key i to the host of rank i % n (SageMaker promises ~1/n per host)."""
    ordered = sorted(objects, key=lambda o: o.key)
    return [o for i, o in enumerate(ordered) if i % n_hosts == rank]


def checkpoint_relpath(request: dict) -> str | None:
    cp = request.get("CheckpointConfig")
    if not cp:
        return None
    local = (cp.get("LocalPath") or CHECKPOINT_DEFAULT).rstrip("/")
    return os.path.relpath(local, "/opt/ml")


def free_port(preferred: int) -> int:
    """``preferred`` when nothing listens on it on any address, else a free port. torch's TCPStore binds
    the port on every address, so two jobs at once cannot both have 7777 even with distinct masters."""
    for port in (preferred, 0):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise RuntimeError("no free TCP port")


class Supervisor:
    def __init__(self, job_dir: Path) -> None:
        self.dir = Path(job_dir)
        self.store = JobStore(self.dir.parent.parent)
        self.request = read_json(self.dir / "request.json")
        self.name = self.request["TrainingJobName"]
        self.state = read_json(self.dir / "state.json")
        self.storage = Storage(endpoint_url=self.state.get("s3_endpoint_url"), region_name=self.state.get("region"))
        self.metrics = MetricParser(self.request["AlgorithmSpecification"].get("MetricDefinitions"))
        self.final_metrics: dict[str, list] = {}
        self.metrics_lock = threading.Lock()
        self.stop_requested = False
        self.procs: dict[str, object] = {}
        self.readers: list[threading.Thread] = []
        self.log = open(self.dir / "supervisor.log", "a", buffering=1)

    # -- state -----------------------------------------------------------------------------------
    def save(self, **changes) -> None:
        self.state.update(changes)
        with self.metrics_lock:
            self.state["final_metrics"] = dict(self.final_metrics)
        write_json_atomic(self.dir / "state.json", self.state)

    def secondary(self, status: str, message: str) -> None:
        t = time.time()
        transitions = self.state.setdefault("transitions", [])
        if transitions and "end" not in transitions[-1]:
            transitions[-1]["end"] = t
        transitions.append({"status": status, "start": t, "message": message})
        self.say(f"{status}: {message}")
        self.save(secondary_status=status)

    def say(self, message: str) -> None:
        """A platform line in the job's log (the 'platform' stream), like SageMaker's own messages."""
        line = json.dumps({"t": time.time(), "m": message})
        with open(self.dir / "logs" / "platform.jsonl", "a") as f:
            f.write(line + "\n")
        self.log.write(f"{time.strftime('%H:%M:%S')} {message}\n")

    def on_sigterm(self, _signum, _frame) -> None:
        self.stop_requested = True

    # -- staging ---------------------------------------------------------------------------------
    def host_dir(self, host: contract.Host) -> Path:
        return self.dir / "hosts" / host.label

    def stage(self, cluster: contract.Cluster) -> dict[str, list[str]]:
        req = self.request
        channels_of: dict[str, list[str]] = {}
        listings = {}
        for ch in req.get("InputDataConfig", []):
            src = ch["DataSource"].get("S3DataSource")
            if src is None:
                raise RuntimeError(f"channel {ch['ChannelName']}: only S3DataSource channels run locally")
            if src.get("S3DataType", "S3Prefix") == "ManifestFile":
                listings[ch["ChannelName"]] = self.manifest_objects(src["S3Uri"])
            else:
                listings[ch["ChannelName"]] = (src["S3Uri"], self.storage.list(src["S3Uri"]))
            if not listings[ch["ChannelName"]][1]:
                raise RuntimeError(f"ClientError: No S3 objects found under S3 URL \"{src['S3Uri']}\" given in "
                                   f"input data source. Please ensure that the bucket exists in the selected region, "
                                   f"that objects exist under that S3 prefix, and that the role has access.")
        source = self.fetch_source()
        ckpt_rel = checkpoint_relpath(req)
        ckpt_objects = self.storage.list(req["CheckpointConfig"]["S3Uri"]) if ckpt_rel else []
        for host in cluster.hosts:
            hd = self.host_dir(host)
            for sub in ("input/config", "input/data", "model", "output/data", "output/intermediate", "code"):
                (hd / sub).mkdir(parents=True, exist_ok=True)
            names = []
            for ch in req.get("InputDataConfig", []):
                ch_name = ch["ChannelName"]
                groups = ch["DataSource"]["S3DataSource"].get("InstanceGroupNames")
                if groups and host.group not in groups:
                    continue
                names.append(ch_name)
                prefix, objects = listings[ch_name]
                if ch["DataSource"]["S3DataSource"].get("S3DataDistributionType") == "ShardedByS3Key":
                    members = [h for h in cluster.hosts if not groups or h.group in groups]
                    order = sorted(h.address for h in members)
                    objects = shard(objects, order.index(host.address), len(order))
                dest = hd / "input" / "data" / ch_name
                dest.mkdir(parents=True, exist_ok=True)
                for obj in objects:
                    self.storage.download(obj.uri, safe_join(dest, relative_key(prefix, obj)))
            channels_of[host.label] = names
            write_json_atomic(hd / "input/config/hyperparameters.json", req.get("HyperParameters", {}))
            write_json_atomic(hd / "input/config/inputdataconfig.json", contract.input_data_config_json(req, names))
            write_json_atomic(hd / "input/config/resourceconfig.json", contract.resource_config_json(cluster, host))
            if source is not None:
                with tarfile.open(source) as tar:
                    tar.extractall(hd / "code", filter="data")  # rejects absolute and '..' members
            if ckpt_rel:
                cdir = safe_join(hd, ckpt_rel)
                cdir.mkdir(parents=True, exist_ok=True)
                for obj in ckpt_objects:
                    self.storage.download(obj.uri, safe_join(cdir, relative_key(req["CheckpointConfig"]["S3Uri"], obj)))
        return channels_of

    def manifest_objects(self, manifest_uri: str):
        """ManifestFile: first entry {"prefix": ...}, then keys relative to it."""
        entries = json.loads(self.storage.read_bytes(manifest_uri))
        prefix = entries[0]["prefix"]
        from airflow_smdist.storage import StoredObject

        objs = []
        for rel in entries[1:]:
            uri = prefix.rstrip("/") + "/" + rel if not prefix.endswith("/") else prefix + rel
            _s, _b, key = parse_uri(uri)
            objs.append(StoredObject(uri, key, 0))
        return prefix, objs

    def fetch_source(self) -> Path | None:
        hps = contract.decode_hyperparameters(self.request.get("HyperParameters", {}))
        submit = hps.get("sagemaker_submit_directory")
        if not submit:
            return None
        if submit.startswith("/opt/ml/input/data/code/"):  # network isolation: the 'code' channel
            code = next(c for c in self.request["InputDataConfig"] if c["ChannelName"] == "code")
            submit = code["DataSource"]["S3DataSource"]["S3Uri"]
        target = self.dir / "sourcedir.tar.gz"
        if "://" not in submit:
            submit = "file://" + os.path.abspath(submit)
        self.storage.download(submit, target)
        return target

    # -- running ---------------------------------------------------------------------------------
    def reader(self, host: contract.Host, stream) -> None:
        path = self.dir / "logs" / f"{host.label}.jsonl"
        with open(path, "a") as out:
            for raw in iter(stream.readline, b""):
                t = time.time()
                line = raw.decode("utf-8", "replace").rstrip("\n")
                out.write(json.dumps({"t": t, "m": line}) + "\n")
                out.flush()
                points = self.metrics.parse(line, t, host.label)
                if points:
                    with self.metrics_lock:
                        with open(self.dir / "metrics.jsonl", "a") as mf:
                            for p in points:
                                self.final_metrics[p.name] = [p.value, p.timestamp]
                                mf.write(json.dumps({"name": p.name, "value": p.value, "t": p.timestamp,
                                                     "host": p.host}) + "\n")
        stream.close()

    def launch(self, cluster: contract.Cluster, channels_of: dict, master_port: int, isolation: str) -> None:
        req = self.request
        hps = contract.decode_hyperparameters(req.get("HyperParameters", {}))
        user, fixed, extra = contract.split_hyperparameters(hps)
        runner = contract.launcher_of({**fixed, **extra})
        entry = fixed.get("sagemaker_program")
        spec = req["AlgorithmSpecification"]
        n_cpus = max(1, (os.cpu_count() or 1) // len(cluster.hosts))
        nproc = contract.processes_per_host(extra, 0)
        for host in cluster.hosts:
            hd = self.host_dir(host)
            inside = contract.HostPaths("/opt/ml" if isolation == "namespace" else str(hd))
            env = dict(os.environ)
            env.update(contract.host_environment(request=req, cluster=cluster, host=host, paths=inside,
                                                 channels=channels_of[host.label], num_cpus=n_cpus,
                                                 master_port=master_port, region=self.state.get("region", "us-east-1")))
            env["OMP_NUM_THREADS"] = env.get("OMP_NUM_THREADS") or str(n_cpus)
            if runner == "mwms":
                env["TF_CONFIG"] = contract.tf_config(cluster, host)
            if spec.get("ContainerEntrypoint"):
                cmd = list(spec["ContainerEntrypoint"]) + list(spec.get("ContainerArguments") or [])
            else:
                cmd = contract.host_command(launcher=runner, entry=entry, args=contract.to_cmd_args(user),
                                            code_dir_outside=str(hd / "code"), cluster=cluster, host=host,
                                            nproc=nproc, master_port=master_port)
            cwd_inside = inside.p("code")
            if isolation == "namespace":
                cmd = launcher.wrap_in_namespace(cmd, str(hd), cwd_inside)
            self.say(f"{host.label} ({host.address}, {host.instance_type}): {runner} runner, "
                     f"{nproc if runner in ('torchrun', 'mpi', 'smddp') else 1} process(es)")
            import subprocess

            proc = launcher.spawn(cmd, env=env, cwd=str(hd / "code"), stdout=subprocess.PIPE)
            self.procs[host.label] = proc
            t = threading.Thread(target=self.reader, args=(host, proc.stdout), daemon=True)
            t.start()
            self.readers.append(t)
        self.save(host_pids={label: p.pid for label, p in self.procs.items()})

    def end_all(self, grace: float) -> None:
        threads = [threading.Thread(target=launcher.end_tree, args=(p.pid, grace, p)) for p in self.procs.values()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def watch(self, cluster: contract.Cluster) -> tuple[str, str, str | None]:
        """Wait for the hosts. Returns (status, secondary status, failure reason)."""
        max_run = self.request.get("StoppingCondition", {}).get("MaxRuntimeInSeconds")
        started = time.time()
        last_sync = time.time()
        while True:
            if self.stop_requested or (self.dir / "stop").exists():
                self.save(status="Stopping")
                self.secondary("Stopping", "Stopping the training job")
                self.end_all(stop_grace())
                return "Stopped", "Stopped", None
            if max_run and time.time() - started > float(max_run):
                self.secondary("Stopping", f"Job exceeded MaxRuntimeInSeconds={max_run}")
                self.end_all(stop_grace())
                return "Stopped", "MaxRuntimeExceeded", None
            codes = {label: p.poll() for label, p in self.procs.items()}
            failed = [(label, c) for label, c in codes.items() if c not in (None, 0)]
            if failed:
                label, code = failed[0]
                host = next(h for h in cluster.hosts if h.label == label)
                self.end_all(min(stop_grace(), 10))
                return "Failed", "Failed", self.failure_reason(host, code)
            if all(c == 0 for c in codes.values()):
                # a host whose leader exited may leave processes behind: end them as the instance would
                for p in self.procs.values():
                    if launcher.tree(p.pid):
                        launcher.end_tree(p.pid, 5)
                return "Completed", "Completed", None
            if time.time() - last_sync > float(os.environ.get("SMDIST_LOCAL_CHECKPOINT_SYNC", "5")):
                self.sync_checkpoints(cluster)
                last_sync = time.time()
            time.sleep(0.2)

    def failure_reason(self, host: contract.Host, code: int) -> str:
        failure = self.host_dir(host) / "output" / "failure"
        for h in [host] + [x for x in self.cluster.hosts if x is not host]:
            f = self.host_dir(h) / "output" / "failure"
            if f.exists() and f.read_text().strip():
                failure = f
                break
        if failure.exists() and failure.read_text().strip():
            text = failure.read_text()
        else:
            tail = []
            path = self.dir / "logs" / f"{host.label}.jsonl"
            for t in self.readers:
                t.join(timeout=5)
            if path.exists():
                tail = [json.loads(x)["m"] for x in path.read_text().splitlines()[-200:]]
            error_lines = [x for x in tail if x.strip()][-8:]
            sig = f" (killed by signal {-code})" if code < 0 else ""
            text = (f"ExecuteUserScriptError:\nExitCode {code}{sig}\nHost {host.label} ({host.address})\n"
                    f"ErrorMessage \"{chr(10).join(error_lines)}\"")
            failure.parent.mkdir(parents=True, exist_ok=True)
            failure.write_text(text)  # as the training toolkit does when the user script fails
        return ("AlgorithmError: " + text)[:FAILURE_LIMIT]

    # -- outputs ---------------------------------------------------------------------------------
    def sync_checkpoints(self, cluster: contract.Cluster) -> None:
        rel = checkpoint_relpath(self.request)
        if not rel:
            return
        seen = self.state.setdefault("checkpoint_synced", {})
        base_uri = self.request["CheckpointConfig"]["S3Uri"].rstrip("/")
        for host in cluster.hosts:
            cdir = self.host_dir(host) / rel
            if not cdir.is_dir():
                continue
            for dirpath, _dirs, files in os.walk(cdir):
                for f in files:
                    p = Path(dirpath) / f
                    key = p.relative_to(cdir).as_posix()
                    try:
                        st = p.stat()
                    except FileNotFoundError:
                        continue
                    stamp = f"{st.st_size}:{st.st_mtime_ns}"
                    if seen.get(f"{host.label}/{key}") != stamp:
                        self.storage.upload(p, f"{base_uri}/{key}")
                        seen[f"{host.label}/{key}"] = stamp

    def pack(self, cluster: contract.Cluster, subdir: str, name: str) -> str | None:
        """Merge ``subdir`` of every host into one tar.gz at <S3OutputPath>/<job>/output/<name>."""
        out_uri = f"{self.request['OutputDataConfig']['S3OutputPath'].rstrip('/')}/{self.name}/output/{name}"
        with tempfile.TemporaryDirectory(prefix="smdist-pack-") as tmp:
            tar_path = Path(tmp) / name
            members: dict[str, str] = {}
            with tarfile.open(tar_path, "w:gz") as tar:
                for host in cluster.hosts:
                    root = self.host_dir(host) / subdir
                    for dirpath, _dirs, files in os.walk(root):
                        for f in sorted(files):
                            p = Path(dirpath) / f
                            arc = p.relative_to(root).as_posix()
                            if arc in members:
                                self.say(f"warning: {subdir}/{arc} written by both {members[arc]} and {host.label}; "
                                         f"SageMaker merges all hosts' {subdir} directories, so names must not clash")
                                continue
                            members[arc] = host.label
                            tar.add(p, arcname=arc)
            if subdir != "model" and not members:
                return None
            self.storage.upload(tar_path, out_uri)
        return out_uri

    # -- main ------------------------------------------------------------------------------------
    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.on_sigterm)
        (self.dir / "logs").mkdir(exist_ok=True)
        job_key = f"training/{self.name}"
        block = tuple(self.state["block"])
        self.cluster = cluster = contract.make_cluster(self.request["ResourceConfig"], block)
        status, secondary, reason = "Failed", "Failed", None
        try:
            self.save(status="InProgress", hosts=[{"label": h.label, "address": h.address, "group": h.group,
                                                   "instance_type": h.instance_type} for h in cluster.hosts],
                      started=time.time())
            isolation = self.state.get("isolation", "none")
            if isolation == "none":
                self.say("hosts run WITHOUT their own mount namespace (not root and no user namespaces, or "
                         "SMDIST_LOCAL_ISOLATION=none): scripts must read the SM_* variables; hard-coded "
                         "/opt/ml paths will not resolve")
            self.secondary("Downloading", "Downloading input data and source code")
            channels_of = self.stage(cluster)
            if self.stop_requested or (self.dir / "stop").exists():
                status, secondary = "Stopped", "Stopped"
            else:
                master_port = free_port(contract.MASTER_PORT)
                self.save(master_port=master_port)
                if master_port != contract.MASTER_PORT:
                    self.say(f"port {contract.MASTER_PORT} is taken on this machine (another job?): MASTER_PORT={master_port}")
                self.secondary("Training", f"Training on {len(cluster.hosts)} host(s): "
                               + ", ".join(f"{h.label}={h.address}" for h in cluster.hosts))
                self.launch(cluster, channels_of, master_port, isolation)
                status, secondary, reason = self.watch(cluster)
                for t in self.readers:
                    t.join(timeout=10)
            self.sync_checkpoints(cluster)
            if status == "Completed" or secondary == "MaxRuntimeExceeded" or (status == "Stopped" and self.procs):
                self.secondary("Uploading", "Uploading generated training model")
                model = self.pack(cluster, "model", "model.tar.gz")
                output = self.pack(cluster, "output/data", "output.tar.gz")
                self.save(model_artifacts=model, output_artifacts=output)
        except Exception as e:  # noqa: BLE001 - any platform error fails the job with its reason
            self.log.write(traceback.format_exc())
            if self.procs:
                self.end_all(5)
            status, secondary = "Failed", "Failed"
            reason = (reason or f"{type(e).__name__}: {e}")[:FAILURE_LIMIT]
        finally:
            self.store.release_block(job_key)
        self.secondary(secondary, {"Completed": "Training job completed", "Failed": "Training job failed",
                                   "Stopped": "Training job stopped",
                                   "MaxRuntimeExceeded": "Training job stopped: MaxRuntimeInSeconds exceeded"}[secondary])
        self.state["transitions"][-1]["end"] = time.time()
        self.save(status=status, failure_reason=reason, ended=time.time())
        return 0 if status == "Completed" else 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return Supervisor(Path(argv[0])).run()


if __name__ == "__main__":
    sys.exit(main())
