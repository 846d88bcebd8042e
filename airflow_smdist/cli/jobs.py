"""``smdist jobs ...``: list, describe, follow, stop and prune the local backend's jobs (the console of local jobs).

Each function takes the parsed arguments (``argparse.Namespace``), as Airflow's CLI calls its commands; the same
functions serve ``airflow smdist jobs ...`` (Airflow >= 3.2) and the ``smdist`` console script (see
:mod:`airflow_smdist.cli.definition`). Jobs are found under the job root of the ``smdist`` connection
(``--conn-id``, ``local_root`` extra), else ``SMDIST_LOCAL_ROOT``, else ``$AIRFLOW_HOME/smdist``; ``--root``
overrides it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from datetime import datetime, timezone
from collections.abc import Iterator
from typing import Any, Callable

from airflow_smdist.backends.base import JOB_KINDS, JOB_NAME, JOB_NAME_RULE, TERMINAL_STATES

#: request/description keys whose values are name -> value maps, masked by name
MASKED_MAPS = frozenset({"HyperParameters", "StaticHyperParameters", "Environment"})
#: those of them that hold hyperparameters (``secret_hyperparameters`` names these maps' entries)
HYPERPARAMETER_MAPS = frozenset({"HyperParameters", "StaticHyperParameters"})
MASK = "***"
#: a masked value this short is not looked for in log lines
MIN_SECRET_LENGTH = 4
#: how often ``logs --follow`` looks for new lines when none came
FOLLOW_POLL_SECONDS = 0.5


class CommandError(SystemExit):
    """A user's mistake (no such job, an ambiguous name): its message, exit status 1, no traceback."""

    def __init__(self, message: str) -> None:
        super().__init__(f"Error: {message}")


def get_backend(args: argparse.Namespace) -> Any:
    """The local backend of the ``smdist`` connection (``--conn-id``), or of ``--root``."""
    from airflow_smdist.backends.local import LocalBackend

    if getattr(args, "root", None):
        return LocalBackend(args.root)
    with _stdout_to_stderr():
        from airflow_smdist.hooks.smdist import SmdistHook

        return SmdistHook(getattr(args, "conn_id", None) or SmdistHook.default_conn_name).get_backend("local")


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Airflow 2 logs its connection lookup ("Retrieving connection ...") to stdout, through a handler that
    holds the stream it was configured with; stdout is the command's output (``-o json`` is read by programs),
    so whatever is written to file descriptor 1 meanwhile goes to stderr."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def find_job(backend: Any, name: str, kind: str | None = None) -> str:
    """The kind of the job ``name`` (``kind`` when given): CommandError when ``name`` is not a job name, or when
    none or several jobs have it."""
    if not JOB_NAME.match(name):
        raise CommandError(f"{name!r} is not a job name: {JOB_NAME_RULE}. Fix: give the name as `jobs list` shows it")
    kinds = [kind] if kind else sorted(JOB_KINDS)
    found = [k for k in kinds if backend.store.exists(k, name)]
    if not found:
        raise CommandError(f"no local {kind or ''} job named {name!r} under {backend.store.root}".replace("  ", " "))
    if len(found) > 1:
        raise CommandError(f"{name!r} names a job of each kind {found}: give --kind")
    return found[0]


def _iso(epoch: float | None) -> str | None:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).isoformat(timespec="seconds") if epoch else None


