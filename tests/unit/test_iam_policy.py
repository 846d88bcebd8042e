"""The IAM policy of the sagemaker backend (airflow_smdist/backends/iam.py) cannot go stale: every AWS call in the
package's source is in its list (or said to need no permission, or left out with a reason), every call listed is
made somewhere, and README.md shows exactly what the module renders."""

from __future__ import annotations

import ast
import collections
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_smdist.backends import iam
from airflow_smdist.kinds import KINDS

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "airflow_smdist"
#: the services whose clients the package makes (the Amazon provider's hooks and boto3): their API calls
SERVICES = ("sagemaker", "logs", "cloudwatch", "s3", "sts")
#: boto3's S3 transfer methods (not API operations) -> the API calls they make on success
TRANSFER_METHODS = {
    "upload_file": ("s3:PutObject", "s3:CreateMultipartUpload", "s3:UploadPart", "s3:CompleteMultipartUpload",
                    "s3:AbortMultipartUpload"),
    "download_file": ("s3:HeadObject", "s3:GetObject"),
}
#: methods of the Amazon provider's hooks that the package calls -> the API calls they make
HOOK_METHODS: dict[str, tuple[str, ...]] = {
    "get_client_type": (), "get_conn": (), "get_async_conn": (),
    "get_account_number": ("sts:GetCallerIdentity",),
}
#: the wrappers that call a SageMaker / Logs client method named by their first argument (backends/sagemaker.py)
DISPATCHERS = {"_call": "sagemaker", "_logs_call": "logs"}
#: non-literal first arguments of the dispatchers -> the registry operation ("create", ...) they name
DYNAMIC_OPERATIONS = {"info.create_op": "create", "info.describe_op": "describe", "info.stop_op": "stop",
                      "op": "list"}  # list_jobs: op = info.list_op
#: what names an AWS client: the receiver's last name (``self.client``, ``self.logs_client``, ``self.s3``,
#: ``client``), or a variable assigned from a call that makes one (MAKERS)
CLIENT_NAME = re.compile(r"(^|_)(client|s3|conn)$")
MAKERS = {"client", "get_client_type", "get_conn", "get_async_conn", "_client_from", "_conn", "__aenter__"}
#: files that define client methods rather than call them
NOT_SCANNED = {PACKAGE / "kinds.py", PACKAGE / "backends" / "iam.py"}


def operations_by_method() -> dict[str, list[str]]:
    """botocore's method name (``describe_training_job``) -> ``service:Operation`` of the services above."""
    import botocore.session
    from botocore import xform_name

    session = botocore.session.get_session()
    out: dict[str, list[str]] = collections.defaultdict(list)
    for service in SERVICES:
        model = session.get_service_model(service)
        for op in model.operation_names:
            out[xform_name(op)].append(f"{service}:{op}")
    return out


