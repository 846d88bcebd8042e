"""``tuning_request(...)``: a training job's arguments plus a search -> a validated CreateHyperParameterTuningJob.

Pure: no file is read or written and no call is made here. The training part is built by
:func:`airflow_smdist.specs.training.build_training` from the very arguments a training job takes (so a
DAG author tunes the job they already train), then turned into the ``HyperParameterTrainingJobDefinition``
the way the SageMaker SDK's ``HyperparameterTuner`` does: the tuned names leave the static hyperparameters,
``AlgorithmSpecification`` keeps image, input mode and ``MetricDefinitions``, everything else of the
training job (role, channels, output, resources, stopping condition, checkpoints, spot, VPC, environment)
is carried over, and the tags move to the tuning job (SageMaker propagates them to every trial).

The search: objective metric and type, parameter ranges (integer, continuous, categorical; scaling types
Auto, Linear, Logarithmic, ReverseLogarithmic), strategy (Bayesian, Random, Hyperband with min/max
resource, Grid), resource limits, early stopping, warm start, completion criteria and RandomSeed. The rules
SageMaker applies server side (docs/contracts.md §5) are checked here, with errors
that name the field and the fix: :func:`check_tuning_request` runs them over any request, so the local
backend applies the same rules to a request built elsewhere.
"""

from __future__ import annotations

import itertools
import json
import logging
import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from airflow_smdist.specs.errors import SpecError, SpecErrors, as_mapping, as_tags
from airflow_smdist.specs.validate import validate_request

log = logging.getLogger(__name__)

OPERATION = "CreateHyperParameterTuningJob"
STRATEGIES = ("Bayesian", "Random", "Hyperband", "Grid")
OBJECTIVE_TYPES = ("Maximize", "Minimize")
SCALING_TYPES = ("Auto", "Linear", "Logarithmic", "ReverseLogarithmic")
RANGE_KINDS = {"integer": "IntegerParameterRanges", "continuous": "ContinuousParameterRanges",
               "categorical": "CategoricalParameterRanges"}
WARM_START_TYPES = ("IdenticalDataAndAlgorithm", "TransferLearning")
#: Hyperband infers MaxResource from the first of these static hyperparameters (DG, HyperbandStrategyConfig)
EPOCH_KEYS = ("epochs", "numepochs", "n-epochs", "n_epochs", "num_epochs")
MAX_SEARCHABLE = 30  # DG: at most 30 hyperparameters searched in total
MAX_CATEGORICAL_VALUES = 30
HYPERBAND_MAX_RESOURCE = 20000
#: training request members a HyperParameterTrainingJobDefinition carries over unchanged
DEFINITION_KEYS = ("RoleArn", "InputDataConfig", "VpcConfig", "OutputDataConfig", "ResourceConfig",
                   "StoppingCondition", "EnableNetworkIsolation", "EnableInterContainerTrafficEncryption",
                   "EnableManagedSpotTraining", "CheckpointConfig", "RetryStrategy", "Environment")
ALGORITHM_KEYS = ("TrainingImage", "AlgorithmName", "TrainingInputMode", "MetricDefinitions")

_ALIASES = {"min": ("min", "min_value", "MinValue"), "max": ("max", "max_value", "MaxValue"),
            "scaling": ("scaling", "scaling_type", "ScalingType"), "values": ("values", "Values")}


@dataclass
class TuningPlan:
    """What the builder produced: the request, plus what the caller has to do and know about it."""

    request: dict[str, Any]
    #: the training job the definition was made from (its source_dir / source_uri are the caller's upload)
    training: Any = None
    advice: list[Any] = field(default_factory=list)
    #: Grid: the number of combinations (= MaxNumberOfTrainingJobs)
    combinations: int | None = None

    @property
    def source_dir(self) -> str | None:
        return self.training.source_dir if self.training else None

    @property
    def source_uri(self) -> str | None:
        return self.training.source_uri if self.training else None

    @property
    def entry_point(self) -> str | None:
        return self.training.entry_point if self.training else None

    @property
    def lr_scaling(self) -> Any:
        return self.training.lr_scaling if self.training else None

    @property
    def world_size(self) -> int:
        return self.training.world_size if self.training else 1


