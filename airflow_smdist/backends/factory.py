"""Makes the backend a name chooses, from the ``smdist`` connection's settings (the one place that maps a
backend's name to its adapter; the adapters are imported only here, and only when one is made)."""

from __future__ import annotations

from typing import Any

from airflow_smdist.backends.base import Backend

def _text(value: Any) -> str | None:
    """A setting given as text or as a JSON number or list ("3,3", 3, [3, 3])."""
    if value in (None, ""):
        return None
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def make_backend(name: str, *, aws_conn_id: str | None, region_name: str | None,
                 extra: dict[str, Any]) -> Backend:
    """The backend ``name`` (one of ``hooks.smdist.BACKENDS``, already checked) with the connection's settings."""
    if name == "sagemaker":
        from airflow_smdist.backends.sagemaker import SageMakerBackend

        return SageMakerBackend(aws_conn_id=aws_conn_id, region_name=region_name)
    from airflow_smdist.backends.local import LocalBackend

    return LocalBackend(extra.get("local_root"), region_name=region_name,
                        s3_endpoint_url=extra.get("s3_endpoint_url"),
                        local_runtimes=extra.get("local_runtimes"),
                        local_retention=extra.get("local_retention"),
                        local_spot_interruptions=_text(extra.get("local_spot_interruptions")),
                        local_instance_failures=_text(extra.get("local_instance_failures")))
