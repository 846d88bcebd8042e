"""The ``smdist`` command group, as Airflow's CLI defines commands (``Arg``, ``ActionCommand``, ``GroupCommand``).

Airflow >= 3.2 calls :func:`get_smdist_cli_commands` (the provider info's ``cli`` key) and serves the group as
``airflow smdist ...``; on older lines (2.10, 2.11, 3.0, 3.1, which take commands only from executors and auth
managers) :func:`main` serves the same group as the ``smdist`` console script. Cheap to import: the commands'
module (:mod:`airflow_smdist.cli.jobs`) is loaded only when a command runs.
"""

from __future__ import annotations

import argparse
from typing import Any

from airflow.cli.cli_config import ActionCommand, Arg, GroupCommand, lazy_load_command

from airflow_smdist.kinds import JOB_KINDS

_JOBS = "airflow_smdist.cli.jobs."


def _arg(*flags: str, **kwargs: Any) -> Any:
    """Airflow's ``Arg`` (untyped there)."""
    return Arg(flags, **kwargs)  # type: ignore[no-untyped-call]


STATUSES = ("InProgress", "Stopping", "Completed", "Failed", "Stopped")

ARG_CONN_ID = _arg("--conn-id", help="The smdist connection whose job root to use (its local_root extra); "
                  "default: smdist_default, else SMDIST_LOCAL_ROOT, else $AIRFLOW_HOME/smdist", default=None)
ARG_ROOT = _arg("--root", help="The local job root (overrides the connection)", default=None)
ARG_KIND = _arg("--kind", help="Job kind", choices=tuple(sorted(JOB_KINDS)), default=None)
ARG_NAME = _arg("name", help="The job's name")
ARG_OUTPUT = _arg("-o", "--output", help="Output format. Allowed values: json, yaml, plain, table (default: table)",
                 metavar="(table, json, yaml, plain)", choices=("table", "json", "yaml", "plain"), default="table")
COMMON = (ARG_CONN_ID, ARG_ROOT)

JOBS_COMMANDS = (
    ActionCommand(
        name="list", help="List local jobs: kind, name, status, start, duration and the task instance owning each",
        func=lazy_load_command(_JOBS + "jobs_list"),
        args=(ARG_KIND, _arg("--status", help="Only jobs with this status", choices=STATUSES, default=None),
              _arg("--name-contains", help="Only jobs whose name contains this", default=None),
              ARG_OUTPUT, *COMMON),
    ),
    ActionCommand(
        name="describe", help="A local job's Describe* response as JSON (secret-looking values masked)",
        func=lazy_load_command(_JOBS + "jobs_describe"), args=(ARG_NAME, ARG_KIND, *COMMON),
    ),
    ActionCommand(
        name="logs", help="A local job's log lines; --follow: and the new ones until the job ends",
        func=lazy_load_command(_JOBS + "jobs_logs"),
        args=(ARG_NAME, ARG_KIND, _arg("-f", "--follow", help="Follow the log until the job ends",
                                      action="store_true"),
              _arg("--host", help="Only this simulated host's lines (algo-1, algo-2, ...)", default=None),
              _arg("-t", "--timestamps", help="Start each line with its time (UTC, ISO 8601)", action="store_true"),
              _arg("--tail", help="Only the last N lines written so far (then, with --follow, the new ones)",
                   type=int, default=None, metavar="N"),
              _arg("--since", help="Only lines newer than this, e.g. 30m, 2h, 1d", default=None), *COMMON),
    ),
    ActionCommand(
        name="stop", help="Stop a running local job and wait until it has ended",
        func=lazy_load_command(_JOBS + "jobs_stop"),
        args=(ARG_NAME, ARG_KIND, _arg("--timeout", help="Seconds to wait for the job to end (default: 120)",
                                      type=float, default=120.0), *COMMON),
    ),
    ActionCommand(
        name="prune", help="Remove finished local jobs older than a duration; never a running job or one whose "
        "task instance still runs",
        func=lazy_load_command(_JOBS + "jobs_prune"),
        args=(_arg("--older-than", help="Remove jobs finished longer ago than this: 7d, 12h, 30m, 45s, 2w",
                  required=True),
              _arg("--dry-run", help="Only say what would be removed", action="store_true"), ARG_OUTPUT, *COMMON),
    ),
)

SMDIST_COMMANDS = GroupCommand(
    name="smdist", help="SageMaker distributed computing (smdist): the local backend's jobs",
    subcommands=(GroupCommand(name="jobs", help="List, describe, follow, stop and prune local jobs",
                              subcommands=JOBS_COMMANDS),),
)


def get_smdist_cli_commands() -> list[Any]:
    """The provider's commands, for Airflow's CLI (provider info ``cli``)."""
    return [SMDIST_COMMANDS]


def _add(subparsers: Any, command: Any) -> None:
    """``command`` under ``subparsers``, as Airflow's CLI parser adds it."""
    parser = subparsers.add_parser(command.name, help=command.help, description=command.description or command.help)
    if isinstance(command, GroupCommand):
        children = parser.add_subparsers(dest=f"{command.name}_command", metavar="COMMAND", required=True)
        for child in command.subcommands:
            _add(children, child)
    else:
        for arg in command.args:
            arg.add_to_parser(parser)
        parser.set_defaults(func=command.func)


def get_parser() -> argparse.ArgumentParser:
    """The ``smdist`` console script's parser: the group's subcommands at its top."""
    parser = argparse.ArgumentParser(prog="smdist", description=SMDIST_COMMANDS.help)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in SMDIST_COMMANDS.subcommands:
        _add(subparsers, command)
    return parser


def main(argv: list[str] | None = None) -> None:
    """The ``smdist`` console script: ``smdist jobs list`` is ``airflow smdist jobs list``."""
    args = get_parser().parse_args(argv)
    args.func(args)