@dataclass(kw_only=True)
class TuningSearch:
    """The search of a tuning job: :func:`build_tuning`'s own arguments (the rest are the training job's),
    declared once here; the tuning operator's arguments and template fields are these fields (through the
    table :data:`airflow_smdist.specs.arguments.TUNING`). Defaults are the SageMaker SDK's."""

    objective_metric_name: str
    objective_type: str = "Maximize"
    hyperparameter_ranges: dict[str, Any]
    strategy: str = "Bayesian"
    max_jobs: int | str | None = None
    max_parallel_jobs: int | str = 1
    max_runtime: int | str | None = None
    early_stopping_type: str = "Off"
    hyperband_min_resource: int | str | None = None
    hyperband_max_resource: int | str | None = None
    warm_start_parents: list[str] | str | None = None
    warm_start_type: str = "IdenticalDataAndAlgorithm"
    target_objective_value: float | str | None = None
    max_jobs_not_improving: int | str | None = None
    complete_on_convergence: bool | None = None
    random_seed: int | str | None = None

    @classmethod
    def take(cls, arguments: dict[str, Any]) -> TuningSearch:
        """The search's arguments popped from ``arguments`` (what remains is the training job's)."""
        names = [f.name for f in dataclasses.fields(cls)]
        missing = [f.name for f in dataclasses.fields(cls)
                   if f.default is dataclasses.MISSING and f.name not in arguments]
        if missing:
            raise TypeError(f"build_tuning() missing required keyword argument {missing[0]!r}")
        return cls(**{name: arguments.pop(name) for name in names if name in arguments})


# ---- small parsers ---------------------------------------------------------------------------------------
def _choice(value: Any, allowed: tuple[str, ...], name: str) -> str:
    """Case-insensitive pick from ``allowed`` ("bayesian" -> "Bayesian")."""
    if isinstance(value, str):
        for a in allowed:
            if value.strip().lower() == a.lower():
                return a
    import difflib

    close = difflib.get_close_matches(str(value), allowed, n=1)
    raise SpecError(name, f"{value!r} is not one of {', '.join(allowed)}.",
                    f"did you mean '{close[0]}'?" if close else f"use one of {allowed}.")


def _int_arg(value: Any, name: str, minimum: int | None = None) -> int:
    """Jinja renders numbers as strings: accept "2" for 2, reject "two" and 2.5 with the field named."""
    from airflow_smdist.specs.training import _as_int

    return _as_int(value, name, minimum)


def _number(text: Any, name: str, integer: bool) -> float | int:
    """A range bound: "0.1" / 0.1 -> 0.1; for an integer range "3" / 3 -> 3 (3.5 is an error)."""
    if isinstance(text, bool):
        raise SpecError(name, f"{text!r} is a boolean, not a number.", "give a number.")
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise SpecError(name, f"{text!r} is not a number.", "give a number, e.g. '0.01'.") from None
    if not math.isfinite(value):
        raise SpecError(name, f"{text!r} is not a finite number.", "give a finite bound.")
    if integer:
        if value != int(value):
            raise SpecError(name, f"{text!r} is not an integer, but the range is an integer range.",
                            "give whole numbers, or make it a continuous range.")
        return int(value)
    return value


def _bound_text(value: Any, integer: bool) -> str:
    """The string the API carries for a bound (the SDK's ``str(min_value)``)."""
    if integer:
        return str(int(float(value)))
    if isinstance(value, str):
        return value.strip()
    return repr(float(value)) if isinstance(value, float) else str(value)


def _get(spec: dict[str, Any], key: str) -> Any:
    for alias in _ALIASES[key]:
        if alias in spec:
            return spec[alias]
    return None


def encode_categorical(value: Any, framework: bool) -> str:
    """A categorical value as the SageMaker SDK v2's ``HyperparameterTuner`` sends it. ``CategoricalParameter``
    turns every value into its ``str`` first; only for Framework estimators (``framework=`` here: a Deep
    Learning Container, e.g. ``PyTorch``, ``TensorFlow``) does the tuner then JSON-encode that string
    (``as_json_range``), so ``32`` is sent as ``"\\"32\\""`` and ``"adam"`` as ``"\\"adam\\""``: the training
    toolkit json-decodes every hyperparameter, and the trial's script receives the *string* ``32``. For every
    other estimator the plain text is sent (``"32"``, ``"adam"``): built-in algorithms, and the user's own image
    (``image_uri``) even in script mode with an ``entry_point`` (the SDK's plain ``Estimator``, whose static
    hyperparameters are still JSON-encoded), where the toolkit decodes ``"32"`` to the number 32. Booleans are
    sent as ``"true"``/``"false"`` there (the SDK sends ``"True"``), as this project sends static
    hyperparameters to built-in algorithms."""
    if framework:
        return json.dumps(value if isinstance(value, str) else str(value))
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _numeric_entry(name: str, spec: dict[str, Any], kind: str, where: str) -> dict[str, Any]:
    """An integer or continuous range in the API's shape."""
    lo, hi = _get(spec, "min"), _get(spec, "max")
    if lo is None or hi is None:
        raise SpecError(where, f"a {kind} range needs both min and max.", "give {'min': .., 'max': ..}.")
    integer = kind == "integer"
    entry = {"Name": name, "MinValue": _bound_text(_number(lo, f"{where}.min", integer), integer),
             "MaxValue": _bound_text(_number(hi, f"{where}.max", integer), integer)}
    if not integer:  # keep the author's spelling of the bounds ("1e-4")
        entry["MinValue"], entry["MaxValue"] = _bound_text(lo, False), _bound_text(hi, False)
    scaling = _get(spec, "scaling")
    entry["ScalingType"] = "Auto" if scaling is None else _choice(scaling, SCALING_TYPES, f"{where}.scaling")
    return entry


