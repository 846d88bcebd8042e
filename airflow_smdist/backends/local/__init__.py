"""The ``local`` backend: runs SageMaker job requests on this machine, for real, without Docker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from airflow_smdist.backends.base import TERMINAL_STATES, BackendError, JobNotFound, LogEvent
from airflow_smdist.backends.local import launcher
from airflow_smdist.backends.local.store import JobStore, pid_alive, read_json, write_json_atomic
from airflow_smdist.specs.errors import SpecError
from airflow_smdist.specs.validate import validate_request

ACCOUNT = "000000000000"


def _dt(epoch: float | None) -> datetime | None:
    return datetime.fromtimestamp(epoch, tz=timezone.utc) if epoch else None


def check_runs_locally(request: dict) -> None:
    """What the local backend cannot run, refused before anything is written, with the way out."""
    spec = request["AlgorithmSpecification"]
    hps = request.get("HyperParameters", {})
    if spec.get("AlgorithmName"):
        raise SpecError("AlgorithmSpecification.AlgorithmName", "marketplace/registered algorithms need SageMaker.",
                        "use backend='sagemaker'.")
    if "sagemaker_program" not in hps and not spec.get("ContainerEntrypoint"):
        raise SpecError("AlgorithmSpecification.TrainingImage",
                        f"{spec.get('TrainingImage')!r} runs its own container code, which needs Docker or SageMaker.",
                        "run it with backend='sagemaker', or give entry_point=... (script mode) or "
                        "ContainerEntrypoint so the local backend runs your code.")
    modes = [spec.get("TrainingInputMode", "File")] + [c.get("InputMode") for c in request.get("InputDataConfig", [])]
    if "Pipe" in modes:
        raise SpecError("TrainingInputMode", "Pipe mode is not emulated by the local backend.",
                        "use File or FastFile locally (both stage the channel as files).")
    for key, what in (("sagemaker_parameter_server_enabled", "parameter_server"),
                      ("sagemaker_pytorch_xla_multi_worker_enabled", "pytorchxla")):
        if json.loads(hps.get(key, "false") or "false") is True:
            raise SpecError(f"distribution.{what}", f"the {what} launcher is not run by the local backend.",
                            "use torch_distributed, pytorchddp or mpi locally, or backend='sagemaker'.")
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


class LocalBackend:
    name = "local"

    def __init__(self, root: str | os.PathLike | None = None, *, region_name: str | None = None,
                 s3_endpoint_url: str | None = None) -> None:
        self.store = JobStore(root)
        self.region = region_name or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        self.s3_endpoint_url = s3_endpoint_url

    # -- protocol --------------------------------------------------------------------------------
    def submit(self, kind: str, request: dict[str, Any]) -> str:
        if kind != "training":
            raise BackendError(f"the local backend does not run {kind} jobs yet", code="NotImplemented")
        validate_request("CreateTrainingJob", request, allow_local_uris=True)
        check_runs_locally(request)
        name = request["TrainingJobName"]
        isolation = launcher.isolation_mode()
        try:
            job_dir = self.store.create(kind, name)
        except FileExistsError:
            raise BackendError(f"Job name must be unique within an AWS account and region, and a job with this name "
                               f"already exists ({self.arn(kind, name)})", code="ValidationException",
                               operation="CreateTrainingJob") from None
        (job_dir / "logs").mkdir()
        write_json_atomic(job_dir / "request.json", request)
        block = self.store.allocate_block(f"{kind}/{name}")
        now = time.time()
        write_json_atomic(job_dir / "state.json", {
            "status": "InProgress", "secondary_status": "Starting", "created": now, "block": list(block),
            "transitions": [{"status": "Starting", "start": now, "message": "Preparing the instances for training"}],
            "region": self.region, "s3_endpoint_url": self.s3_endpoint_url, "isolation": isolation,
        })
        with open(job_dir / "supervisor.log", "a") as log:
            proc = subprocess.Popen([sys.executable, "-m", "airflow_smdist.backends.local.training", str(job_dir)],
                                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, env=self._supervisor_env())
        (job_dir / "supervisor.pid").write_text(str(proc.pid))
        return name

    def describe(self, kind: str, name: str) -> dict[str, Any]:
        if kind != "training":
            raise JobNotFound(kind, name)
        request = self.store.request(kind, name)
        state = self._live_state(kind, name)
        return self._describe_training(request, state)

    def stop(self, kind: str, name: str) -> None:
        state = self._live_state(kind, name)
        if state["status"] in TERMINAL_STATES:
            return
        job_dir = self.store.job_dir(kind, name)
        (job_dir / "stop").touch()
        pid = self._supervisor_pid(job_dir)
        if pid_alive(pid):
            os.kill(pid, signal.SIGTERM)

    def log_events(self, kind: str, name: str, cursor: Any = None) -> tuple[list[LogEvent], Any]:
        job_dir = self.store.job_dir(kind, name)
        if not (job_dir / "state.json").exists():
            raise JobNotFound(kind, name)
        cursor = dict(cursor or {})
        events: list[LogEvent] = []
        logs = job_dir / "logs"
        for path in sorted(logs.glob("*.jsonl")) if logs.is_dir() else []:
            host = path.stem
            offset = int(cursor.get(host, 0))
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read()
            complete = data[: data.rfind(b"\n") + 1]  # a line still being written waits for the next call
            for raw in complete.splitlines():
                rec = json.loads(raw)
                events.append(LogEvent(rec["t"], host, rec["m"]))
            cursor[host] = offset + len(complete)
        events.sort(key=lambda e: (e.timestamp, e.host))
        return events, cursor

    # -- helpers ---------------------------------------------------------------------------------
    def arn(self, kind: str, name: str) -> str:
        res = {"training": "training-job", "processing": "processing-job", "transform": "transform-job",
               "tuning": "hyper-parameter-tuning-job"}[kind]
        return f"arn:aws:sagemaker:{self.region}:{ACCOUNT}:{res}/{name.lower()}"

    def job_dir(self, kind: str, name: str) -> Path:
        return self.store.job_dir(kind, name)

    def _supervisor_env(self) -> dict[str, str]:
        env = dict(os.environ)
        # the supervisor must import this very package, wherever it was imported from
        pkg_root = str(Path(__file__).resolve().parents[3])
        env["PYTHONPATH"] = pkg_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        return env

    @staticmethod
    def _supervisor_pid(job_dir: Path) -> int | None:
        try:
            return int((job_dir / "supervisor.pid").read_text())
        except (FileNotFoundError, ValueError):
            return None

    def _live_state(self, kind: str, name: str) -> dict:
        """The state file, corrected when the supervisor died without finishing it."""
        job_dir = self.store.job_dir(kind, name)
        state = self.store.state(kind, name)
        if state["status"] in TERMINAL_STATES:
            return state
        pid = self._supervisor_pid(job_dir)
        if pid is not None and not pid_alive(pid):
            state = read_json(job_dir / "state.json")  # it may have finished just now
            if state["status"] not in TERMINAL_STATES:
                for label, hpid in (state.get("host_pids") or {}).items():
                    launcher.end_tree(hpid, 2)
                state.update(status="Failed", secondary_status="Failed", ended=time.time(),
                             failure_reason="InternalServerError: the local job supervisor exited unexpectedly "
                                            f"(see {job_dir / 'supervisor.log'})")
                write_json_atomic(job_dir / "state.json", state)
                self.store.release_block(f"{kind}/{name}")
        elif (job_dir / "stop").exists() and state["status"] == "InProgress":
            state = dict(state, status="Stopping")
        return state

    def _describe_training(self, request: dict, state: dict) -> dict[str, Any]:
        name = request["TrainingJobName"]
        d: dict[str, Any] = {
            "TrainingJobName": name,
            "TrainingJobArn": self.arn("training", name),
            "TrainingJobStatus": state["status"],
            "SecondaryStatus": state.get("secondary_status", "Starting"),
            "AlgorithmSpecification": request["AlgorithmSpecification"],
            "RoleArn": request.get("RoleArn"),
            "HyperParameters": request.get("HyperParameters", {}),
            "InputDataConfig": request.get("InputDataConfig", []),
            "OutputDataConfig": request["OutputDataConfig"],
            "ResourceConfig": request["ResourceConfig"],
            "StoppingCondition": request.get("StoppingCondition", {}),
            "CreationTime": _dt(state.get("created")),
            "LastModifiedTime": _dt(max([t.get("end") or t["start"] for t in state.get("transitions", [])] or [state["created"]])),
            "SecondaryStatusTransitions": [
                {k: v for k, v in {"Status": t["status"], "StartTime": _dt(t["start"]), "EndTime": _dt(t.get("end")),
                                   "StatusMessage": t.get("message")}.items() if v is not None}
                for t in state.get("transitions", [])],
            "EnableNetworkIsolation": bool(request.get("EnableNetworkIsolation", False)),
            "EnableInterContainerTrafficEncryption": bool(request.get("EnableInterContainerTrafficEncryption", False)),
            "EnableManagedSpotTraining": bool(request.get("EnableManagedSpotTraining", False)),
        }
        if state.get("started"):
            d["TrainingStartTime"] = _dt(state["started"])
        if state.get("ended"):
            d["TrainingEndTime"] = _dt(state["ended"])
            if state.get("started"):
                seconds = int(state["ended"] - state["started"])
                d["TrainingTimeInSeconds"] = seconds
                hosts = len(state.get("hosts") or []) or 1
                d["BillableTimeInSeconds"] = seconds * hosts
        if state.get("failure_reason"):
            d["FailureReason"] = state["failure_reason"]
        if state.get("model_artifacts"):
            d["ModelArtifacts"] = {"S3ModelArtifacts": state["model_artifacts"]}
        if state.get("final_metrics"):
            d["FinalMetricDataList"] = [{"MetricName": k, "Value": v[0], "Timestamp": _dt(v[1])}
                                        for k, v in sorted(state["final_metrics"].items())]
        for key in ("CheckpointConfig", "VpcConfig", "Environment", "RetryStrategy", "Tags"):
            if request.get(key):
                d[key] = request[key]
        return d