def _duration(seconds: float) -> str:
    seconds = int(max(0.0, seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}"


def job_row(backend: Any, kind: str, name: str) -> dict[str, Any]:
    """One line of ``jobs list``."""
    from airflow_smdist.backends.local.retention import owner_of

    state = backend._live_state(kind, name)  # corrected when its supervisor died without finishing it
    try:
        owner = owner_of(backend.list_tags(kind, name))
    except ValueError:
        owner = None
    started = state.get("started") or state.get("created")
    end = state.get("ended") or (time.time() if state["status"] not in TERMINAL_STATES else None)
    return {"kind": kind, "name": name, "status": state["status"],
            "secondary_status": state.get("secondary_status"), "started": _iso(started),
            "duration": int(max(0.0, end - started)) if started and end else None,
            "dag_id": owner.dag_id if owner else None, "task_id": owner.task_id if owner else None,
            "run_id": owner.run_id if owner else None,
            "try_number": int(owner.try_number) if owner and str(owner.try_number).isdigit() else None}


def list_rows(backend: Any, kind: str | None, status: str | None, name_contains: str | None) -> list[dict[str, Any]]:
    rows = []
    for k in [kind] if kind else sorted(JOB_KINDS):
        for name in backend.store.list(k):
            if name_contains and name_contains not in name:
                continue
            row = job_row(backend, k, name)
            if status is None or row["status"] == status:
                rows.append(row)
    return sorted(rows, key=lambda r: r["started"] or "", reverse=True)


def print_rows(rows: list[dict[str, Any]], output: str) -> None:
    """As Airflow's own commands print (``AirflowConsole``: table, json, yaml, plain). In json and yaml, numbers
    are numbers (``duration`` in seconds, ``try_number``); a table shows the duration as H:MM:SS."""
    if output == "json":  # (AirflowConsole turns every value into a string)
        print(json.dumps(rows, indent=2, default=str))
        return
    if output == "yaml":
        import yaml

        print(yaml.safe_dump(rows, sort_keys=False, default_flow_style=False), end="")
        return
    from airflow.cli.simple_table import AirflowConsole

    rows = [{**r, "duration": _duration(r["duration"])} if isinstance(r.get("duration"), (int, float)) else r
            for r in rows]
    AirflowConsole().print_as(data=rows, output=output)


def jobs_list(args: argparse.Namespace) -> None:
    backend = get_backend(args)
    print_rows(list_rows(backend, args.kind, args.status, args.name_contains), args.output)


def masked(value: Any, sensitive: Callable[[str], bool] | None = None,
           declared: Callable[[str], bool] | None = None) -> Any:
    """``value`` with the secret-looking entries of its hyperparameter and environment maps replaced by ***, and
    the hyperparameters its task declared secret (``declared``; else read from ``value``'s own Tags, when it is
    a Create* request: :func:`airflow_smdist.wire.declared_secret`), whatever their names."""
    if sensitive is None:
        from airflow_smdist._compat import sensitive_name

        sensitive = sensitive_name
    if declared is None:
        from airflow_smdist.wire import declared_secret

        declared = declared_secret(value) if isinstance(value, dict) else (lambda name: False)
    if isinstance(value, list):
        return [masked(v, sensitive, declared) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, item in value.items():
        if key in MASKED_MAPS and isinstance(item, dict):
            hidden = declared if key in HYPERPARAMETER_MAPS else (lambda name: False)
            out[key] = {n: MASK if sensitive(str(n)) or hidden(str(n)) else v for n, v in item.items()}
        else:
            out[key] = masked(item, sensitive, declared)
    return out


def secret_values(request: dict[str, Any]) -> list[str]:
    """The values :func:`masked` hides in ``request`` (a job's Create* request), longest first, as they appear
    in the request and as the job's script sees them, to be masked in log lines too."""
    found: set[str] = set()

    def walk(raw: Any, shown: Any) -> None:
        if isinstance(raw, dict) and isinstance(shown, dict):
            for key, value in raw.items():
                if shown.get(key) == MASK and isinstance(value, str) and value != MASK:
                    found.add(value)
                    found.add(_unquoted(value))  # hyperparameters are JSON-encoded: a script sees the string
                else:
                    walk(value, shown.get(key))
        elif isinstance(raw, list) and isinstance(shown, list):
            for r, s in zip(raw, shown):
                walk(r, s)

    walk(request, masked(request))
    return sorted((v for v in found if len(v) >= MIN_SECRET_LENGTH), key=len, reverse=True)


def _unquoted(value: str) -> str:
    try:
        decoded = json.loads(value)
    except ValueError:
        return value
    return decoded if isinstance(decoded, str) else value


def redact(message: str, secrets: list[str]) -> str:
    """``message`` with each of ``secrets`` (:func:`secret_values`) replaced by ***."""
    for secret in secrets:
        if secret in message:
            message = message.replace(secret, MASK)
    return message


def jobs_describe(args: argparse.Namespace) -> None:
    backend = get_backend(args)
    kind = find_job(backend, args.name, args.kind)
    declared = _declared(backend, kind, args.name)
    print(json.dumps(masked(backend.describe(kind, args.name), declared=declared), indent=2, default=str))


def _declared(backend: Any, kind: str, name: str) -> Callable[[str], bool]:
    """The hyperparameters the job's task declared secret (its request's tag)."""
    from airflow_smdist.wire import declared_secret

    return declared_secret(backend.store.request(kind, name))


def _status(backend: Any, kind: str, name: str) -> str:
    return str(backend._live_state(kind, name)["status"])


def _on_host(event_host: str, host: str | None) -> bool:
    return host is None or event_host == host or event_host.endswith("/" + host)


def jobs_logs(args: argparse.Namespace) -> None:
    """Every log line of the job (``--host``: of that host only; ``--since``: newer than that; ``--tail N``: the
    last N written so far); with ``--follow``, then the new ones as they come until the job ends. Each line once,
    in time order per read, as ``[host] line`` (``--timestamps``: after its time)."""
    backend = get_backend(args)
    kind = find_job(backend, args.name, args.kind)
    since = _since(getattr(args, "since", None))
    tail = getattr(args, "tail", None)
    if tail is not None and tail < 0:
        raise CommandError(f"--tail: {tail} is not a number of lines: give 0 or more")
    secrets = secret_values(backend.store.request(kind, args.name))
    cursor: Any = None
    first = True
    while True:
        done = not args.follow or _status(backend, kind, args.name) in TERMINAL_STATES  # before the read: nothing
        events, cursor = backend.log_events(kind, args.name, cursor)                 # written before it is missed
        shown = [e for e in events if _on_host(e.host, args.host) and e.timestamp >= since]
        if first and tail is not None:
            shown = shown[len(shown) - tail:] if tail else []
        first = False
        for event in shown:
            stamp = _iso_ms(event.timestamp) + " " if getattr(args, "timestamps", False) else ""
            sys.stdout.write(f"{stamp}[{event.host}] {redact(event.message, secrets)}\n")
        sys.stdout.flush()
        if done:
            return
        if not events:
            time.sleep(FOLLOW_POLL_SECONDS)


def _since(text: str | None) -> float:
    """The epoch ``--since`` names (0: every line)."""
    if not text:
        return 0.0
    from airflow_smdist.backends.local.retention import parse_duration

    try:
        return time.time() - parse_duration(text)
    except ValueError as exc:
        raise CommandError(f"--since: {exc}") from None


def _iso_ms(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def jobs_stop(args: argparse.Namespace) -> None:
    """Stop a running job and wait (``--timeout`` seconds) until it has ended."""
    backend = get_backend(args)
    kind = find_job(backend, args.name, args.kind)
    backend.stop(kind, args.name)
    deadline = time.monotonic() + args.timeout
    status = _status(backend, kind, args.name)
    while status not in TERMINAL_STATES and time.monotonic() < deadline:
        backend.wait_for_change(kind, args.name, min(1.0, max(0.0, deadline - time.monotonic())))
        status = _status(backend, kind, args.name)
    print(f"{kind} job {args.name}: {status}")
    if status not in TERMINAL_STATES:
        raise CommandError(f"{kind} job {args.name} is still {status} after {args.timeout} s")


def jobs_prune(args: argparse.Namespace) -> None:
    """Remove finished jobs older than ``--older-than``, never one still running or still owned by a running
    task instance (see :mod:`airflow_smdist.backends.local.retention`)."""
    from airflow_smdist.backends.local.retention import parse_duration, prune

    try:
        older_than = parse_duration(args.older_than)
    except ValueError as exc:
        raise CommandError(f"--older-than: {exc}") from None
    backend = get_backend(args)
    verdicts = prune(backend, older_than, dry_run=args.dry_run)
    done = "would remove" if args.dry_run else "removed"
    rows = [{"kind": v.kind, "name": v.name, "action": done if v.delete else "kept",
             "reason": v.reason.removeprefix("kept: ")} for v in verdicts]
    print_rows(rows, args.output)