def parameter_ranges(ranges: dict[str, Any], *, framework: bool) -> dict[str, list[dict[str, Any]]]:
    """``{"learning_rate": {"type": "continuous", "min": 1e-3, "max": 0.3, "scaling": "Logarithmic"},
    "max_depth": {"type": "integer", "min": 2, "max": 8}, "loss": ["squared_error", "huber"]}`` -> the
    API's ``ParameterRanges``. A list is a categorical range; a dict without ``type`` is an integer range
    when both bounds are integers, else continuous. ``min_value``/``max_value``/``scaling_type`` (the SDK's
    names) are accepted too. A dict that already has the API's keys (``IntegerParameterRanges``, ...) is
    taken as it is. ``framework``: the trials run a framework's image (``framework=``), whose categorical values
    are JSON-encoded (see :func:`encode_categorical`)."""
    ranges = as_mapping(ranges, "hyperparameter_ranges", "{'learning_rate': {'type': 'continuous', 'min': 0.001, "
                        "'max': 0.3}}")
    if not ranges:
        raise SpecError("hyperparameter_ranges", "at least one hyperparameter range is required.",
                        "give e.g. {'learning_rate': {'type': 'continuous', 'min': 0.001, 'max': 0.3}}.")
    api_keys = set(RANGE_KINDS.values()) | {"AutoParameters"}
    if set(ranges) & api_keys:
        unknown = set(ranges) - api_keys
        if unknown:
            raise SpecError(f"hyperparameter_ranges.{sorted(unknown)[0]}", "mixes API keys and hyperparameter names.",
                            "give either the API's ParameterRanges or {name: range}, not both.")
        return {k: [dict(r) for r in v] for k, v in ranges.items() if v}
    out: dict[str, list[dict[str, Any]]] = {}
    for name, spec in ranges.items():
        where = f"hyperparameter_ranges[{name!r}]"
        if not isinstance(name, str) or not name:
            raise SpecError(where, "hyperparameter names must be non-empty strings.")
        if isinstance(spec, (list, tuple)):
            spec = {"type": "categorical", "values": list(spec)}
        if not isinstance(spec, dict):
            raise SpecError(where, f"{spec!r} is not a range.",
                            "give a list of values (categorical) or "
                            "{'type': 'continuous'|'integer', 'min': .., 'max': ..}.")
        kind = spec.get("type")
        if kind is None:
            if _get(spec, "values") is not None:
                kind = "categorical"
            else:
                lo, hi = _get(spec, "min"), _get(spec, "max")
                both_int = all(isinstance(v, int) and not isinstance(v, bool) for v in (lo, hi))
                kind = "integer" if both_int else "continuous"
        kind = str(kind).lower()
        if kind not in RANGE_KINDS:
            raise SpecError(f"{where}.type", f"{spec.get('type')!r} is not a range type.",
                            f"use one of {tuple(RANGE_KINDS)}.")
        known = {"type", *(a for key in ("min", "max", "scaling", "values") for a in _ALIASES[key])}
        extra = set(spec) - known
        if extra:
            raise SpecError(f"{where}.{sorted(extra)[0]}", "is not a range setting.",
                            "use type, min, max, scaling (continuous/integer) or values (categorical).")
        if kind == "categorical":
            values = _get(spec, "values")
            if not isinstance(values, (list, tuple)) or not values:
                raise SpecError(f"{where}.values", "a categorical range needs a non-empty list of values.",
                                "give e.g. ['adam', 'sgd'].")
            entry = {"Name": name, "Values": [encode_categorical(v, framework) for v in values]}
        else:
            entry = _numeric_entry(name, spec, kind, where)
        out.setdefault(RANGE_KINDS[kind], []).append(entry)
    return out


def grid_size(ranges: dict[str, list[dict[str, Any]]]) -> int:
    """Combinations of the categorical ranges (what Grid runs)."""
    return math.prod(len(r["Values"]) for r in ranges.get("CategoricalParameterRanges", []))


def grid_combinations(ranges: dict[str, list[dict[str, Any]]]) -> list[dict[str, str]]:
    """Every combination of the categorical ranges, in range order (the first range varies slowest)."""
    cats = ranges.get("CategoricalParameterRanges", [])
    names = [r["Name"] for r in cats]
    return [dict(zip(names, combo)) for combo in itertools.product(*(r["Values"] for r in cats))]


def tuned_names(ranges: dict[str, list[dict[str, Any]]]) -> list[str]:
    return [r["Name"] for key in (*RANGE_KINDS.values(), "AutoParameters") for r in ranges.get(key, [])]


