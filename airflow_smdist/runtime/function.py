"""The in-job runner of ``@task.smdist`` and ``@task.smdist_processing``: standard library only.

It travels inside the job's payload (``sourcedir.tar.gz`` of a training job, the ``smdist-function`` input
of a processing job) next to ``airflow_smdist/runtime/__init__.py`` and the payload files, so the image
needs neither the SageMaker SDK nor this provider, and nothing is installed at run time beyond the user's
``requirements``: the code that packed the payload and the code that runs it are the same version.

Payload (see ``airflow_smdist/decorators/payload.py``, which writes it):

* ``smdist_function.json``: format, function name, serializer, arguments (JSON), settings, client versions;
* ``smdist_function.py``: the function's source (decorator stripped), at the line numbers of its DAG file;
* ``smdist_function.pkl``: only with ``serializer="cloudpickle"`` (opt-in): the pickled function and
  arguments; its Python major.minor and cloudpickle version are checked here as well as before the job.

Every process the job's launcher starts (one per host, or torchrun / MPI ranks) calls the function:

* **training**: only global rank 0 writes the return value: ``<output data dir>/smdist-function/result.json``
  (JSON, at most ``max_result_bytes``) and then ``done.json`` (size and SHA-256 of the result). SageMaker
  merges every host's ``/opt/ml/output/data`` into ``<S3OutputPath>/<job>/output/output.tar.gz``
  (docs/contracts.md, the /opt/ml table); the task reads both files from there, and a completed job
  without ``done.json`` fails the task.
* **processing**: one call per host (over its ShardedByS3Key share of the inputs); each host writes
  ``host-<rank>.json`` into the ``smdist-results`` output, uploaded to ``<results prefix>/``.
* why a record in the log and not only a file: output data is uploaded once, at the end (the local backend
  only for a completed job), while every host's log (CloudWatch, or the local backend's streams) reaches
  the task on both backends whatever the job's status. The design and its comparison with ``@remote``:
  docs/remote-function-peers.md.
* a failing rank prints one line ``SMDIST_FUNCTION_ERROR {json}`` (rank, host, time, exception type,
  message, the traceback's tail) into its host's log, after the full traceback, writes the same record to
  ``errors/rank-<rank>.json`` and the failure file (``/opt/ml/output/failure``, training: its first 1024
  characters become FailureReason, and the toolkit leaves an existing one alone, docs/contracts.md;
  ``/opt/ml/output/message``, processing: ExitMessage), and exits 1. The task reads the records from the logs of every
  host and fails with the first one (by time), naming its exception type, with its traceback.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import json
import os
import socket
import subprocess
import sys
import time
import traceback
from typing import Any, Callable

FORMAT = "smdist-function/1"
PAYLOAD_JSON = "smdist_function.json"
PAYLOAD_SOURCE = "smdist_function.py"
PAYLOAD_PICKLE = "smdist_function.pkl"
RESULT_DIR = "smdist-function"
RESULT_FILE = "result.json"
DONE_FILE = "done.json"
ERROR_MARKER = "SMDIST_FUNCTION_ERROR "
#: the traceback tail carried in the one-line log record (the full traceback is printed just before it)
RECORD_TRACEBACK_CHARS = 3000
FAILURE_FILE_CHARS = 1024


class ResultTooLarge(ValueError):
    """The return value is larger, as JSON, than ``max_result_bytes``."""


class ResultNotJSON(TypeError):
    """The return value cannot be written as JSON (the task's XCom)."""


class RuntimeMismatch(RuntimeError):
    """The job's Python or cloudpickle is not the one that pickled the function (serializer="cloudpickle")."""


# -- where things are ---------------------------------------------------------------------------------------
def _base_dir() -> str:
    return os.environ.get("SAGEMAKER_BASE_DIR", "/opt/ml")


def _identity() -> dict[str, Any]:
    """rank, world size, local rank, host and host rank of this process (torchrun / MPI / one per host)."""
    from airflow_smdist.runtime import cluster

    c = cluster()
    return {"rank": c.rank, "world_size": c.world_size, "local_rank": c.local_rank, "host": c.current_host,
            "host_rank": c.host_rank, "num_hosts": c.num_hosts}


def _write_atomic(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


# -- loading the function -----------------------------------------------------------------------------------
def load_payload(payload_dir: str) -> dict[str, Any]:
    with open(os.path.join(payload_dir, PAYLOAD_JSON)) as f:
        payload: dict[str, Any] = json.load(f)
    if payload.get("format") != FORMAT:
        raise RuntimeMismatch(f"payload format {payload.get('format')!r} is not {FORMAT!r}: the payload was "
                              "written by another version of airflow-smdist than the runner shipped with it")
    return payload


def check_pickle_runtime(payload: dict[str, Any]) -> None:
    """serializer="cloudpickle": this Python's major.minor and cloudpickle's version must be the client's."""
    client = payload.get("client") or {}
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if client.get("python") != here:
        raise RuntimeMismatch(f"the function was pickled by Python {client.get('python')} but the job runs Python "
                              f"{here}; give py_version/image_uri of an image with Python {client.get('python')}, "
                              "or use the default serializer='json'")
    try:
        import cloudpickle
    except ImportError:
        raise RuntimeMismatch(f"cloudpickle is not installed in the job (the client has "
                              f"{client.get('cloudpickle')}); it belongs in requirements") from None
    if cloudpickle.__version__ != client.get("cloudpickle"):
        raise RuntimeMismatch(f"the job has cloudpickle {cloudpickle.__version__}, the client pickled with "
                              f"{client.get('cloudpickle')}")


def load_function(payload_dir: str,
                  payload: dict[str, Any]) -> tuple[Callable[..., Any], list[Any], dict[str, Any]]:
    """(function, args, kwargs) from the payload."""
    if payload.get("serializer") == "cloudpickle":
        check_pickle_runtime(payload)
        import cloudpickle

        with open(os.path.join(payload_dir, PAYLOAD_PICKLE), "rb") as f:
            function, args, kwargs = cloudpickle.load(f)
        return function, list(args), dict(kwargs)
    path = os.path.join(payload_dir, PAYLOAD_SOURCE)
    spec = importlib.util.spec_from_file_location("smdist_function", path)
    if spec is None or spec.loader is None:  # a .py path always has a spec with a loader
        raise ImportError(f"cannot load {path} as a module")
    module = importlib.util.module_from_spec(spec)
    sys.modules["smdist_function"] = module
    spec.loader.exec_module(module)
    return getattr(module, payload["function"]), list(payload.get("args") or []), dict(payload.get("kwargs") or {})


def hyperparameters() -> dict[str, Any]:
    try:
        hps: dict[str, Any] = json.loads(os.environ.get("SM_HPS") or "{}")
        return hps
    except ValueError:
        return {}


def bind(function: Callable[..., Any], args: list[Any], kwargs: dict[str, Any],
         hps: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """The call's arguments; a parameter the call leaves to its default takes the hyperparameter of the same
    name (``lr_scaling``'s learning rate, ``secret_hyperparameters``) when the job has one."""
    try:
        sig = inspect.signature(function)
    except (TypeError, ValueError):
        return args, kwargs
    bound = sig.bind_partial(*args, **kwargs)
    extra = {}
    for name, param in sig.parameters.items():
        if name in bound.arguments or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            continue
        if name in hps:
            extra[name] = hps[name]
    return args, {**kwargs, **extra}


# -- results and errors -------------------------------------------------------------------------------------
def encode_result(value: Any, limit: int, what: str) -> bytes:
    try:
        data = json.dumps(value, allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise ResultNotJSON(f"the return value of {what} is not JSON ({exc}): return numbers, strings, lists and "
                            "dicts (the task's XCom); write large or binary data to S3 and return its URI") from None
    if len(data) > limit:
        raise ResultTooLarge(f"the return value of {what} is {len(data)} bytes as JSON, above max_result_bytes="
                             f"{limit}: write large data to S3 (or the model / output data directory) and return "
                             "its URI, or raise max_result_bytes")
    return data


def write_training_result(data: bytes, ident: dict[str, Any]) -> str:
    out = os.path.join(os.environ.get("SM_OUTPUT_DATA_DIR") or os.path.join(_base_dir(), "output", "data"),
                       RESULT_DIR)
    _write_atomic(os.path.join(out, RESULT_FILE), data)
    done = {"rank": ident["rank"], "host": ident["host"], "world_size": ident["world_size"], "time": time.time(),
            "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    _write_atomic(os.path.join(out, DONE_FILE), json.dumps(done).encode())
    return out


def write_processing_result(data: bytes, ident: dict[str, Any], results_dir: str) -> str:
    record = json.dumps({"host": ident["host"], "host_rank": ident["host_rank"], "num_hosts": ident["num_hosts"],
                         "sha256": hashlib.sha256(data).hexdigest(), "time": time.time()}).encode()
    name = f"host-{ident['host_rank']:05d}"
    _write_atomic(os.path.join(results_dir, name + ".json"), data)
    _write_atomic(os.path.join(results_dir, name + ".done.json"), record)
    return results_dir


def error_record(exc: BaseException, ident: dict[str, Any], what: str) -> dict[str, Any]:
    frames = exc.__traceback__
    if frames is not None and frames.tb_frame.f_code is run.__code__ and frames.tb_next is not None:
        frames = frames.tb_next  # the runner's own frame is noise: start at the function's
    tb = "".join(traceback.format_exception(type(exc), exc, frames))
    kind = type(exc)
    own = kind.__module__ in ("builtins", "__main__", "smdist_function", __name__)  # the runner's own errors too
    name = kind.__qualname__ if own else f"{kind.__module__}.{kind.__qualname__}"
    return {"rank": ident.get("rank"), "local_rank": ident.get("local_rank"), "host": ident.get("host"),
            "host_rank": ident.get("host_rank"), "world_size": ident.get("world_size"), "time": time.time(),
            "function": what, "type": name, "message": str(exc)[:2000], "traceback": tb}


def report_error(record: dict[str, Any], kind: str, errors_dir: str | None) -> None:
    """Into this host's log (one line, one write), the error records directory, and the failure file."""
    line = dict(record)
    tb = line["traceback"]
    line["traceback"] = tb if len(tb) <= RECORD_TRACEBACK_CHARS else "...\n" + tb[-RECORD_TRACEBACK_CHARS:]
    sys.stdout.flush()
    sys.stderr.flush()
    os.write(2, (ERROR_MARKER + json.dumps(line) + "\n").encode())
    if errors_dir:
        try:
            _write_atomic(os.path.join(errors_dir, f"rank-{record['rank']}.json"), json.dumps(record).encode())
        except OSError:
            pass
    summary = (f"{record['type']}: {record['message']} (rank {record['rank']} on {record['host']}, "
               f"in {record['function']})\n{tb[-(FAILURE_FILE_CHARS // 2):]}")[:FAILURE_FILE_CHARS]
    base = _base_dir()
    target = os.environ.get("SM_OUTPUT_FAILURE") or os.path.join(base, "output", "failure")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    if kind == "processing":  # ExitMessage: SageMaker concatenates every host's message file
        target, flags = os.path.join(base, "output", "message"), os.O_WRONLY | os.O_CREAT | os.O_APPEND
    try:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        fd = os.open(target, flags, 0o644)  # training: the first failure of the host stays (as the toolkit does)
        with os.fdopen(fd, "w") as f:
            f.write(summary if kind != "processing" else summary[:300] + "\n")
    except OSError:
        pass


def install_requirements(payload_dir: str) -> None:
    """Processing only (training containers install ``requirements.txt`` themselves, as SageMaker's
    toolkit does): ``pip install -r requirements.txt``, as the SDK's FrameworkProcessor runs it, but into a
    directory of this job put first on ``sys.path``, so the image's own environment is left as it is."""
    req = os.path.join(payload_dir, "requirements.txt")
    if not os.path.exists(req):
        return
    target = os.path.join(os.environ.get("TMPDIR") or "/tmp", f"smdist-packages-{os.getpid()}")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    "--target", target, "-r", req], check=True)
    sys.path.insert(0, target)


# -- main ---------------------------------------------------------------------------------------------------
def _arg(argv: list[str], name: str) -> str | None:
    for i, token in enumerate(argv):
        if token == name and i + 1 < len(argv):
            return argv[i + 1]
        if token.startswith(name + "="):
            return token[len(name) + 1:]
    return None


def _relocate(path: str) -> str:
    """A container path (/opt/ml/...) where this host has it (SAGEMAKER_BASE_DIR without a namespace)."""
    base = _base_dir()
    if base != "/opt/ml" and (path == "/opt/ml" or path.startswith("/opt/ml/")):
        return base + path[len("/opt/ml"):]
    return path


def run(payload_dir: str, kind: str, results_dir: str | None) -> int:
    ident: dict[str, Any] = {"rank": None, "host": socket.gethostname()}
    what = "the function"
    errors_dir = None
    try:
        ident = _identity()
        payload = load_payload(payload_dir)
        what = payload["function"] + "()"
        if kind == "training":
            data_dir = os.environ.get("SM_OUTPUT_DATA_DIR") or os.path.join(_base_dir(), "output", "data")
            errors_dir = os.path.join(data_dir, RESULT_DIR, "errors")
        else:
            if results_dir is None:  # a TypeError from os.path.join before, which named neither
                raise ValueError("--smdist-results DIR is required with --smdist-kind processing")
            errors_dir = os.path.join(results_dir, "errors")
            install_requirements(payload_dir)
        function, args, kwargs = load_function(payload_dir, payload)
        args, kwargs = bind(function, args, kwargs, hyperparameters())
        print(f"smdist: calling {what} on {ident['host']} (rank {ident['rank']} of {ident['world_size']})",
              flush=True)
        value = function(*args, **kwargs)
        limit = int(payload.get("max_result_bytes") or 1048576)
        if kind == "processing":
            assert results_dir is not None  # checked above, before the function ran
            where = write_processing_result(encode_result(value, limit, what), ident, results_dir)
            print(f"smdist: {what} returned on {ident['host']}; result written to {where}", flush=True)
        elif ident["rank"] == 0:
            where = write_training_result(encode_result(value, limit, what), ident)
            print(f"smdist: global rank 0 wrote the return value of {what} to {where}", flush=True)
        else:
            print(f"smdist: rank {ident['rank']} returned; only global rank 0's return value becomes the task's "
                  "result", flush=True)
        return 0
    except SystemExit as exc:
        if exc.code in (None, 0):
            raise
        record = error_record(exc, ident, what)
    except BaseException as exc:  # noqa: BLE001 - every failure is recorded, KeyboardInterrupt included
        record = error_record(exc, ident, what)
    sys.stderr.write(record["traceback"])
    report_error(record, kind, errors_dir)
    return 1


def main(argv: list[str] | None = None, payload_dir: str | None = None) -> int:
    """``smdist_entry.py [--smdist-kind processing --smdist-payload DIR --smdist-results DIR] [ignored...]``:
    training passes its hyperparameters as arguments too (the toolkit does), which are ignored here."""
    argv = list(sys.argv[1:] if argv is None else argv)
    payload_dir = _arg(argv, "--smdist-payload") or payload_dir or os.path.dirname(os.path.abspath(sys.argv[0]))
    kind = _arg(argv, "--smdist-kind") or "training"
    results_dir = _arg(argv, "--smdist-results")
    return run(_relocate(payload_dir), kind, _relocate(results_dir) if results_dir else None)


# -- a helper for the function: gather JSON values on global rank 0 ----------------------------------------
def gather(value: Any, *, port: int | None = None, timeout: float = 600.0) -> list[Any] | None:
    """Send ``value`` (JSON) from every rank to global rank 0. Returns the list of every rank's value, in rank
    order, on rank 0, and None elsewhere. Plain TCP on the master's address (the first host), so it needs
    no framework; ``port`` defaults to ``SMDIST_GATHER_PORT`` or 29400."""
    from airflow_smdist.runtime import cluster

    c = cluster()
    port = int(port or os.environ.get("SMDIST_GATHER_PORT") or 29400)
    if c.world_size == 1:
        return [value]
    deadline = time.time() + timeout
    message = json.dumps({"rank": c.rank, "value": value}).encode() + b"\n"
    if c.rank != 0:
        while True:  # the master may not listen yet
            try:
                with socket.create_connection((c.master_addr, port), timeout=10) as s:
                    s.sendall(message)
                    s.shutdown(socket.SHUT_WR)
                    s.recv(1)  # wait for the master's acknowledgement
                return None
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.2)
    values = {0: value}
    with socket.create_server((c.master_addr, port)) as server:
        while len(values) < c.world_size:
            server.settimeout(max(0.1, deadline - time.time()))
            try:
                conn, _ = server.accept()
            except OSError:  # socket.timeout (an OSError on every Python the images have)
                raise TimeoutError(f"gather: {c.world_size - len(values)} of {c.world_size} ranks did not send "
                                   f"within {timeout} s") from None
            with conn:
                data = b""
                while not data.endswith(b"\n"):
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                item = json.loads(data)
                values[int(item["rank"])] = item["value"]
                conn.sendall(b"k")
    return [values[r] for r in range(c.world_size)]


if __name__ == "__main__":
    raise SystemExit(main())
