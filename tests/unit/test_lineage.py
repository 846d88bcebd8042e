"""OpenLineage datasets per job kind, from the Describe* shapes."""

from __future__ import annotations

import pytest

from airflow_smdist.lineage import lineage_uris, operator_lineage


def channel(uri):
    return {"ChannelName": "c", "DataSource": {"S3DataSource": {"S3Uri": uri}}}


def test_each_kind_reads_its_inputs_and_writes_its_outputs():
    assert lineage_uris("training", {"InputDataConfig": [channel("s3://b/train/"), channel("s3://b/val/")],
                                     "ModelArtifacts": {"S3ModelArtifacts": "s3://b/out/j/output/model.tar.gz"}}) == (
        ["s3://b/train/", "s3://b/val/"], ["s3://b/out/j/output/model.tar.gz"])
    assert lineage_uris("processing", {
        "ProcessingInputs": [{"InputName": "raw", "S3Input": {"S3Uri": "s3://b/raw/"}},
                             {"InputName": "athena", "DatasetDefinition": {}}],
        "ProcessingOutputConfig": {"Outputs": [{"OutputName": "train", "S3Output": {"S3Uri": "s3://b/train/"}}]},
    }) == (["s3://b/raw/"], ["s3://b/train/"])
    assert lineage_uris("transform", {"TransformInput": {"DataSource": {"S3DataSource": {"S3Uri": "s3://b/in/"}}},
                                      "TransformOutput": {"S3OutputPath": "s3://b/out/"}}) == (["s3://b/in/"], ["s3://b/out/"])
    assert lineage_uris("tuning", {"TrainingJobDefinition": {"InputDataConfig": [channel("s3://b/t/")],
                                                             "OutputDataConfig": {"S3OutputPath": "s3://b/o/"}}}) == (
        ["s3://b/t/"], ["s3://b/o/"])


def test_datasets_name_bucket_and_key():
    pytest.importorskip("airflow.providers.openlineage")
    lineage = operator_lineage(["s3://bucket/data/train/"], ["file:///tmp/out/model.tar.gz"])
    assert (lineage.inputs[0].namespace, lineage.inputs[0].name) == ("s3://bucket", "data/train/")
    assert (lineage.outputs[0].namespace, lineage.outputs[0].name) == ("file", "/tmp/out/model.tar.gz")