def infer_max_resource(static_hyperparameters: dict[str, str]) -> tuple[int, str] | None:
    """(MaxResource, the hyperparameter it came from), as SageMaker infers it for Hyperband, or None."""
    for key in EPOCH_KEYS:
        if key in (static_hyperparameters or {}):
            raw = static_hyperparameters[key]
            try:
                value = json.loads(raw) if isinstance(raw, str) else raw
                if isinstance(value, str):
                    value = float(value)
                if value == int(value) and int(value) >= 1:
                    return int(value), key
            except (TypeError, ValueError):
                pass
    return None


def _numeric_range_errors(r: dict[str, Any], path: str, integer: bool) -> list[SpecError]:
    """Bounds and scaling of one integer or continuous range."""
    name = r.get("Name", "")
    try:
        lo = _number(r.get("MinValue"), f"{path}.MinValue", integer)
        hi = _number(r.get("MaxValue"), f"{path}.MaxValue", integer)
    except SpecError as e:
        return [e]
    label = f"{path} ({name})"
    if lo > hi:
        return [SpecError(label, f"MinValue {r['MinValue']} is greater than MaxValue {r['MaxValue']}.",
                          "swap the bounds so that MinValue <= MaxValue.")]
    errors = []
    scaling = r.get("ScalingType", "Auto")
    if scaling == "Logarithmic" and lo <= 0:
        errors.append(SpecError(label, f"Logarithmic scaling needs values above 0, but MinValue is {r['MinValue']}.",
                                "raise MinValue above 0, or use Linear scaling."))
    if scaling == "ReverseLogarithmic":
        if integer:
            errors.append(SpecError(label, "ReverseLogarithmic scaling applies to continuous ranges only.",
                                    "use Linear or Logarithmic for an integer range, or make it continuous."))
        elif lo < 0 or hi >= 1:
            errors.append(SpecError(label, f"ReverseLogarithmic scaling needs 0 <= value < 1, but the range is "
                                    f"[{r['MinValue']}, {r['MaxValue']}].",
                                    "keep the range within [0, 1) (e.g. a momentum of 0.9-0.999), or use Linear."))
    return errors


def _categorical_range_errors(r: dict[str, Any], path: str) -> list[SpecError]:
    errors = []
    values = r.get("Values") or []
    if len(values) > MAX_CATEGORICAL_VALUES:
        errors.append(SpecError(path, f"has {len(values)} values; at most {MAX_CATEGORICAL_VALUES} are allowed.",
                                "give at most 30 values, or make it an integer/continuous range."))
    dup = sorted({v for v in values if values.count(v) > 1})
    if dup:
        errors.append(SpecError(path, f"lists {dup[0]!r} more than once.", "give each value once."))
    return errors


def _name_errors(names: list[str], where: str) -> list[SpecError]:
    """Each hyperparameter tuned once, named, not one SageMaker sets; at most MAX_SEARCHABLE."""
    errors: list[SpecError] = []
    for name in sorted({n for n in names if names.count(n) > 1}):
        errors.append(SpecError(f"{where} ({name})", f"hyperparameter {name!r} has more than one range.",
                                "give each hyperparameter one range."))
    for name in names:
        if not name:
            errors.append(SpecError(where, "a range has an empty Name.", "name the hyperparameter it tunes."))
        elif name.startswith("sagemaker_") or name == "_tuning_objective_metric":
            errors.append(SpecError(f"{where} ({name})", "is set by SageMaker and the training toolkit, not tunable.",
                                    "tune your own hyperparameters only."))
    if len(names) > MAX_SEARCHABLE:
        errors.append(SpecError(where,
                                f"{len(names)} hyperparameters are searched; at most {MAX_SEARCHABLE} are allowed.",
                                "tune at most 30 hyperparameters; fix the others as static hyperparameters."))
    return errors


# ---- the rules, over the API shape (shared by the builder and the local backend) --------------------------
def range_errors(ranges: dict[str, list[dict[str, Any]]], where: str = "HyperParameterTuningJobConfig.ParameterRanges"
                 ) -> list[SpecError]:
    """What SageMaker rejects in ParameterRanges that botocore's model does not: bounds, scaling, names."""
    errors: list[SpecError] = []
    names: list[str] = []
    for key in ("IntegerParameterRanges", "ContinuousParameterRanges"):
        for i, r in enumerate(ranges.get(key, []) or []):
            names.append(r.get("Name", ""))
            errors += _numeric_range_errors(r, f"{where}.{key}[{i}]", key == "IntegerParameterRanges")
    for i, r in enumerate(ranges.get("CategoricalParameterRanges", []) or []):
        names.append(r.get("Name", ""))
        errors += _categorical_range_errors(r, f"{where}.CategoricalParameterRanges[{i}] ({r.get('Name', '')})")
    for r in ranges.get("AutoParameters", []) or []:
        names.append(r.get("Name", ""))
    return errors + _name_errors(names, where)


