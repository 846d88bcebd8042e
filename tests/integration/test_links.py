"""Extra links work in the UI or do not appear: console links for sagemaker jobs, the job page for local jobs.

The Airflow 3 UI shows a link only when its URL is non-empty, and drops ``file://`` URLs; the browser check
(scripts/e2e-deployment.sh) looks at the rendered task page and follows the local job's link. Here: what each
operator stores when its job starts, resolved by the operator's own link classes exactly as the UI's link
lookup resolves it."""

from __future__ import annotations

import logging
import uuid
from types import SimpleNamespace


from airflow_smdist.operators.links import SmdistConsoleLink

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1"


class RecordingTI(SimpleNamespace):
    def xcom_push(self, key, value):
        self.pushed[key] = value


def context(task_id: str):
    ti = RecordingTI(dag_id="dag", task_id=task_id, map_index=-1, try_number=1, pushed={})
    return {"ti": ti, "run_id": f"run-{uuid.uuid4().hex}"}


def resolved_links(op, ti) -> dict[str, str]:
    """{link name: URL} as BaseAwsLink.get_link resolves the stored XCom (empty: the UI shows no link)."""
    out = {}
    for link in op.operator_extra_links:
        assert isinstance(link, SmdistConsoleLink), f"{type(link).__name__} must decide per backend"
        conf = ti.pushed.get(link.key)
        out[link.name] = link.format_link(**conf) if conf else ""
    return out


def operators(tmp_path, backend):
    from airflow_smdist.operators.processing import SmdistProcessingOperator
    from airflow_smdist.operators.training import SageMakerDistributedTrainingOperator
    from airflow_smdist.operators.transform import (
        SageMakerShardedBatchInferenceOperator,
    )
    from airflow_smdist.operators.tuning import SmdistTuningOperator

    common = {"backend": backend, "region_name": "eu-west-1"}
    return [
        SageMakerDistributedTrainingOperator(task_id="train", image_uri=IMAGE, output_path="s3://b/out", **common),
        SmdistProcessingOperator(task_id="process", image_uri=IMAGE, code=str(tmp_path / "x.py"), **common),
        SageMakerShardedBatchInferenceOperator(task_id="infer", model_data="s3://b/model.tar.gz", image_uri=IMAGE,
                                               input_uri="s3://b/in", output_uri="s3://b/out", **common),
        SmdistTuningOperator(task_id="tune", image_uri=IMAGE, output_path="s3://b/out", objective_metric_name="m",
                             hyperparameter_ranges={"lr": {"type": "continuous", "min": 0.1, "max": 1}},
                             metric_definitions=[{"Name": "m", "Regex": "m=([0-9.]+)"}], **common),
    ]


def test_local_jobs_link_only_their_job_page_and_log_the_job_directory(tmp_path, monkeypatch, caplog, capsys):
    from airflow_smdist._compat import AIRFLOW_V_3_0_PLUS
    from airflow_smdist.operators.links import LocalJobPageLink

    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(tmp_path / "jobs"))
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "http://airflow.example:8080/")
    for op in operators(tmp_path, "local"):
        ctx = context(op.task_id)
        with caplog.at_level(logging.INFO):
            op.persist_links(ctx, f"smdist-{op.task_id}-1")
        assert ctx["ti"].pushed, f"{op.task_id}: a link XCom is stored (the UI's lookup then finds no error)"
        links = resolved_links(op, ctx["ti"])
        page = f"/smdist/jobs/{op.kind}/smdist-{op.task_id}-1" if AIRFLOW_V_3_0_PLUS else ""
        assert links == {**{n: "" for n in links}, LocalJobPageLink.name: page}, f"{op.task_id}: {links}"
        if AIRFLOW_V_3_0_PLUS:  # the URL itself too, where the UI reads it: the link is there while the job runs
            assert ctx["ti"].pushed[LocalJobPageLink().xcom_key] == page
        logged = caplog.text + capsys.readouterr().out  # Airflow 3's task logger writes through structlog
        assert f"smdist-{op.task_id}-1 lives in {tmp_path / 'jobs'}" in logged


def test_sagemaker_jobs_link_to_the_console_of_their_region_and_partition(tmp_path, moto_server):
    for op in operators(tmp_path, "sagemaker"):
        ctx = context(op.task_id)
        op.persist_links(ctx, f"smdist-{op.task_id}-1")
        for name, url in resolved_links(op, ctx["ti"]).items():
            if name == "Job page (local)":
                assert url == "", "a sagemaker job has no local job page"
                continue
            assert url.startswith("https://console.aws.amazon.com/"), (name, url)
            assert "region=eu-west-1" in url and f"smdist-{op.task_id}-1" in url, (name, url)
    cn = operators(tmp_path, "sagemaker")[0]
    cn.region_name = "cn-north-1"
    ctx = context("train")
    cn.persist_links(ctx, "job")
    assert all(u.startswith("https://console.amazonaws.cn/") for u in resolved_links(cn, ctx["ti"]).values() if u)


def test_the_job_page_link_keeps_the_api_servers_base_path(monkeypatch):
    from airflow_smdist._compat import AIRFLOW_V_3_0_PLUS
    from airflow_smdist.operators.links import LocalJobPageLink

    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://example.org/airflow/")
    url = LocalJobPageLink().format_link(backend="local", kind="training", job_name="j-1")
    assert url == ("/airflow/smdist/jobs/training/j-1" if AIRFLOW_V_3_0_PLUS else "")
    assert LocalJobPageLink().format_link(backend="sagemaker", kind="training", job_name="j-1") == ""
