"""OpenLineage datasets of each job kind, from its Describe* response (inputs read, outputs written)."""

from __future__ import annotations

from typing import Any


Uris = tuple[list[str], list[str]]


def lineage_uris(kind: str, d: dict[str, Any]) -> Uris:
    """(input URIs, output URIs) of a job description (the kind's ``lineage_function`` in the registry)."""
    from airflow_smdist.kinds import kind_info

    return kind_info(kind).lineage(d)


def _channels(definition: dict[str, Any]) -> list[str]:
    return [c["DataSource"]["S3DataSource"]["S3Uri"] for c in definition.get("InputDataConfig", [])
            if "S3DataSource" in c.get("DataSource", {})]


def training_lineage(d: dict[str, Any]) -> Uris:
    model = (d.get("ModelArtifacts") or {}).get("S3ModelArtifacts")
    return _channels(d), [model] if model else []


def processing_lineage(d: dict[str, Any]) -> Uris:
    ins = [i["S3Input"]["S3Uri"] for i in d.get("ProcessingInputs", []) if "S3Input" in i]
    outs = [o["S3Output"]["S3Uri"] for o in (d.get("ProcessingOutputConfig") or {}).get("Outputs", [])
            if "S3Output" in o]
    return ins, outs


def transform_lineage(d: dict[str, Any]) -> Uris:
    src = ((d.get("TransformInput") or {}).get("DataSource") or {}).get("S3DataSource") or {}
    out = (d.get("TransformOutput") or {}).get("S3OutputPath")
    return [src["S3Uri"]] if src.get("S3Uri") else [], [out] if out else []


def tuning_lineage(d: dict[str, Any]) -> Uris:
    definition = d.get("TrainingJobDefinition") or (d.get("TrainingJobDefinitions") or [{}])[0]
    out = (definition.get("OutputDataConfig") or {}).get("S3OutputPath")
    return _channels(definition), [out] if out else []


def dataset(uri: str) -> Any:
    """An OpenLineage dataset for an s3:// or file:// URI (namespace: scheme + bucket, name: key)."""
    from airflow.providers.common.compat.openlineage.facet import Dataset

    scheme, _, rest = uri.partition("://")
    if scheme == "file":
        return Dataset(namespace="file", name="/" + rest.lstrip("/"))
    bucket, _, key = rest.partition("/")
    return Dataset(namespace=f"{scheme}://{bucket}", name=key or "/")


def operator_lineage(inputs: list[str], outputs: list[str]) -> Any:
    """The OperatorLineage for these URIs, or None without the OpenLineage provider."""
    try:
        from airflow.providers.openlineage.extractors import OperatorLineage
    except ImportError:
        return None
    return OperatorLineage(inputs=[dataset(u) for u in inputs], outputs=[dataset(u) for u in outputs])