def definition_errors(definition: dict[str, Any], ranges: dict[str, Any], objective: dict[str, Any] | None,
                      where: str) -> list[SpecError]:
    errors: list[SpecError] = []
    static = definition.get("StaticHyperParameters") or {}
    for name in tuned_names(ranges):
        if name in static:
            errors.append(SpecError(f"{where}.StaticHyperParameters[{name!r}]", "is also a tuned hyperparameter.",
                                    "drop it from the static hyperparameters (the tuning job sets it per trial)."))
    spec = definition.get("AlgorithmSpecification") or {}
    metric_names = [m.get("Name") for m in spec.get("MetricDefinitions") or []]
    obj_name = (objective or {}).get("MetricName")
    builtin = not metric_names and "sagemaker_program" not in static
    if obj_name and not builtin and obj_name not in metric_names:
        errors.append(SpecError(f"{where}.AlgorithmSpecification.MetricDefinitions",
                                f"no metric definition is named {obj_name!r}, the objective metric"
                                + (f" (defined: {', '.join(metric_names)})." if metric_names else "."),
                                f"add {{'Name': '{obj_name}', 'Regex': '...'}} to metric_definitions: "
                                "SageMaker reads the objective from the training job's logs with that regex."))
    return errors


def _limit_errors(cfg: dict[str, Any], strategy: Any, all_ranges: list[tuple[str, dict[str, Any]]],
                  where: str) -> list[SpecError]:
    """Grid takes categorical ranges only and runs every combination; other strategies need a limit."""
    errors: list[SpecError] = []
    limits = cfg.get("ResourceLimits") or {}
    max_jobs = limits.get("MaxNumberOfTrainingJobs")
    if strategy == "Grid":
        for path, r in all_ranges:
            other = [k for k in ("IntegerParameterRanges", "ContinuousParameterRanges", "AutoParameters") if r.get(k)]
            if other:
                bad = [x["Name"] for k in other for x in r[k]]
                names = bad[0] + " is" if len(bad) == 1 else ", ".join(bad[:-1]) + f" and {bad[-1]} are"
                errors.append(SpecError(f"{path}.{other[0]}", f"Grid search takes categorical ranges only ({names} "
                                        "not categorical).",
                                        "give each a list of values (a categorical range), or use Random/Bayesian."))
            elif r.get("CategoricalParameterRanges"):
                combos = grid_size(r)
                if max_jobs is not None and max_jobs != combos:
                    errors.append(SpecError(f"{where}.ResourceLimits.MaxNumberOfTrainingJobs",
                                            f"is {max_jobs}, but Grid runs every combination: {combos}.",
                                            f"omit it (it is computed as {combos}) or set it to {combos}."))
    elif max_jobs is None and not cfg.get("TuningJobCompletionCriteria"):
        errors.append(SpecError(f"{where}.ResourceLimits.MaxNumberOfTrainingJobs",
                                f"is required with the {strategy} strategy.", "give max_jobs (e.g. 20)."))
    return errors


def _hyperband_errors(cfg: dict[str, Any], strategy: Any, definitions: list[dict[str, Any]],
                      where: str) -> list[SpecError]:
    """StrategyConfig only with Hyperband; Hyperband without early stopping, with MaxResource known."""
    errors: list[SpecError] = []
    strategy_config = cfg.get("StrategyConfig") or {}
    if strategy_config and strategy != "Hyperband":
        errors.append(SpecError(f"{where}.StrategyConfig", f"only applies to the Hyperband strategy, not {strategy}.",
                                "drop it, or use strategy='Hyperband'."))
    if strategy == "Hyperband":
        if cfg.get("TrainingJobEarlyStoppingType", "Off") != "Off":
            errors.append(SpecError(f"{where}.TrainingJobEarlyStoppingType",
                                    "Hyperband stops trials itself; TrainingJobEarlyStoppingType must be Off.",
                                    "set early_stopping_type='Off' (the default) with Hyperband."))
        hb = strategy_config.get("HyperbandStrategyConfig") or {}
        lo = hb.get("MinResource", 1)
        hi = hb.get("MaxResource")
        if hi is None:
            inferred = [infer_max_resource(d.get("StaticHyperParameters") or {}) for d in definitions]
            if not definitions or None in inferred:
                errors.append(SpecError(f"{where}.StrategyConfig.HyperbandStrategyConfig.MaxResource",
                                        "is missing and cannot be inferred: no static hyperparameter "
                                        f"{', '.join(EPOCH_KEYS)} holds a whole number of epochs.",
                                        "give hyperband_max_resource (the number of objective reports, e.g. epochs, "
                                        "of a full trial), or a static 'epochs' hyperparameter."))
            else:
                hi = min(found[0] for found in inferred if found is not None)
        if hi is not None:
            if hi > HYPERBAND_MAX_RESOURCE:
                errors.append(SpecError(f"{where}.StrategyConfig.HyperbandStrategyConfig.MaxResource",
                                        f"{hi} is above the maximum {HYPERBAND_MAX_RESOURCE}.",
                                        f"use at most {HYPERBAND_MAX_RESOURCE}."))
            if isinstance(lo, int) and lo > hi:
                errors.append(SpecError(f"{where}.StrategyConfig.HyperbandStrategyConfig",
                                        f"MinResource {lo} is greater than MaxResource {hi}.",
                                        "make MinResource <= MaxResource."))
    return errors


