"""Wait for batch inference jobs started elsewhere (e.g. an operator with wait_for_completion=False)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from typing import TYPE_CHECKING

from airflow_smdist._compat import AirflowException
from airflow_smdist.sensors.base import SmdistSensorBase

if TYPE_CHECKING:
    from airflow_smdist._compat import PokeReturnValue


class SageMakerShardedBatchInferenceSensor(SmdistSensorBase):
    """Succeeds when every job in ``job_names`` (transform jobs, or processing jobs with
    ``kind='processing'``) is Completed; fails with their FailureReasons as soon as one ends Failed or Stopped.

    With ``input_uri`` and ``output_uri`` it then runs the completeness check (every input object needs its
    ``<key>.out``, record counts matched where countable), writes the manifest beside the outputs (with what
    made each output: the model and input versions the operator recorded when it started the job) and
    returns its summary via XCom (failing, naming the incomplete objects, if any is missing); otherwise it
    returns the jobs' small results. Works on both backends.
    """

    template_fields: Sequence[str] = ("job_names", "backend", "input_uri", "output_uri")

    def __init__(self, *, job_names: str | list[str], kind: str = "transform", backend: str | None = None,
                 input_uri: str | None = None, output_uri: str | None = None,
                 record_settings: dict[str, Any] | None = None, check_records: bool | None = None,
                 **kwargs: Any) -> None:
        super().__init__(backend=backend, **kwargs)
        self.job_names = job_names
        self.kind = kind
        self.input_uri = input_uri
        self.output_uri = output_uri
        self.record_settings = dict(record_settings or {"content_type": "text/csv", "split_type": "Line",
                                                        "batch_strategy": "MultiRecord", "assemble_with": "Line"})
        self.check_records = check_records

    def poke(self, context: Any) -> bool | PokeReturnValue:
        from airflow_smdist._compat import PokeReturnValue

        if self.kind not in ("transform", "processing"):
            raise AirflowException(f"kind {self.kind!r}: use 'transform' or 'processing'")
        lifecycle = self.lifecycle
        backend = lifecycle.backend
        names = [self.job_names] if isinstance(self.job_names, str) else list(self.job_names)
        descriptions = self.describe_all(names)
        if descriptions is None:
            return False
        results, waiting, failed = [], [], []
        for name, d in zip(names, descriptions):
            status = lifecycle.status(d)
            results.append({"job_name": name, "kind": self.kind, "status": status,
                            **({"failure_reason": d["FailureReason"]} if d.get("FailureReason") else {})})
            if not lifecycle.ended(d):
                waiting.append(name)
            elif (error := lifecycle.failure(d)) is not None:
                failed.append(str(error))
        if failed:
            raise AirflowException("; ".join(failed))
        if waiting:
            self.log.info("%d of %d %s job(s) still running: %s", len(waiting), len(names), self.kind,
                          ", ".join(waiting))
            return False
        if not (self.input_uri and self.output_uri):
            return PokeReturnValue(is_done=True, xcom_value={"jobs": results})
        from airflow_smdist.ledger import (
            completeness,
            list_inputs,
            made_by_jobs,
            outcome_error,
            read_provenance,
            storage_for,
            write_manifest,
        )

        storage = storage_for(backend)
        objects = list_inputs(storage, self.input_uri, self.output_uri)
        # what made each output: the last manifest's records, then the records the jobs were started with
        provenance = {**read_provenance(storage, self.output_uri), **made_by_jobs(storage, self.output_uri, names)}
        report = completeness(storage, objects, self.output_uri, self.record_settings, self.check_records,
                              provenance=provenance)
        summary = write_manifest(storage, report, input_uri=self.input_uri, output_uri=self.output_uri,
                                 fan_out=self.kind, jobs=results, settings=self.record_settings)
        outcome = outcome_error(report, summary)
        if outcome is not None:
            raise outcome
        return PokeReturnValue(is_done=True, xcom_value=summary)
