"""The AWS permissions the ``sagemaker`` backend needs: one list, from which the policy document is rendered.

Every AWS call the provider makes on the sagemaker backend (boto3 and aiobotocore clients of the Amazon
provider's hooks: SageMaker, CloudWatch Logs, CloudWatch, S3, STS) is listed here with the IAM action that
authorizes it, the code that makes it and the resources it touches, grouped as the policy's statements:
per job kind (its Create/Describe/Stop calls, ListTags and tag-on-create on its own ARNs, and what the kind
needs besides), then the parts every kind shares (List*Jobs, iam:PassRole of the execution role, S3 on the
code and data prefixes, CloudWatch Logs, CloudWatch metrics for insight).

``tests/unit/test_iam_policy.py`` scans the package for client calls and fails on one this list lacks (or on
a listed call nothing makes), and checks that the README's policy is :func:`readme_block`'s output;
``tests/integration/test_iam_policy_on_moto.py`` runs jobs against a moto server that enforces the rendered
policy and shows that each action it can enforce is needed.

Render a policy for your account (JSON on stdout)::

    python -m airflow_smdist.backends.iam --role-arn arn:aws:iam::123456789012:role/SageMakerRole \\
        --s3 s3://my-bucket/smdist --region eu-west-1 --account 123456789012 [--kind training ...]

``--readme`` prints the README's block (the table and the policy with placeholders) instead.

Import-cheap: the standard library and the job-kind registry only.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from airflow_smdist.kinds import JOB_KINDS, kind_info

#: what a statement's resources are: the job kind's SageMaker ARNs, any (actions without resource-level
#: permissions), the execution role, objects under the S3 prefixes, their buckets, the SageMaker log groups
ResourceKind = Literal["jobs", "any", "role", "objects", "buckets", "logs"]

#: the service that receives the role when a Create* names it (iam:PassRole's condition)
PASSED_TO_SERVICE = "sagemaker.amazonaws.com"
#: CloudWatch Logs groups of SageMaker jobs (training, processing, transform; a tuning job's trials log as
#: training jobs), as a resource pattern that covers the groups and their streams
LOG_GROUPS = "/aws/sagemaker/*"

#: README placeholders: the policy as documented, before :func:`policy_document` gets real values
PLACEHOLDER_ROLE = "arn:aws:iam::<account>:role/<sagemaker-execution-role>"
PLACEHOLDER_S3 = ("s3://<bucket>/<prefix>",)

#: markers around the generated block in README.md
README_BEGIN = "<!-- iam-policy:begin (generated: python -m airflow_smdist.backends.iam --readme) -->"
README_END = "<!-- iam-policy:end -->"


@dataclass(frozen=True)
class Permission:
    """One IAM action: the API calls (``service:Operation``, as botocore names them) it authorizes, and who
    makes them. ``implicit``: no call of that name is made; the service authorizes the action as part of the
    calls listed (iam:PassRole when a Create* names the role, sagemaker:AddTags for tags given to a Create*)."""

    action: str
    calls: tuple[str, ...]
    used_by: str
    implicit: bool = False


@dataclass(frozen=True)
class Statement:
    """One statement of the policy: its permissions, on the resources ``resources`` names."""

    sid: str
    part: str
    resources: ResourceKind
    permissions: tuple[Permission, ...]
    #: ``resources == "jobs"``: the SageMaker resource types (``training-job``, ``model``) it covers
    resource_types: tuple[str, ...] = ()
    condition: dict[str, dict[str, str]] | None = None

    @property
    def actions(self) -> list[str]:
        return sorted({p.action for p in self.permissions})


def _sagemaker(op: str, used_by: str) -> Permission:
    """The permission of the SageMaker call ``op`` (its action has the operation's name)."""
    return Permission(f"sagemaker:{op}", (f"sagemaker:{op}",), used_by)


#: what a job kind needs besides its own Create/Describe/Stop, ListTags and AddTags: (permissions, resource types)
_KIND_EXTRAS: dict[str, tuple[tuple[Permission, ...], tuple[str, ...]]] = {
    "transform": ((
        _sagemaker("CreateModel", "SageMakerShardedBatchInferenceOperator creates the model its jobs run "
                   "(operators/transform.py create_model)"),
        _sagemaker("DescribeModel", "a retry finds the model its first try made (operators/transform.py "
                   "describe_model)"),
    ), ("model",)),
    "tuning": ((
        _sagemaker("ListTrainingJobsForHyperParameterTuningJob", "the trials: the result, trials.json and "
                   "their logs (operators/tuning.py, backends/base.py tuning_log_events)"),
        _sagemaker("DescribeTrainingJob", "the best trial's model and hyperparameters (operators/tuning.py "
                   "tuning_result)"),
    ), ("training-job",)),
}


def kind_statement(kind: str) -> Statement:
    """The statement of one job kind: its calls on its own ARNs (and its extras')."""
    info = kind_info(kind)
    permissions = (
        _sagemaker(info.create_op, "starts the job (JobLifecycle.submit)"),
        _sagemaker(info.describe_op, "status while a task waits, a retry's choice of name, the result "
                   "(JobLifecycle.choose/wait, execute_complete)"),
        _sagemaker(info.stop_op, "stops the job when its task is killed or its deferral times out "
                   "(JobLifecycle.stop)"),
        _sagemaker("ListTags", "every retry, and a cleared task, reads the owner tag of the job of its name "
                   "before it reattaches (JobLifecycle.accept_reattach)"),
        Permission("sagemaker:AddTags", (f"sagemaker:{info.create_op}",),
                   "the Create request carries the task instance's owner tags", implicit=True),
    )
    extras, extra_types = _KIND_EXTRAS.get(kind, ((), ()))
    label = info.noun.replace("HyperParameterTuning", "Tuning")
    return Statement(f"Smdist{label}s", kind, "jobs", permissions + extras, (info.arn_resource, *extra_types))


def list_statement(kinds: Sequence[str]) -> Statement:
    """List*Jobs of the kinds: SageMaker's List calls take no resource-level permissions."""
    permissions = tuple(
        _sagemaker(kind_info(k).list_op, "deferrable waits and waits for several jobs: one List call per "
                   "interval for all of them (backends/sagemaker_async.py, lifecycle.py CoalescedRounds)")
        for k in kinds)
    return Statement("SmdistListJobs", "all", "any", permissions)


def shared_statements(kinds: Sequence[str]) -> list[Statement]:
    """What every kind shares: PassRole, S3, CloudWatch Logs; metrics for training jobs' insight."""
    creates = tuple(f"sagemaker:{kind_info(k).create_op}" for k in kinds if k != "transform")
    if "transform" in kinds:
        creates += ("sagemaker:CreateModel",)
    out = [
        Statement("SmdistPassExecutionRole", "all", "role", (
            Permission("iam:PassRole", creates, "a Create call names the SageMaker execution role (RoleArn, "
                       "a model's ExecutionRoleArn)", implicit=True),),
            condition={"StringEquals": {"iam:PassedToService": PASSED_TO_SERVICE}}),
        Statement("SmdistS3Objects", "all", "objects", (
            Permission("s3:GetObject", ("s3:GetObject", "s3:HeadObject"),
                       "reads manifests, results of @task.smdist functions and markers; checks that objects "
                       "exist (storage.py)"),
            Permission("s3:PutObject", ("s3:PutObject", "s3:CreateMultipartUpload", "s3:UploadPart",
                                        "s3:CompleteMultipartUpload"),
                       "uploads sourcedir.tar.gz and processing code; writes manifests, insight, tuning and "
                       "scaling results (storage.py, sourcedir.py)"),
        )),
        Statement("SmdistS3List", "all", "buckets", (
            Permission("s3:ListBucket", ("s3:ListObjectsV2",),
                       "lists inputs and outputs under a prefix (batch inference's completeness, "
                       "Storage.list); without it S3 answers HeadObject of a missing object 403, not 404 "
                       "(Storage.exists)"),)),
        Statement("SmdistJobLogs", "all", "logs", (
            Permission("logs:DescribeLogStreams", ("logs:DescribeLogStreams",),
                       "a task that waits for one job finds its hosts' streams (backends/sagemaker.py "
                       "log_events)"),
            Permission("logs:GetLogEvents", ("logs:GetLogEvents",),
                       "... and reads them"),
            Permission("logs:FilterLogEvents", ("logs:FilterLogEvents",),
                       "deferrable waits and waits for several jobs: one call a round for all their "
                       "streams (backends/sagemaker_async.py, lifecycle.py CoalescedRounds)"),
        )),
    ]
    if "training" in kinds:
        out.append(Statement("SmdistTrainingMetrics", "training", "any", (
            Permission("cloudwatch:GetMetricData", ("cloudwatch:GetMetricData",),
                       "insight after a training job: its metrics and instance utilization (insight.py)"),)))
    return out


def statements(kinds: Iterable[str] = JOB_KINDS) -> list[Statement]:
    """The policy's statements for the job kinds ``kinds`` (default every kind), in the order rendered."""
    chosen = [kind_info(k).name for k in kinds]  # rejects an unknown kind
    chosen = [k for k in JOB_KINDS if k in chosen]
    return [kind_statement(k) for k in chosen] + [list_statement(chosen)] + shared_statements(chosen)


#: Calls that need no IAM permission, with who makes them (the unit test's scan knows them as listed).
NO_PERMISSION_CALLS: dict[str, str] = {
    "sts:GetCallerIdentity": "the processing operator's default code location, s3://sagemaker-<region>-<account> "
                             "(operators/processing.py; STS answers it for any identity)",
}

#: Calls the code can make that the policy leaves out, and why: nothing of the provider makes them, or only to
#: clean up after a failure that fails the task anyway.
LEFT_OUT_CALLS: dict[str, str] = {
    "sagemaker:DeleteModel": "SageMakerBackend.delete_model: no operator, sensor or trigger calls it; code of "
                             "your own that does needs sagemaker:DeleteModel on arn:aws:sagemaker:*:*:model/*",
    "s3:AbortMultipartUpload": "boto3's upload_file aborts a multipart upload (objects over 8 MB) that failed; "
                               "the task fails with the upload's own error either way, and without the "
                               "permission the parts stay until a bucket lifecycle rule removes them",
}


def permissions(kinds: Iterable[str] = JOB_KINDS) -> list[Permission]:
    """Every permission of :func:`statements` (an action may come once per statement it is in)."""
    return [p for s in statements(kinds) for p in s.permissions]


def actions(kinds: Iterable[str] = JOB_KINDS) -> list[str]:
    """Every IAM action of the policy, each once, sorted."""
    return sorted({p.action for p in permissions(kinds)})


def calls(kinds: Iterable[str] = JOB_KINDS) -> dict[str, str]:
    """``service:Operation`` of every API call the policy authorizes -> the IAM action that authorizes it
    (the explicit one where a call also needs an implicit one)."""
    out: dict[str, str] = {}
    for p in permissions(kinds):
        for call in p.calls:
            if not p.implicit or call not in out:
                out[call] = p.action
    return out


# -- rendering ---------------------------------------------------------------------------------------------
def _s3_parts(uri: str) -> tuple[str, str]:
    if not uri.startswith("s3://"):
        raise ValueError(f"{uri!r} is not an s3:// prefix")
    bucket, _, prefix = uri[len("s3://"):].partition("/")
    if not bucket:
        raise ValueError(f"{uri!r} names no bucket")
    return bucket, prefix.rstrip("/")


def _resources(statement: Statement, *, partition: str, region: str, account: str, role_arn: str,
               s3_prefixes: Sequence[str]) -> list[str]:
    if statement.resources == "jobs":
        return [f"arn:{partition}:sagemaker:{region}:{account}:{t}/*" for t in statement.resource_types]
    if statement.resources == "role":
        return [role_arn]
    if statement.resources == "logs":
        return [f"arn:{partition}:logs:{region}:{account}:log-group:{LOG_GROUPS}"]
    if statement.resources == "any":
        return ["*"]
    parts = [_s3_parts(u) for u in s3_prefixes]
    if statement.resources == "buckets":
        return list(dict.fromkeys(f"arn:{partition}:s3:::{bucket}" for bucket, _ in parts))
    return list(dict.fromkeys(f"arn:{partition}:s3:::{bucket}/{prefix + '/' if prefix else ''}*"
                              for bucket, prefix in parts))


def policy_document(*, role_arn: str = PLACEHOLDER_ROLE, s3_prefixes: Sequence[str] = PLACEHOLDER_S3,
                    region: str = "*", account: str = "*", partition: str = "aws",
                    kinds: Iterable[str] = JOB_KINDS, leave_out: Iterable[str] = ()) -> dict[str, Any]:
    """The IAM policy document (a dict; ``json.dumps`` it) for the identity Airflow's ``aws`` connection uses.

    ``role_arn``: the SageMaker execution role the jobs run as (what iam:PassRole may pass); ``s3_prefixes``:
    the ``s3://bucket/prefix`` locations of code, data and outputs; ``kinds``: the job kinds the DAGs run.
    ``leave_out``: actions to drop (the integration test proves each one needed)."""
    if not s3_prefixes:
        raise ValueError("give at least one s3:// prefix (code, data and outputs)")
    dropped = set(leave_out)
    out: list[dict[str, Any]] = []
    for statement in statements(kinds):
        kept = [a for a in statement.actions if a not in dropped]
        if not kept:
            continue
        rendered: dict[str, Any] = {"Sid": statement.sid, "Effect": "Allow", "Action": kept,
                                    "Resource": _resources(statement, partition=partition, region=region,
                                                           account=account, role_arn=role_arn,
                                                           s3_prefixes=s3_prefixes)}
        if statement.condition:
            rendered["Condition"] = statement.condition
        out.append(rendered)
    return {"Version": "2012-10-17", "Statement": out}


def policy_json(**kwargs: Any) -> str:
    """:func:`policy_document` as JSON text: a statement's keys one a line, each value on its line."""
    document = policy_document(**kwargs)
    rendered = []
    for statement in document["Statement"]:
        lines = [f"      {json.dumps(key)}: {json.dumps(value)}" for key, value in statement.items()]
        rendered.append("    {\n" + ",\n".join(lines) + "\n    }")
    return ("{\n" + f'  "Version": {json.dumps(document["Version"])},\n' + '  "Statement": [\n'
            + ",\n".join(rendered) + "\n  ]\n}")


def readme_table(kinds: Iterable[str] = JOB_KINDS) -> str:
    """A Markdown table: every action, the statement (and so the resources) it is in, and who needs it."""
    rows = ["| Part | Action | Statement | Needed for |", "|---|---|---|---|"]
    for statement in statements(kinds):
        for p in statement.permissions:
            used_by = p.used_by + ("; authorized as part of the Create call (no call of its own)" if p.implicit
                                   else "")
            rows.append(f"| {statement.part} | `{p.action}` | `{statement.sid}` | {used_by} |")
    return "\n".join(rows)


def readme_block() -> str:
    """What README.md holds between its iam-policy markers (markers included)."""
    return "\n".join([README_BEGIN, "", readme_table(), "", "```json", policy_json(), "```", "", README_END])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m airflow_smdist.backends.iam",
                                     description="Print the IAM policy the provider's sagemaker backend needs.")
    parser.add_argument("--role-arn", default=PLACEHOLDER_ROLE, help="the SageMaker execution role's ARN")
    parser.add_argument("--s3", action="append", dest="s3_prefixes", metavar="S3_PREFIX",
                        help="an s3://bucket/prefix of code, data or outputs (repeat for more)")
    parser.add_argument("--region", default="*")
    parser.add_argument("--account", default="*")
    parser.add_argument("--partition", default="aws")
    parser.add_argument("--kind", action="append", dest="kinds", choices=JOB_KINDS,
                        help="a job kind your DAGs run (repeat; default: all)")
    parser.add_argument("--readme", action="store_true", help="print README.md's generated block instead")
    args = parser.parse_args(argv)
    if args.readme:
        print(readme_block())
        return 0
    print(policy_json(role_arn=args.role_arn, s3_prefixes=args.s3_prefixes or PLACEHOLDER_S3, region=args.region,
                      account=args.account, partition=args.partition, kinds=args.kinds or JOB_KINDS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
