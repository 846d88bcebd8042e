"""The ``smdist`` connection: which backend runs jobs, and how it reaches AWS or the local machine.

Connection extra (all optional)::

    {"backend": "local" | "sagemaker", "aws_conn_id": "aws_default", "region_name": "us-east-1",
     "local_root": "/path/for/local/jobs", "s3_endpoint_url": "http://127.0.0.1:5000",
     "local_retention": "30d", "local_spot_interruptions": "3,3", "local_instance_failures": ""}

``local_spot_interruptions`` and ``local_instance_failures`` rehearse interruptions on the local backend (see
:mod:`airflow_smdist.backends.local.job.spot`; before ``SMDIST_LOCAL_SPOT_INTERRUPTIONS`` and
``SMDIST_LOCAL_INSTANCE_FAILURES``); the sagemaker backend never reads them.

The backend is chosen by the operator's ``backend=`` argument, else this connection's ``backend`` extra,
else the ``SMDIST_BACKEND`` environment variable, else ``local``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from airflow_smdist._compat import BaseHook, get_connection_extra

if TYPE_CHECKING:
    from airflow_smdist.backends.base import Backend

BACKENDS = ("local", "sagemaker")


def resolve_backend_name(backend: str | None, extra: dict[str, Any]) -> str:
    name = backend or extra.get("backend") or os.environ.get("SMDIST_BACKEND") or "local"
    if name not in BACKENDS:
        from airflow_smdist.specs.errors import SpecError

        raise SpecError("backend", f"{name!r} is not a backend.", f"use one of {BACKENDS}.")
    return name


class SmdistHook(BaseHook):
    conn_name_attr = "smdist_conn_id"
    default_conn_name = "smdist_default"
    conn_type = "smdist"
    hook_name = "SageMaker distributed computing (smdist)"

    def __init__(self, smdist_conn_id: str | None = default_conn_name, *, aws_conn_id: str | None = None,
                 region_name: str | None = None) -> None:
        super().__init__()
        self.smdist_conn_id = smdist_conn_id
        self._aws_conn_id = aws_conn_id
        self._region_name = region_name
        self._extra: dict[str, Any] | None = None

    # The connection form. Airflow >= 3.2 reads it from the provider info (airflow_smdist.CONNECTION_FIELDS
    # and CONNECTION_UI_FIELD_BEHAVIOUR, without calling these); Airflow 2.x calls these two methods.
    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        from airflow_smdist import CONNECTION_UI_FIELD_BEHAVIOUR as behaviour

        return {"hidden_fields": list(behaviour["hidden-fields"]), "relabeling": dict(behaviour["relabeling"]),
                "placeholders": dict(behaviour["placeholders"])}

    @classmethod
    def get_connection_form_widgets(cls) -> dict[str, Any]:
        """The same fields as the provider info's ``conn-fields``, as Airflow 2.x's form widgets."""
        from flask_appbuilder.fieldwidgets import BS3TextFieldWidget
        from flask_babel import lazy_gettext
        from wtforms import StringField
        from wtforms.validators import Optional, any_of

        from airflow_smdist import CONNECTION_FIELDS

        widgets = {}
        for name, field in CONNECTION_FIELDS.items():
            choices = field["schema"].get("enum")
            validators = [Optional(), any_of(choices)] if choices else [Optional()]
            widgets[name] = StringField(lazy_gettext(field["label"]), description=field["description"],
                                        validators=validators, widget=BS3TextFieldWidget())
        return widgets

    @property
    def extra(self) -> dict[str, Any]:
        if self._extra is None:
            extra = get_connection_extra(self.smdist_conn_id)
            # forms that store a field under its prefixed widget name ("extra__smdist__backend")
            prefix = f"extra__{self.conn_type}__"
            for key, value in list(extra.items()):
                if key.startswith(prefix) and value not in (None, ""):
                    extra.setdefault(key[len(prefix):], value)
            self._extra = {k: v for k, v in extra.items() if v not in (None, "")}
        return self._extra

    @property
    def aws_conn_id(self) -> str | None:
        return self._aws_conn_id or self.extra.get("aws_conn_id") or "aws_default"

    @property
    def region_name(self) -> str | None:
        return self._region_name or self.extra.get("region_name") or os.environ.get("AWS_DEFAULT_REGION")

    def backend_name(self, backend: str | None = None) -> str:
        return resolve_backend_name(backend, self.extra)

    def get_backend(self, backend: str | None = None) -> Backend:
        from airflow_smdist.backends.factory import make_backend

        return make_backend(self.backend_name(backend), aws_conn_id=self.aws_conn_id, region_name=self.region_name,
                            extra=self.extra)

    def get_conn(self) -> Backend:
        return self.get_backend()

    def test_connection(self) -> tuple[bool, str]:
        try:
            backend = self.get_backend()
        except Exception as e:  # noqa: BLE001
            return False, str(e)
        return True, f"backend {backend.name!r} is ready"