def _warm_start_errors(request: dict[str, Any]) -> list[SpecError]:
    errors: list[SpecError] = []
    warm = request.get("WarmStartConfig") or {}
    parents = [p.get("HyperParameterTuningJobName") for p in warm.get("ParentHyperParameterTuningJobs") or []]
    for name in sorted({p for p in parents if parents.count(p) > 1}):
        errors.append(SpecError(f"{OPERATION}.WarmStartConfig.ParentHyperParameterTuningJobs",
                                f"names {name!r} more than once.", "list each parent tuning job once."))
    if request.get("HyperParameterTuningJobName") in parents:
        errors.append(SpecError(f"{OPERATION}.WarmStartConfig.ParentHyperParameterTuningJobs",
                                "names the tuning job itself.", "warm-start from earlier tuning jobs."))
    return errors


def check_tuning_request(request: dict[str, Any]) -> None:
    """The rules SageMaker applies to CreateHyperParameterTuningJob beyond botocore's model. Raises
    SpecErrors listing every problem (ranges, Grid and Hyperband rules, objective metric, static/tuned
    overlap). Shapes are botocore's business: call :func:`validate_request` first."""
    cfg = request.get("HyperParameterTuningJobConfig") or {}
    where = f"{OPERATION}.HyperParameterTuningJobConfig"
    errors: list[SpecError] = []
    strategy = cfg.get("Strategy")
    ranges = cfg.get("ParameterRanges") or {}
    definitions = ([request["TrainingJobDefinition"]] if request.get("TrainingJobDefinition") else []) + list(
        request.get("TrainingJobDefinitions") or [])
    if not definitions:
        errors.append(SpecError(f"{OPERATION}.TrainingJobDefinition", "is required (or TrainingJobDefinitions).",
                                "give the training job the trials run."))
    if request.get("TrainingJobDefinition") and request.get("TrainingJobDefinitions"):
        errors.append(SpecError(f"{OPERATION}.TrainingJobDefinitions", "is given together with TrainingJobDefinition.",
                                "give one of them."))
    objective = cfg.get("HyperParameterTuningJobObjective")
    if not objective and not all(d.get("TuningObjective") for d in definitions):
        errors.append(SpecError(f"{where}.HyperParameterTuningJobObjective", "is required.",
                                "give {'Type': 'Maximize'|'Minimize', 'MetricName': '<a metric definition>'}."))
    all_ranges = [(f"{where}.ParameterRanges", ranges)] if ranges else []
    for i, d in enumerate(definitions):
        if d.get("HyperParameterRanges"):
            all_ranges.append((f"{OPERATION}.TrainingJobDefinitions[{i}].HyperParameterRanges",
                               d["HyperParameterRanges"]))
    if not all_ranges and not request.get("Autotune"):
        errors.append(SpecError(f"{where}.ParameterRanges", "no hyperparameter is tuned.",
                                "give at least one integer, continuous or categorical range."))
    for path, r in all_ranges:
        errors += range_errors(r, path)
    for i, d in enumerate(definitions):
        path = f"{OPERATION}.TrainingJobDefinition" if request.get("TrainingJobDefinition") else \
            f"{OPERATION}.TrainingJobDefinitions[{i}]"
        errors += definition_errors(d, d.get("HyperParameterRanges") or ranges,
                                    d.get("TuningObjective") or objective, path)

    errors += _limit_errors(cfg, strategy, all_ranges, where)
    errors += _hyperband_errors(cfg, strategy, definitions, where)
    errors += _warm_start_errors(request)
    if errors:
        raise SpecErrors(errors)


# ---- the definition ----------------------------------------------------------------------------------------
def training_definition(training_request: dict[str, Any], tuned: list[str]) -> dict[str, Any]:
    """CreateTrainingJob request -> HyperParameterTrainingJobDefinition (the tuned names leave the static
    hyperparameters; the SDK's ``_prepare_static_hyperparameters``)."""
    spec = training_request["AlgorithmSpecification"]
    extra = sorted(set(spec) - set(ALGORITHM_KEYS))
    if extra:
        raise SpecError(f"AlgorithmSpecification.{extra[0]}", "cannot be given to the trials of a tuning job "
                        "(HyperParameterAlgorithmSpecification has image, input mode and metric definitions only).",
                        "drop it, or run the job as a plain training job.")
    definition: dict[str, Any] = {
        "AlgorithmSpecification": {k: spec[k] for k in ALGORITHM_KEYS if k in spec},
        "StaticHyperParameters": {k: v for k, v in (training_request.get("HyperParameters") or {}).items()
                                  if k not in tuned},
    }
    for key in DEFINITION_KEYS:
        if key in training_request:
            definition[key] = training_request[key]
    return definition