class CallScanner(ast.NodeVisitor):
    """The AWS calls one module makes: client methods by name, the dispatchers' operations, the job-kind
    registry's operations, paginators, S3 transfers and the provider's hook methods."""

    def __init__(self, path: Path, methods: dict[str, list[str]]) -> None:
        self.path = path
        self.methods = methods
        self.found: dict[str, set[str]] = collections.defaultdict(set)  # call -> where
        self.problems: list[str] = []
        self.hook_classes: set[str] = set()
        self.hook_objects: set[str] = set()
        self.client_objects: set[str] = set()

    def where(self, node: ast.AST) -> str:
        return f"{self.path.relative_to(REPO)}:{getattr(node, 'lineno', 0)}"

    def add(self, calls, node: ast.AST) -> None:
        for call in calls:
            self.found[call].add(self.where(node))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if (node.module or "").startswith("airflow.providers.amazon.aws.hooks"):
            self.hook_classes |= {alias.asname or alias.name for alias in node.names}
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        names = {t.id for t in node.targets if isinstance(t, ast.Name)}
        if self.is_hook(node.value):
            self.hook_objects |= names
        value = node.value.value if isinstance(node.value, ast.Await) else node.value
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in MAKERS:
            self.client_objects |= names
        elif isinstance(value, ast.Attribute) and CLIENT_NAME.search(value.attr):
            self.client_objects |= names
        self.generic_visit(node)

    def is_client(self, node: ast.AST) -> bool:
        name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
        return bool(CLIENT_NAME.search(name)) or name in self.client_objects

    def is_hook(self, node: ast.AST) -> bool:
        return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in self.hook_classes)

    def registry(self, what: str, node: ast.AST) -> None:
        self.add((f"sagemaker:{info.operation(what)}" for info in KINDS.values()), node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute):
            self.attribute_call(node, func)
        elif isinstance(func, ast.Name) and func.id == "getattr" and len(node.args) > 1:
            name = node.args[1]
            if isinstance(name, ast.Constant) and isinstance(name.value, str) and name.value in self.methods:
                self.add(self.methods[name.value], node)
        self.generic_visit(node)

    def attribute_call(self, node: ast.Call, func: ast.Attribute) -> None:
        attr, first = func.attr, (node.args[0] if node.args else None)
        literal = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None
        receiver = func.value
        if self.is_hook(receiver) or (isinstance(receiver, ast.Name) and receiver.id in self.hook_objects):
            if attr not in HOOK_METHODS:
                self.problems.append(f"{self.where(node)}: hook method {attr}() is not known to this test")
            self.add(HOOK_METHODS.get(attr, ()), node)
        elif attr in DISPATCHERS:
            if literal is not None:
                self.add([f"{DISPATCHERS[attr]}:{literal}"], node)
            elif first is not None and ast.unparse(first) in DYNAMIC_OPERATIONS:
                self.registry(DYNAMIC_OPERATIONS[ast.unparse(first)], node)
            else:
                self.problems.append(f"{self.where(node)}: {attr}() of an operation this test cannot read")
        elif attr in ("method", "operation") and literal in ("create", "describe", "stop", "list"):
            self.registry(literal, node)
        elif attr == "get_paginator" and literal is not None:
            self.add(self.methods.get(literal, [f"?:{literal}"]), node)
        elif attr in TRANSFER_METHODS:
            self.add(TRANSFER_METHODS[attr], node)
        elif attr in self.methods and self.is_client(receiver):
            self.add(self.methods[attr], node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in ("create_op", "describe_op", "stop_op", "list_op") and isinstance(node.ctx, ast.Load):
            self.registry(node.attr[:-3], node)
        self.generic_visit(node)


def scan() -> tuple[dict[str, set[str]], list[str]]:
    methods = operations_by_method()
    found: dict[str, set[str]] = collections.defaultdict(set)
    problems: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path in NOT_SCANNED:
            continue
        scanner = CallScanner(path, methods)
        scanner.visit(ast.parse(path.read_text(), str(path)))
        for call, where in scanner.found.items():
            found[call] |= where
        problems += scanner.problems
    return found, problems


def test_every_aws_call_in_the_source_is_in_the_policy_list():
    found, problems = scan()
    assert not problems, problems
    known = set(iam.calls()) | set(iam.NO_PERMISSION_CALLS) | set(iam.LEFT_OUT_CALLS)
    missing = {call: sorted(where) for call, where in found.items() if call not in known}
    assert not missing, ("AWS calls the policy list (airflow_smdist/backends/iam.py) lacks; add each with the IAM "
                         f"action it needs, then regenerate the README block: {missing}")


SNIPPET = """
import re
from airflow.providers.amazon.aws.hooks.sts import StsHook


def calls(self, info, backend, op_name):
    self.client.delete_training_job(TrainingJobName="x")
    cw = backend.cloudwatch_client
    cw.put_metric_data(Namespace="n", MetricData=[])
    self._call("DeleteModel", ModelName="m")
    self._logs_call("PutLogEvents")
    getattr(self.client, info.method("stop"))(Name="x")
    self.s3.get_paginator("list_object_versions")
    self.s3.copy_object(Bucket="b", Key="k", CopySource="c")
    hook = StsHook(aws_conn_id=None)
    hook.get_account_number()
    StsHook().get_caller_identity_arn()
    re.search("put_object", "x")
    backend.put_object("not a client")
    self._call(op_name)
"""


def test_the_scanner_finds_each_form_of_call_and_refuses_what_it_cannot_read():
    path = PACKAGE / "snippet.py"  # (never written: the scanner only names it)
    scanner = CallScanner(path, operations_by_method())
    scanner.visit(ast.parse(SNIPPET))
    assert set(scanner.found) == {
        "sagemaker:DeleteTrainingJob", "cloudwatch:PutMetricData", "sagemaker:DeleteModel", "logs:PutLogEvents",
        *(f"sagemaker:Stop{info.noun}" for info in KINDS.values()), "s3:ListObjectVersions", "s3:CopyObject",
        "sts:GetCallerIdentity"}
    assert [p.split(": ", 1)[1] for p in scanner.problems] == [
        "hook method get_caller_identity_arn() is not known to this test",
        "_call() of an operation this test cannot read"]


def test_every_call_in_the_policy_list_is_made_somewhere():
    found, _ = scan()
    stale = sorted(set(iam.calls()) - set(found))
    assert not stale, f"calls listed in iam.py that the source no longer makes: {stale}"
    assert set(iam.NO_PERMISSION_CALLS) <= set(found) and set(iam.LEFT_OUT_CALLS) <= set(found)


def test_the_scan_sees_the_calls_that_were_missing_from_the_documented_policy():
    """The three the README's old table lacked (issue 30): found where they are made, and listed."""
    found, _ = scan()
    for call, where in (("sagemaker:ListTags", "backends/sagemaker.py"),
                        ("logs:FilterLogEvents", "backends/sagemaker_async.py"),
                        ("cloudwatch:GetMetricData", "insight.py")):
        assert any(where in w for w in found[call]), (call, found[call])
        assert iam.calls()[call] == call


def test_the_left_out_delete_model_is_called_by_nothing_of_the_provider():
    callers = []
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        for m in re.finditer(r"\.delete_model\(", text):
            callers.append(f"{path.relative_to(PACKAGE)}:{text[:m.start()].count(chr(10)) + 1}")
    assert all(c.startswith(("backends/local/", "backends/sagemaker.py")) for c in callers), callers


def test_implicit_actions_are_authorized_by_calls_that_are_listed():
    calls = iam.calls()
    for p in iam.permissions():
        if p.implicit:
            assert p.calls and all(calls[c] != p.action for c in p.calls), p
    passed = next(p for p in iam.permissions() if p.action == "iam:PassRole")
    # every Create* that names a role: training, processing and tuning jobs (RoleArn) and models (ExecutionRoleArn)
    assert set(passed.calls) == {"sagemaker:CreateTrainingJob", "sagemaker:CreateProcessingJob",
                                 "sagemaker:CreateHyperParameterTuningJob", "sagemaker:CreateModel"}


def test_the_readme_shows_the_policy_the_module_renders():
    readme = (REPO / "README.md").read_text()
    assert readme.count(iam.README_BEGIN) == 1 and readme.count(iam.README_END) == 1
    block = readme[readme.index(iam.README_BEGIN):readme.index(iam.README_END) + len(iam.README_END)]
    assert block == iam.readme_block(), ("README.md's IAM policy differs from what airflow_smdist/backends/iam.py "
                                         "renders; regenerate it: python -m airflow_smdist.backends.iam --readme")
    shown = block.split("```json\n", 1)[1].split("\n```", 1)[0]
    assert json.loads(shown) == iam.policy_document()


def test_the_policy_renders_for_an_account_its_kinds_and_prefixes():
    doc = iam.policy_document(role_arn="arn:aws:iam::123456789012:role/R", region="eu-west-1",
                              account="123456789012", s3_prefixes=["s3://b/code/", "s3://b/data", "s3://c"],
                              kinds=["training"])
    by_sid = {s["Sid"]: s for s in doc["Statement"]}
    assert list(by_sid) == ["SmdistTrainingJobs", "SmdistListJobs", "SmdistPassExecutionRole", "SmdistS3Objects",
                            "SmdistS3List", "SmdistJobLogs", "SmdistTrainingMetrics"]
    assert by_sid["SmdistTrainingJobs"]["Resource"] == ["arn:aws:sagemaker:eu-west-1:123456789012:training-job/*"]
    assert by_sid["SmdistListJobs"]["Action"] == ["sagemaker:ListTrainingJobs"]
    assert by_sid["SmdistPassExecutionRole"] == {
        "Sid": "SmdistPassExecutionRole", "Effect": "Allow", "Action": ["iam:PassRole"],
        "Resource": ["arn:aws:iam::123456789012:role/R"],
        "Condition": {"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}}}
    assert by_sid["SmdistS3Objects"]["Resource"] == ["arn:aws:s3:::b/code/*", "arn:aws:s3:::b/data/*",
                                                     "arn:aws:s3:::c/*"]
    assert by_sid["SmdistS3List"]["Resource"] == ["arn:aws:s3:::b", "arn:aws:s3:::c"]
    assert by_sid["SmdistJobLogs"]["Resource"] == ["arn:aws:logs:eu-west-1:123456789012:log-group:/aws/sagemaker/*"]
    assert "sagemaker:CreateModel" not in json.dumps(doc)  # transform's, not asked for
    tuning = iam.policy_document(kinds=["tuning"])
    assert "SmdistTrainingMetrics" not in json.dumps(tuning)  # insight is the training operator's
    assert {"sagemaker:DescribeTrainingJob", "sagemaker:ListTrainingJobsForHyperParameterTuningJob"} <= set(
        tuning["Statement"][0]["Action"])


def test_leaving_an_action_out_drops_it_and_an_emptied_statement():
    doc = iam.policy_document(leave_out=["cloudwatch:GetMetricData", "sagemaker:ListTags"])
    text = json.dumps(doc)
    assert "GetMetricData" not in text and "sagemaker:ListTags" not in text
    assert "SmdistTrainingMetrics" not in text and "SmdistTrainingJobs" in text
    with pytest.raises(ValueError):
        iam.policy_document(s3_prefixes=[])
    with pytest.raises(ValueError):
        iam.policy_document(s3_prefixes=["file:///tmp"])
    with pytest.raises(ValueError):
        iam.statements(["nope"])


def test_the_command_prints_the_policy_and_the_readme_block():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-m", "airflow_smdist.backends.iam", "--role-arn",
                          "arn:aws:iam::123456789012:role/R", "--s3", "s3://b/p", "--kind", "processing"],
                         capture_output=True, text=True, env=env, check=True).stdout
    assert json.loads(out) == iam.policy_document(role_arn="arn:aws:iam::123456789012:role/R",
                                                  s3_prefixes=["s3://b/p"], kinds=["processing"])
    readme = subprocess.run([sys.executable, "-m", "airflow_smdist.backends.iam", "--readme"], capture_output=True,
                            text=True, env=env, check=True).stdout
    assert readme == iam.readme_block() + "\n"


def test_the_module_is_import_cheap():
    code = ("import sys, airflow_smdist.backends.iam; "
            "print(sorted(m for m in ('airflow', 'boto3', 'botocore') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}).stdout
    assert out.strip() == "[]"
