"""The request builders' arguments as plain data (name, default, annotation), for the operators.

The builders declare their arguments once, as dataclass fields (the sections of :mod:`.training`, the
search of :mod:`.tuning`, the argument classes of :mod:`.processing`), and the operators derive their
signatures and template fields from them. Importing those modules costs milliseconds (a dataclass compiles its
methods when its module is imported), which every DAG file using an operator would pay at every parse. This
module holds the same facts as literals, so an operator module imports no builder: the builders are imported
when a job is built.
(Measured when tuning joined the tables: importing the three builders costs about as much CPU as the four
operator modules themselves, 40-46 ms against 35-43 ms on a shared 2-core machine, so a DAG file would pay
twice the provider's import at every parse without these tables.)

The tables are generated: ``python -m airflow_smdist.specs.arguments`` rewrites them from the dataclasses, and
``tests/unit/test_spec_arguments.py`` fails when they differ.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

#: The default of a required argument (the value ``dataclasses.Field.default`` has when there is none).
REQUIRED: Any = dataclasses.MISSING


class Argument(NamedTuple):
    """One builder argument, with the attributes of the ``dataclasses.Field`` it mirrors."""

    name: str
    default: Any
    type: str


def arguments_of(declaration: type) -> tuple[Argument, ...]:
    """The arguments a class declares as its own annotated attributes, in order, each attribute's value being
    its default (no value: required): for an operator whose arguments are no builder's, declared once on a
    class the operator inherits (so the attributes are typed where the operator reads them)."""
    import inspect

    return tuple(Argument(name, vars(declaration).get(name, REQUIRED), str(annotation))
                 for name, annotation in inspect.get_annotations(declaration).items())


# -- generated from the builders' dataclasses: do not edit by hand ------------------------------------------
TRAINING: tuple[Argument, ...] = (
    Argument("role", REQUIRED, "str"),
    Argument("output_path", REQUIRED, "str"),
    Argument("hyperparameters", None, "dict[str, Any] | None"),
    Argument("metric_definitions", None, "list[dict[str, str]] | None"),
    Argument("environment", None, "dict[str, Any] | None"),
    Argument("tags", None, "dict[str, str] | list[dict[str, str]] | None"),
    Argument("image_uri", None, "str | None"),
    Argument("algorithm", None, "str | None"),
    Argument("algorithm_version", None, "str | None"),
    Argument("framework", None, "str | None"),
    Argument("framework_version", None, "str | None"),
    Argument("py_version", None, "str | None"),
    Argument("base_framework_version", None, "str | None"),
    Argument("instance_type", 'ml.m5.xlarge', "str | None"),
    Argument("instance_count", 1, "int | str"),
    Argument("instance_groups", None, "list[dict[str, Any]] | None"),
    Argument("volume_size", 30, "int | str"),
    Argument("entry_point", None, "str | None"),
    Argument("source_dir", None, "str | None"),
    Argument("code_location", None, "str | None"),
    Argument("container_log_level", 20, "int"),
    Argument("model_dir", None, "str | bool | None"),
    Argument("distribution", None, "dict[str, Any] | None"),
    Argument("distributed", None, "Any"),
    Argument("lr_scaling", None, "dict[str, Any] | None"),
    Argument("inputs", None, "dict[str, Any] | None"),
    Argument("input_mode", 'File', "str"),
    Argument("max_run", 86400, "int | str"),
    Argument("use_spot_instances", False, "bool"),
    Argument("max_wait", None, "int | str | None"),
    Argument("max_retry_attempts", None, "int | str | None"),
    Argument("checkpoint_s3_uri", None, "str | None"),
    Argument("checkpoint_local_path", None, "str | None"),
    Argument("subnets", None, "list[str] | None"),
    Argument("security_group_ids", None, "list[str] | None"),
    Argument("enable_network_isolation", False, "bool"),
    Argument("encrypt_inter_container_traffic", False, "bool"),
)
TUNING: tuple[Argument, ...] = (
    Argument("objective_metric_name", REQUIRED, "str"),
    Argument("objective_type", 'Maximize', "str"),
    Argument("hyperparameter_ranges", REQUIRED, "dict[str, Any]"),
    Argument("strategy", 'Bayesian', "str"),
    Argument("max_jobs", None, "int | str | None"),
    Argument("max_parallel_jobs", 1, "int | str"),
    Argument("max_runtime", None, "int | str | None"),
    Argument("early_stopping_type", 'Off', "str"),
    Argument("hyperband_min_resource", None, "int | str | None"),
    Argument("hyperband_max_resource", None, "int | str | None"),
    Argument("warm_start_parents", None, "list[str] | str | None"),
    Argument("warm_start_type", 'IdenticalDataAndAlgorithm', "str"),
    Argument("target_objective_value", None, "float | str | None"),
    Argument("max_jobs_not_improving", None, "int | str | None"),
    Argument("complete_on_convergence", None, "bool | None"),
    Argument("random_seed", None, "int | str | None"),
)
PROCESSING: tuple[Argument, ...] = (
    Argument("role", REQUIRED, "str"),
    Argument("instance_type", 'ml.m5.xlarge', "str"),
    Argument("instance_count", 1, "int | str"),
    Argument("inputs", None, "Any"),
    Argument("outputs", None, "Any"),
    Argument("arguments", None, "list[Any] | None"),
    Argument("code_location", None, "str | None"),
    Argument("volume_size_in_gb", 30, "int | str"),
    Argument("volume_kms_key", None, "str | None"),
    Argument("output_kms_key", None, "str | None"),
    Argument("max_runtime_in_seconds", None, "int | str | None"),
    Argument("env", None, "dict[str, str] | None"),
    Argument("network_config", None, "dict[str, Any] | None"),
    Argument("tags", None, "Any"),
    Argument("experiment_config", None, "dict[str, str] | None"),
)
PYSPARK: tuple[Argument, ...] = (
    Argument("role", REQUIRED, "str"),
    Argument("instance_type", 'ml.m5.xlarge', "str"),
    Argument("instance_count", 1, "int | str"),
    Argument("inputs", None, "Any"),
    Argument("outputs", None, "Any"),
    Argument("arguments", None, "list[Any] | None"),
    Argument("code_location", None, "str | None"),
    Argument("volume_size_in_gb", 30, "int | str"),
    Argument("volume_kms_key", None, "str | None"),
    Argument("output_kms_key", None, "str | None"),
    Argument("max_runtime_in_seconds", None, "int | str | None"),
    Argument("env", None, "dict[str, str] | None"),
    Argument("network_config", None, "dict[str, Any] | None"),
    Argument("tags", None, "Any"),
    Argument("experiment_config", None, "dict[str, str] | None"),
    Argument("submit_app", REQUIRED, "str"),
    Argument("framework_version", None, "str | None"),
    Argument("py_version", None, "str | None"),
    Argument("container_version", None, "str | None"),
    Argument("image_uri", None, "str | None"),
    Argument("submit_py_files", None, "list[str] | None"),
    Argument("submit_jars", None, "list[str] | None"),
    Argument("submit_files", None, "list[str] | None"),
    Argument("configuration", None, "Any"),
    Argument("spark_event_logs_s3_uri", None, "str | None"),
    Argument("dependency_location", None, "str | None"),
    Argument("configuration_location", None, "str | None"),
)
SCRIPT: tuple[Argument, ...] = (
    Argument("role", REQUIRED, "str"),
    Argument("instance_type", 'ml.m5.xlarge', "str"),
    Argument("instance_count", 1, "int | str"),
    Argument("inputs", None, "Any"),
    Argument("outputs", None, "Any"),
    Argument("arguments", None, "list[Any] | None"),
    Argument("code_location", None, "str | None"),
    Argument("volume_size_in_gb", 30, "int | str"),
    Argument("volume_kms_key", None, "str | None"),
    Argument("output_kms_key", None, "str | None"),
    Argument("max_runtime_in_seconds", None, "int | str | None"),
    Argument("env", None, "dict[str, str] | None"),
    Argument("network_config", None, "dict[str, Any] | None"),
    Argument("tags", None, "Any"),
    Argument("experiment_config", None, "dict[str, str] | None"),
    Argument("image_uri", None, "str | None"),
    Argument("framework", None, "str | None"),
    Argument("framework_version", None, "str | None"),
    Argument("py_version", None, "str | None"),
    Argument("code", None, "str | None"),
    Argument("source_dir", None, "str | None"),
    Argument("command", None, "list[str] | None"),
    Argument("entrypoint", None, "list[str] | None"),
)
# -- end of generated tables --------------------------------------------------------------------------------

BEGIN = "# -- generated from the builders' dataclasses"
END = "# -- end of generated tables"


def _sources() -> dict[str, tuple[dataclasses.Field[Any], ...]]:
    """Each table's fields, from the builders (imported here only)."""
    from airflow_smdist.specs import processing, training, tuning

    return {"TRAINING": tuple(training.training_fields()),
            "TUNING": dataclasses.fields(tuning.TuningSearch),
            "PROCESSING": dataclasses.fields(processing.ProcessingArguments),
            "PYSPARK": dataclasses.fields(processing.PySparkArguments),
            "SCRIPT": dataclasses.fields(processing.ScriptArguments)}


