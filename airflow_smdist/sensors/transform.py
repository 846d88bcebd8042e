"""Wait for batch inference jobs started elsewhere (e.g. an operator with wait_for_completion=False)."""

from __future__ import annotations

from typing import Any, Sequence

from airflow_smdist._compat import AirflowException, BaseSensorOperator
from airflow_smdist.backends.base import OPERATIONS, TERMINAL_STATES


class SageMakerShardedBatchInferenceSensor(BaseSensorOperator):
    """Succeeds when every job in ``job_names`` (transform jobs, or processing jobs with
    ``kind='processing'``) is Completed; fails with their FailureReasons as soon as one ends Failed or Stopped.

    With ``input_uri`` and ``output_uri`` it then runs the completeness check (every input object needs its
    ``<key>.out``, record counts matched where countable), writes the manifest beside the outputs and
    returns its summary via XCom (failing, naming the incomplete objects, if any is missing); otherwise it
    returns the jobs' small results. Works on both backends.
    """

    template_fields: Sequence[str] = ("job_names", "backend", "input_uri", "output_uri")

    def __init__(self, *, job_names: str | list[str], kind: str = "transform", backend: str | None = None,
                 input_uri: str | None = None, output_uri: str | None = None,
                 record_settings: dict[str, Any] | None = None, check_records: bool | None = None,
                 smdist_conn_id: str | None = "smdist_default", aws_conn_id: str | None = None,
                 region_name: str | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("poke_interval", 30)
        super().__init__(**kwargs)
        self.job_names = job_names
        self.kind = kind
        self.backend = backend
        self.input_uri = input_uri
        self.output_uri = output_uri
        self.record_settings = dict(record_settings or {"content_type": "text/csv", "split_type": "Line",
                                                        "batch_strategy": "MultiRecord", "assemble_with": "Line"})
        self.check_records = check_records
        self.smdist_conn_id = smdist_conn_id
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name

    def poke(self, context: Any):
        from airflow_smdist._compat import PokeReturnValue
        from airflow_smdist.hooks.smdist import SmdistHook

        if self.kind not in ("transform", "processing"):
            raise AirflowException(f"kind {self.kind!r}: use 'transform' or 'processing'")
        backend = SmdistHook(self.smdist_conn_id, aws_conn_id=self.aws_conn_id,
                             region_name=self.region_name).get_backend(self.backend)
        names = [self.job_names] if isinstance(self.job_names, str) else list(self.job_names)
        keys = OPERATIONS[self.kind]
        results, waiting, failed = [], [], []
        for name in names:
            d = backend.describe(self.kind, name)
            status = d[keys["status_key"]]
            results.append({"job_name": name, "kind": self.kind, "status": status,
                            **({"failure_reason": d["FailureReason"]} if d.get("FailureReason") else {})})
            if status not in TERMINAL_STATES:
                waiting.append(name)
            elif status != "Completed":
                failed.append(f"{self.kind} job {name} ended {status}: {d.get('FailureReason') or status}")
        if failed:
            raise AirflowException("; ".join(failed))
        if waiting:
            self.log.info("%d of %d %s job(s) still running: %s", len(waiting), len(names), self.kind,
                          ", ".join(waiting))
            return False
        if not (self.input_uri and self.output_uri):
            return PokeReturnValue(is_done=True, xcom_value={"jobs": results})
        from airflow_smdist.operators.transform import completeness, list_inputs, storage_for, write_manifest

        storage = storage_for(backend)
        objects = list_inputs(storage, self.input_uri, self.output_uri)
        report = completeness(storage, objects, self.output_uri, self.record_settings, self.check_records)
        summary = write_manifest(storage, report, input_uri=self.input_uri, output_uri=self.output_uri,
                                 fan_out=self.kind, jobs=results, settings=self.record_settings)
        if not report.complete:
            raise AirflowException(report.describe() + f"\nManifest: {summary['manifest_uri']}")
        return PokeReturnValue(is_done=True, xcom_value=summary)