def _resource_limits(strategy: str, ranges: dict[str, list[dict[str, Any]]], max_jobs: Any, max_parallel_jobs: Any,
                     max_runtime: Any) -> tuple[dict[str, Any], int | None]:
    """ResourceLimits, and the number of Grid combinations (None for other strategies or numeric ranges)."""
    limits: dict[str, Any] = {"MaxParallelTrainingJobs": _int_arg(max_parallel_jobs, "max_parallel_jobs", 1)}
    combinations = None
    if strategy == "Grid":
        combinations = grid_size(ranges) if not (set(ranges) - {"CategoricalParameterRanges"}) else None
        if max_jobs is not None:
            limits["MaxNumberOfTrainingJobs"] = _int_arg(max_jobs, "max_jobs", 1)
        elif combinations is not None:
            limits["MaxNumberOfTrainingJobs"] = combinations
    else:
        limits["MaxNumberOfTrainingJobs"] = _int_arg(1 if max_jobs is None else max_jobs, "max_jobs", 1)
    if max_runtime is not None:
        limits["MaxRuntimeInSeconds"] = _int_arg(max_runtime, "max_runtime", 1)

    return limits, combinations


def _hyperband_config(hyperband_min_resource: Any, hyperband_max_resource: Any, static: dict[str, str]
                      ) -> dict[str, Any]:
    hb: dict[str, Any] = {"MinResource": _int_arg(1 if hyperband_min_resource is None else hyperband_min_resource,
                                                  "hyperband_min_resource", 1)}
    if hyperband_max_resource is not None:
        hb["MaxResource"] = _int_arg(hyperband_max_resource, "hyperband_max_resource", 1)
    else:
        inferred = infer_max_resource(static)
        if inferred:
            hb["MaxResource"] = inferred[0]
            log.info("Hyperband MaxResource=%d, from the static hyperparameter %r", inferred[0], inferred[1])
    return hb


def _completion_criteria(target_objective_value: Any, max_jobs_not_improving: Any,
                         complete_on_convergence: bool | None) -> dict[str, Any]:
    criteria: dict[str, Any] = {}
    if target_objective_value is not None:
        try:
            criteria["TargetObjectiveMetricValue"] = float(target_objective_value)
        except (TypeError, ValueError):
            raise SpecError("target_objective_value", f"{target_objective_value!r} is not a number.",
                            "give the objective value at which to stop.") from None
    if max_jobs_not_improving is not None:
        criteria["BestObjectiveNotImproving"] = {
            "MaxNumberOfTrainingJobsNotImproving": _int_arg(max_jobs_not_improving, "max_jobs_not_improving", 3)}
    if complete_on_convergence is not None:
        criteria["ConvergenceDetected"] = {
            "CompleteOnConvergence": "Enabled" if complete_on_convergence else "Disabled"}
    return criteria


