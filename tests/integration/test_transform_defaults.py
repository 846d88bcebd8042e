"""The sharded-inference operators default as the SDK's Transformer does (issue 18): whole objects, no
content type, no assembly; the one deliberate difference (Line implies MultiRecord + AssembleWith Line) is
documented in the README."""

from __future__ import annotations

import inspect
import io
import tarfile
import uuid
from types import SimpleNamespace

import pytest

from airflow_smdist.operators.transform import (
    SageMakerBatchInferenceMergeOperator,
    SageMakerBatchShardPlanOperator,
    SageMakerShardedBatchInferenceOperator,
)

#: our argument -> (the SDK's method, its argument)
SDK_NAMES = {"content_type": ("transform", "content_type"), "split_type": ("transform", "split_type"),
             "compression": ("transform", "compression_type"), "input_filter": ("transform", "input_filter"),
             "output_filter": ("transform", "output_filter"), "join_source": ("transform", "join_source"),
             "accept": ("__init__", "accept"), "assemble_with": ("__init__", "assemble_with"),
             "batch_strategy": ("__init__", "strategy"), "max_payload_mb": ("__init__", "max_payload"),
             "max_concurrent_transforms": ("__init__", "max_concurrent_transforms")}


def _defaults(fn) -> dict:
    return {n: p.default for n, p in inspect.signature(fn).parameters.items()
            if p.default is not inspect.Parameter.empty}


def test_record_arguments_default_as_the_sdks_transformer():
    Transformer = pytest.importorskip("sagemaker.core.transformer").Transformer  # the oracle (the SDK)

    sdk = {"transform": _defaults(Transformer.transform), "__init__": _defaults(Transformer.__init__)}
    for op in (SageMakerShardedBatchInferenceOperator, SageMakerBatchShardPlanOperator,
               SageMakerBatchInferenceMergeOperator):
        ours = _defaults(op.__init__)
        for name, (method, sdk_name) in SDK_NAMES.items():
            if name in ours:
                assert ours[name] == sdk[method][sdk_name], (op.__name__, name)


CODE = b"def model_fn(model_dir):\n    return None\n\n" \
       b"def transform_fn(model, body, content_type, accept):\n" \
       b"    return f'{len(body.splitlines())} line(s) as {content_type}\\n', 'text/plain'\n"


@pytest.mark.slow
def test_with_the_defaults_each_object_is_one_request(tmp_path, monkeypatch):
    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(tmp_path / "jobs"))
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.csv").write_text("1,2\n3,4\n5,6\n")
    with tarfile.open(tmp_path / "model.tar.gz", "w:gz") as tar:
        info = tarfile.TarInfo("code/inference.py")
        info.size = len(CODE)
        tar.addfile(info, io.BytesIO(CODE))
    op = SageMakerShardedBatchInferenceOperator(
        task_id="score", input_uri=f"file://{tmp_path}/in", output_uri=f"file://{tmp_path}/out",
        model_data=f"file://{tmp_path}/model.tar.gz", image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1",
        poll_interval=0.3)
    result = op.execute({"ti": SimpleNamespace(dag_id="d", task_id="score", map_index=-1, try_number=1),
                         "run_id": uuid.uuid4().hex})
    assert result["complete"], result
    assert (tmp_path / "out" / "a.csv.out").read_text().startswith("3 line(s)")  # the whole object, once
    from airflow_smdist.backends.local import LocalBackend

    d = LocalBackend(tmp_path / "jobs").describe("transform", result["jobs"][0]["job_name"])
    assert d["TransformInput"].get("SplitType", "None") == "None" and "ContentType" not in d["TransformInput"]
    assert "BatchStrategy" not in d and "AssembleWith" not in d["TransformOutput"]
