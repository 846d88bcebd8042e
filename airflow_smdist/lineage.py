"""OpenLineage datasets of each job kind, from its Describe* response (inputs read, outputs written)."""

from __future__ import annotations

from typing import Any


def lineage_uris(kind: str, d: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(input URIs, output URIs) of a job description."""
    if kind == "training":
        ins = [c["DataSource"]["S3DataSource"]["S3Uri"] for c in d.get("InputDataConfig", [])
               if "S3DataSource" in c.get("DataSource", {})]
        model = (d.get("ModelArtifacts") or {}).get("S3ModelArtifacts")
        return ins, [model] if model else []
    if kind == "processing":
        ins = [i["S3Input"]["S3Uri"] for i in d.get("ProcessingInputs", []) if "S3Input" in i]
        outs = [o["S3Output"]["S3Uri"] for o in (d.get("ProcessingOutputConfig") or {}).get("Outputs", [])
                if "S3Output" in o]
        return ins, outs
    if kind == "transform":
        src = ((d.get("TransformInput") or {}).get("DataSource") or {}).get("S3DataSource") or {}
        out = (d.get("TransformOutput") or {}).get("S3OutputPath")
        return [src["S3Uri"]] if src.get("S3Uri") else [], [out] if out else []
    if kind == "tuning":
        definition = d.get("TrainingJobDefinition") or (d.get("TrainingJobDefinitions") or [{}])[0]
        ins = [c["DataSource"]["S3DataSource"]["S3Uri"] for c in definition.get("InputDataConfig", [])
               if "S3DataSource" in c.get("DataSource", {})]
        out = (definition.get("OutputDataConfig") or {}).get("S3OutputPath")
        return ins, [out] if out else []
    return [], []


def dataset(uri: str):
    """An OpenLineage dataset for an s3:// or file:// URI (namespace: scheme + bucket, name: key)."""
    from airflow.providers.common.compat.openlineage.facet import Dataset

    scheme, _, rest = uri.partition("://")
    if scheme == "file":
        return Dataset(namespace="file", name="/" + rest.lstrip("/"))
    bucket, _, key = rest.partition("/")
    return Dataset(namespace=f"{scheme}://{bucket}", name=key or "/")


def operator_lineage(inputs: list[str], outputs: list[str]):
    """The OperatorLineage for these URIs, or None without the OpenLineage provider."""
    try:
        from airflow.providers.openlineage.extractors import OperatorLineage
    except ImportError:
        return None
    return OperatorLineage(inputs=[dataset(u) for u in inputs], outputs=[dataset(u) for u in outputs])