def _literal(f: dataclasses.Field[Any]) -> str:
    if f.default_factory is not dataclasses.MISSING:
        raise TypeError(f"builder argument {f.name!r} has a default_factory: give it a literal default")
    if f.default is dataclasses.MISSING:
        return "REQUIRED"
    if f.default is not None and not isinstance(f.default, (bool, int, float, str)):
        raise TypeError(f"builder argument {f.name!r}: default {f.default!r} is not a literal")
    return repr(f.default)


def generated_tables() -> str:
    """The generated part of this module, as the dataclasses say it should read."""
    lines = []
    for table, fields in _sources().items():
        lines.append(f"{table}: tuple[Argument, ...] = (")
        lines += [f'    Argument("{f.name}", {_literal(f)}, "{f.type}"),' for f in fields]
        lines.append(")")
    return "\n".join(lines) + "\n"


def current_tables(text: str) -> str:
    """The generated part of this module's source ``text``."""
    start = text.index("\n", text.index(BEGIN)) + 1
    return text[start:text.index(END)]


def main() -> None:
    """Rewrite this module's tables from the dataclasses."""
    path = __file__
    with open(path) as f:
        text = f.read()
    old = current_tables(text)
    with open(path, "w") as f:
        f.write(text.replace(old, generated_tables(), 1))


if __name__ == "__main__":
    main()