def _parallelism_advice(strategy: str, limits: dict[str, Any]) -> list[Any]:
    advice: list[Any] = []
    if limits["MaxParallelTrainingJobs"] > limits.get("MaxNumberOfTrainingJobs", math.inf):
        log.info("max_parallel_jobs %d exceeds max_jobs %d: at most %d trials run at once",
                 limits["MaxParallelTrainingJobs"], limits["MaxNumberOfTrainingJobs"],
                 limits["MaxNumberOfTrainingJobs"])
    if (strategy == "Bayesian"
            and limits["MaxParallelTrainingJobs"] > max(1, limits.get("MaxNumberOfTrainingJobs", 0) // 4)):
        from airflow_smdist.specs.best_practices import Advice

        advice.append(Advice("info", "tuning-parallelism",
                             "Bayesian search learns from finished trials: "
                             f"{limits['MaxParallelTrainingJobs']} at once of "
                             f"{limits.get('MaxNumberOfTrainingJobs')} leaves it fewer results to learn from "
                             "per choice (SageMaker recommends running few trials at a time)."))
    return advice


def build_tuning(*, job_name: str, tags: dict[str, str] | None = None, allow_local_uris: bool = True,
                 **arguments: Any) -> TuningPlan:
    """Build a CreateHyperParameterTuningJob request the way the SageMaker SDK's HyperparameterTuner would.

    The search's arguments are the fields of :class:`TuningSearch`; the other ``arguments`` are
    :func:`airflow_smdist.specs.training.build_training`'s (entry_point, source_dir,
    framework, image_uri, instance_type, hyperparameters, inputs, metric_definitions, max_run, ...); the
    source is named under the tuning job (``<code_location>/<job_name>/source/sourcedir.tar.gz``), as the
    SDK does. ``hyperparameter_ranges`` maps names to ranges (see :func:`parameter_ranges`); the
    ``objective_metric_name`` must be one of ``metric_definitions`` (built-in algorithms excepted).

    ``strategy``: Bayesian | Random | Hyperband | Grid. ``max_jobs`` defaults to 1 (the SDK's default) and
    to the number of combinations for Grid (categorical ranges only; a different max_jobs is an error).
    Hyperband: ``hyperband_min_resource`` (default 1) and ``hyperband_max_resource`` (default: the static
    ``epochs``-like hyperparameter); early stopping must stay Off. ``warm_start_parents``: up to 5 earlier
    tuning jobs. Completion: ``target_objective_value``, ``max_jobs_not_improving`` (>= 3),
    ``complete_on_convergence``. ``random_seed`` makes the search reproducible.
    """
    from airflow_smdist.specs.training import build_training

    search = TuningSearch.take(arguments)
    training_args = arguments  # what is left: the training job's
    if not isinstance(job_name, str) or not job_name:
        raise SpecError("job_name", "is required.", "give the tuning job's name (at most 32 characters).")
    if len(job_name) > 32:
        raise SpecError("job_name", f"{job_name!r} is {len(job_name)} characters; tuning job names are at most 32 "
                        "(they prefix the trials' names).", "shorten it to 32 characters.")
    strategy = _choice(search.strategy, STRATEGIES, "strategy")
    objective_type = _choice(search.objective_type, OBJECTIVE_TYPES, "objective_type")
    early_stopping_type = _choice(search.early_stopping_type, ("Off", "Auto"), "early_stopping_type")
    objective_metric_name = search.objective_metric_name
    if not objective_metric_name or not isinstance(objective_metric_name, str):
        raise SpecError("objective_metric_name", "is required.",
                        "name one of metric_definitions, e.g. 'validation:rmse'.")
    if "job_name" in training_args:
        raise SpecError("job_name", "is given twice.", "give it once.")

    training = build_training(job_name=job_name, tags=None, allow_local_uris=allow_local_uris, **training_args)
    train_req = training.request
    # as the SDK's tuner: JSON-encoded categorical values for Framework estimators only, not for a plain
    # Estimator of the user's own image even in script mode (entry_point)
    ranges = parameter_ranges(search.hyperparameter_ranges, framework=bool(training_args.get("framework")))
    tuned = tuned_names(ranges)
    fixed_by_builder = [n for n in tuned if n.startswith("sagemaker_")]
    if fixed_by_builder:
        raise SpecError(f"hyperparameter_ranges[{fixed_by_builder[0]!r}]", "is set by the builder, not tunable.",
                        "tune your own hyperparameters only.")
    user_static = set((training_args.get("hyperparameters") or {}))
    for name in tuned:
        if name in user_static:
            log.info("hyperparameter %r is tuned: its static value is dropped (as the SageMaker SDK does)", name)
    definition = training_definition(train_req, tuned)

    limits, combinations = _resource_limits(strategy, ranges, search.max_jobs, search.max_parallel_jobs,
                                           search.max_runtime)
    config: dict[str, Any] = {
        "Strategy": strategy,
        "HyperParameterTuningJobObjective": {"Type": objective_type, "MetricName": objective_metric_name},
        "ResourceLimits": limits,
        "ParameterRanges": ranges,
        "TrainingJobEarlyStoppingType": early_stopping_type,
    }
    if strategy == "Hyperband":
        config["StrategyConfig"] = {"HyperbandStrategyConfig": _hyperband_config(
            search.hyperband_min_resource, search.hyperband_max_resource, definition["StaticHyperParameters"])}
    elif search.hyperband_min_resource is not None or search.hyperband_max_resource is not None:
        raise SpecError("hyperband_min_resource" if search.hyperband_min_resource is not None
                        else "hyperband_max_resource",
                        f"only applies to the Hyperband strategy, not {strategy}.",
                        "drop it, or use strategy='Hyperband'.")
    criteria = _completion_criteria(search.target_objective_value, search.max_jobs_not_improving,
                                    search.complete_on_convergence)
    if criteria:
        config["TuningJobCompletionCriteria"] = criteria
    if search.random_seed is not None:
        config["RandomSeed"] = _int_arg(search.random_seed, "random_seed", 0)

    request: dict[str, Any] = {"HyperParameterTuningJobName": job_name, "HyperParameterTuningJobConfig": config,
                               "TrainingJobDefinition": definition}
    parents = search.warm_start_parents
    if parents:
        parents = [parents] if isinstance(parents, str) else list(parents)
        request["WarmStartConfig"] = {
            "ParentHyperParameterTuningJobs": [{"HyperParameterTuningJobName": str(p)} for p in parents],
            "WarmStartType": _choice(search.warm_start_type, WARM_START_TYPES, "warm_start_type")}
    if tags:
        request["Tags"] = as_tags(tags)

    validate_request(OPERATION, request, allow_local_uris=allow_local_uris)
    check_tuning_request(request)
    advice = list(training.advice) + _parallelism_advice(strategy, limits)
    for a in advice[len(training.advice):]:
        log.info("%s", a)
    return TuningPlan(request=request, training=training, advice=advice, combinations=combinations)


def tuning_request(**kwargs: Any) -> dict[str, Any]:
    """The CreateHyperParameterTuningJob request for these arguments (see :func:`build_tuning`)."""
    return build_tuning(**kwargs).request
