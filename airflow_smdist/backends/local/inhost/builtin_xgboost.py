"""SageMaker's built-in XGBoost algorithm, run for real:
``python -m airflow_smdist.backends.local.inhost.builtin_xgboost``.

This is each simulated host's command for a training job whose TrainingImage is the ``sagemaker-xgboost``
container and which names no script (algorithm mode). It follows the open-source container
(aws/sagemaker-xgboost-container, the ``1.7-1`` container, see docs/contracts.md §0: ``training.py`` ->
``algorithm_mode/train.py::sagemaker_train`` -> ``train_job``) on the ``xgboost`` package installed here:

* reads the contract the platform gives every host under ``SAGEMAKER_BASE_DIR`` (``/opt/ml`` in a host's own
  mount namespace): ``input/config/hyperparameters.json`` (plain strings), ``inputdataconfig.json``,
  ``resourceconfig.json`` (``hosts``, ``current_host``), ``checkpointconfig.json``, ``input/data/<channel>``;
* validates hyperparameters and channels as ``sagemaker_algorithm_toolkit`` does, with its messages
  ("Missing required hyperparameter: num_round", "Hyperparameter eta: 2.0 is not in [0, 1]", "Extraneous
  hyperparameter found: ...", "Missing required channel: train", ...);
* loads ``train`` / ``validation`` as text/csv (label first, no header; ``csv_weights=1``: weight second) or
  text/libsvm (the container's default content type);
* trains with ``eval_metric`` / ``_tuning_objective_metric`` (the container's own ``accuracy``, ``f1``, ``mse``,
  ``r2``, ... as a custom metric), ``early_stopping_rounds`` on the validation set, checkpoints
  (``xgboost-checkpoint.<12 digits>``, resumed from) and ``save_model_on_termination``;
* prints each round as ``[<i>]#011train-rmse:0.50000#011validation-rmse:0.60000``: what SageMaker's
  MetricDefinitions regexes read in CloudWatch, whose agent writes the container's tab as ``#011``;
* with several hosts, does the container's ``distributed.rabit_run``: a first rendezvous where every host says
  whether it has data (a host without its ShardedByS3Key share, or without validation data when there is a
  validation channel, leaves with exit code 0), then a second one over the hosts with data, in which
  ``xgb.train`` trains *one* model, histograms and metrics all-reduced across hosts. The first host of the sorted
  host list runs ``xgboost.tracker.RabitTracker`` on its own loopback address; ports 9099 and 9100 as in the
  container, or ``$SMDIST_XGBOOST_TRACKER_PORT`` and the next one, which the local supervisor sets to a free
  pair. Only the master host saves ``xgboost-model`` into the model directory;
* on failure writes ``output/failure`` as ``sagemaker_containers._trainer`` does (``framework error:`` +
  traceback + message) and exits 1.

Heavy imports (numpy, xgboost) happen in the functions that need them, so the validation half is importable
and testable without them.
"""

from __future__ import annotations

import ast
import csv
import io
import json
import logging
import os
import signal
import socket
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import xgboost as xgb
    from xgboost import collective
    from xgboost.callback import TrainingCallback
    from xgboost.tracker import RabitTracker

logger = logging.getLogger("sagemaker_xgboost_container")

MODEL_NAME = "xgboost-model"
CHECKPOINT_FILENAME = "xgboost-checkpoint"
CHECKPOINT_NUM_DIGITS = 12
CHECKPOINTS_TO_KEEP = 5
TRACKER_PORT = 9099
PORT_ENV = "SMDIST_XGBOOST_TRACKER_PORT"
LOG_FORMAT = "[%(asctime)s:%(levelname)s] %(message)s"
LOG_DATEFMT = "%Y-%m-%d:%H:%M:%S"

# constants/xgb_constants.py (1.7-1)
XGB_MAXIMIZE_METRICS = [
    "accuracy", "auc", "aucpr", "balanced_accuracy", "f1", "f1_binary", "f1_macro", "map", "ndcg", "precision",
    "precision_macro", "precision_micro", "r2", "recall", "recall_macro", "recall_micro",
]
XGB_MINIMIZE_METRICS = [
    "aft-nloglik", "cox-nloglik", "error", "gamma-deviance", "gamma-nloglik", "interval-regression-accuracy",
    "logloss", "mae", "mape", "merror", "mlogloss", "mphe", "mse", "poisson-nloglik", "rmse", "rmsle",
    "tweedie-nloglik",
]
CUSTOMER_ERRORS = [
    "label must be in [0,1] for logistic regression",
    "label must be in [0, num_class)",
    "Target is multiclass but average='binary'",
    "feature_names mismatch",
    "Check failed: preds.size() == info.labels_.size()",
    "Check failed: !auc_error AUC: the dataset only contains pos or neg samples",
    "Check failed: base_score > 0.0f && base_score < 1.0f base_score must be in (0,1) for logistic loss",
    "Check failed: label_correct PoissonRegression: label must be nonnegative",
    "Check failed: label_correct TweedieRegression: label must be nonnegative",
    "Parameter reg_lambda should be greater equal to 0",
]
OBJECTIVES = [
    "binary:logistic", "binary:logitraw", "binary:hinge", "count:poisson", "multi:softmax", "multi:softprob",
    "rank:pairwise", "rank:ndcg", "rank:map", "reg:linear", "reg:squarederror", "reg:logistic", "reg:gamma",
    "reg:squaredlogerror", "reg:tweedie", "reg:pseudohubererror", "reg:absoluteerror", "survival:cox",
    "survival:aft",
]

# data_utils.py: content types
CSV, LIBSVM, PARQUET, RECORDIO_PROTOBUF = "csv", "libsvm", "parquet", "recordio-protobuf"
VALID_CONTENT_TYPES = [CSV, LIBSVM, PARQUET, RECORDIO_PROTOBUF, "text/csv", "text/libsvm", "text/x-libsvm",
                       "application/x-parquet", "application/x-recordio-protobuf"]
VALID_PIPED_CONTENT_TYPES = [CSV, PARQUET, RECORDIO_PROTOBUF, "text/csv", "application/x-parquet",
                             "application/x-recordio-protobuf"]
INVALID_CONTENT_TYPE_ERROR = ("{invalid_content_type} is not an accepted ContentType: "
                              + ", ".join(VALID_CONTENT_TYPES) + ".")
INVALID_CONTENT_FORMAT_ERROR = ("First line '{line_snippet}...' of file '{file_name}' is not "
                                "'{content_type}' format. Please ensure the file is in '{content_type}' format.")
NO_LABELS_ERROR = ("Got input data without labels. Please check the input data set. If training job is running on "
                   "multiple instances, please switch to using single instance if number of records in the data "
                   "set is less than number of workers (16 * number of instance) in the cluster.")
MAX_FOLDER_DEPTH = 3
#: parameters xgboost 1.x accepted and the xgboost here no longer reads ("Parameters: { ... } are not used")
NOT_USED_BY_THIS_XGBOOST = ("silent", "predictor", "dsplit", "lambda_bias")


# ---- sagemaker_algorithm_toolkit.exceptions -------------------------------------------------------------------
class BaseToolkitError(Exception):
    """The toolkit's error: ``message``, with `` (caused by <type>)`` when it wraps another exception."""

    def __init__(self, message: str | None = None, caused_by: BaseException | None = None) -> None:
        if message:
            text = message
        elif caused_by is not None:
            text = str(caused_by)
        else:
            text = "unknown error occurred"
        if caused_by is not None:
            text += f" (caused by {type(caused_by).__name__})"
        super().__init__(text)
        self.message = text
        self.caused_by = caused_by


class AlgorithmError(BaseToolkitError):
    """A failure of the algorithm itself."""


class UserError(BaseToolkitError):
    """A failure the user can avoid (hyperparameters, channels, data)."""


class PlatformError(BaseToolkitError):
    """A failure of the environment."""


for _cls in (BaseToolkitError, AlgorithmError, UserError, PlatformError):
    _cls.__module__ = "sagemaker_algorithm_toolkit.exceptions"  # as tracebacks in the failure file name them


# ---- sagemaker_algorithm_toolkit.hyperparameter_validation ---------------------------------------------------
class Interval:
    """A numeric range; ``str()`` as the toolkit prints it: ``[0, 1]``, ``(0, 1]``, ``[1, +inf)``."""

    def __init__(self, min_open: float | None = None, min_closed: float | None = None,
                 max_open: float | None = None, max_closed: float | None = None) -> None:
        self.min_open, self.min_closed, self.max_open, self.max_closed = min_open, min_closed, max_open, max_closed

    def __contains__(self, value: float) -> bool:
        return not ((self.min_open is not None and value <= self.min_open)
                    or (self.min_closed is not None and value < self.min_closed)
                    or (self.max_open is not None and value >= self.max_open)
                    or (self.max_closed is not None and value > self.max_closed))

    def __str__(self) -> str:
        if self.min_open is not None:
            s = f"({self.min_open}, "
        elif self.min_closed is not None:
            s = f"[{self.min_closed}, "
        else:
            s = "(-inf, "
        if self.max_open is not None:
            return s + f"{self.max_open})"
        if self.max_closed is not None:
            return s + f"{self.max_closed}]"
        return s + "+inf)"


class RangeValidator:
    """``@hpv.range_validator(CATEGORIES)``: membership decided by ``check(categories, value)``, printed as the
    category list."""

    def __init__(self, categories: list[str], check: Callable[[list[str], str], bool]) -> None:
        self.categories, self.check = categories, check

    def __contains__(self, value: str) -> bool:
        return self.check(self.categories, value)

    def __str__(self) -> str:
        return str(self.categories)


@dataclass
class Hyperparameter:
    name: str
    range: Any = None
    required: bool = False
    dependencies: tuple[str, ...] = ()
    depends: Callable[[Any, dict[str, Any]], None] | None = None  # raises UserError

    def parse(self, value: Any) -> Any:
        return value

    def validate_range(self, value: Any) -> None:
        if self.range is not None and value not in self.range:
            raise UserError(f"Hyperparameter {self.name}: {value} is not in {self.range}")


class IntegerHyperparameter(Hyperparameter):
    def parse(self, value: Any) -> int:
        return int(value)


class ContinuousHyperparameter(Hyperparameter):
    def parse(self, value: Any) -> float:
        return float(value)


class CategoricalHyperparameter(Hyperparameter):
    pass


class CommaSeparatedListHyperparameter(Hyperparameter):
    def parse(self, value: str) -> list[str]:
        return value.split(",")

    def validate_range(self, value: list[str]) -> None:
        if any(v not in self.range for v in value):
            raise UserError(f"Hyperparameter {self.name}: value {value} not in range {self.range}")


class TupleHyperparameter(Hyperparameter):
    def parse(self, value: Any) -> tuple[Any, ...]:
        if isinstance(value, tuple):
            return value
        parsed = ast.literal_eval(value)  # the toolkit eval()s; a literal is all it can mean
        return tuple(parsed) if isinstance(parsed, (list, tuple)) else (parsed,)

    def validate_range(self, value: tuple[Any, ...]) -> None:
        if any(v not in self.range for v in value):
            raise UserError(f"Hyperparameter {self.name}: value {value} not in range {self.range}")


class NestedListHyperparameter(Hyperparameter):
    def parse(self, value: Any) -> Any:
        return ast.literal_eval(value) if isinstance(value, str) else value

    def validate_range(self, value: Any) -> None:
        if any(element not in self.range for outer in value for element in outer):
            raise UserError(f"Hyperparameter {self.name}: value {value} not in range {self.range}")


class Hyperparameters:
    """The toolkit's ``Hyperparameters.validate``: required first (in declaration order), then parse (unknown
    names are extraneous), then ranges, then dependencies (in dependency order)."""

    def __init__(self, *hyperparameters: Hyperparameter) -> None:
        self.hyperparameters = {hp.name: hp for hp in hyperparameters}
        self.aliases: dict[str, str] = {}

    def declare_alias(self, name: str, alias: str) -> None:
        self.aliases[alias] = name

    def __getitem__(self, name: str) -> Hyperparameter:
        return self.hyperparameters[name]

    def validate(self, user_hyperparameters: dict[str, Any]) -> dict[str, Any]:
        user: dict[str, Any] = {}
        for key, value in user_hyperparameters.items():
            name = self.aliases.get(key, key)
            if name in user:
                raise UserError(f"Hyperparameter {name} is given twice (as {name} and its alias {key})")
            user[name] = value
        for name, hp in self.hyperparameters.items():
            if name not in user and hp.required:
                raise UserError(f"Missing required hyperparameter: {name}")
        converted: dict[str, Any] = {}
        for name, value in user.items():
            spec = self.hyperparameters.get(name)
            if spec is None:
                raise UserError(f"Extraneous hyperparameter found: {name}")
            try:
                converted[name] = spec.parse(value)
            except (ValueError, SyntaxError, TypeError) as e:
                raise UserError(f"Hyperparameter {name}: could not parse value", caused_by=e) from None
        for name, value in converted.items():
            try:
                self.hyperparameters[name].validate_range(value)
            except UserError:
                raise
            except Exception as e:  # noqa: BLE001 - the toolkit wraps any other failure the same way
                raise AlgorithmError(f"Hyperparameter {name}: unexpected failure when validating {value}",
                                     caused_by=e) from None
        validated: dict[str, Any] = {}
        for name in self._dependency_order(list(converted)):
            hp = self.hyperparameters[name]
            if hp.depends is not None:
                hp.depends(converted[name], {d: validated[d] for d in hp.dependencies if d in validated})
            validated[name] = converted[name]
        return validated

    def _dependency_order(self, names: list[str]) -> list[str]:
        order: list[str] = []
        seen: set[str] = set()

        def visit(name: str) -> None:
            seen.add(name)
            for dep in self.hyperparameters[name].dependencies:
                if dep in names and dep not in seen:
                    visit(dep)
            order.append(name)

        for name in names:
            if name not in seen:
                visit(name)
        return order


def metric_names() -> list[str]:
    """algorithm_mode/metrics.py: the names ``_tuning_objective_metric`` may take."""
    return [f"validation:{m}" for m in XGB_MAXIMIZE_METRICS + XGB_MINIMIZE_METRICS]


# -- the dependency checks of hyperparameter_specs (algorithm_mode/hyperparameter_validation.py) --------------
def _tree_method_check(categories: list[str], value: str) -> bool:
    if "gpu" in value:
        raise UserError("GPU training is not supported by the local backend (it has no GPU): "
                        "use tree_method 'hist', 'approx' or 'exact'.")
    return value in categories

def _updater_depends(value: list[str], deps: dict[str, Any]) -> None:
    tree = ["grow_colmaker", "distcol", "grow_histmaker", "grow_local_histmaker", "grow_skmaker", "sync",
            "refresh", "prune", "grow_quantile_histmaker"]
    tree_build = ["grow_colmaker", "distcol", "grow_histmaker", "grow_local_histmaker", "grow_colmaker",
                  "grow_quantile_histmaker"]
    linear = ["shotgun", "coord_descent"]
    if deps.get("booster") == "gblinear":
        if not (len(value) == 1 and value[0] in linear):
            raise UserError("Linear updater should be one of these options: 'shotgun', 'coord_descent'.")
    elif deps.get("process_type") == "update":
        if not all(x in ("refresh", "prune") for x in value):
            raise UserError("process_type 'update' can only be used with updater 'refresh' and 'prune'")
    else:
        if not all(x in tree for x in value):
            raise UserError(
                "Tree updater should be selected from these options: 'grow_colmaker', 'distcol', "
                "'grow_histmaker', 'grow_local_histmaker', 'grow_skmaker', 'grow_quantile_histmaker', 'sync', "
                "'refresh', 'prune', 'shortgun', 'coord_descent'.")
        if sum(1 for x in value if x in tree_build) > 1:
            raise UserError("Only one tree grow plugin can be selected. Choose one from the"
                            "following: 'grow_colmaker', 'distcol', 'grow_histmaker', "
                            "'grow_local_histmaker', 'grow_skmaker'")

def _objective_depends(value: str, deps: dict[str, Any]) -> None:
    if value in ("multi:softmax", "multi:softprob") and deps.get("num_class") is None:
        raise UserError("Require input for parameter 'num_class' for multi-classification")

def _eval_metric_check(supported: list[str], metric: str) -> bool:
    if "<function" in metric:
        raise UserError(f"User defined evaluation metric {metric} is not supported yet.")
    if "@" in metric:
        name, threshold = (part.strip() for part in metric.split("@", 1))
        if name not in ("error", "ndcg", "map"):
            raise UserError(f"Metric '{metric}' is not supported. Parameter 'eval_metric' with customized "
                            "threshold should be one of these options: 'error', 'ndcg', 'map'.")
        try:
            float(threshold.rstrip("-"))
        except ValueError:
            raise UserError(f"Threshold value 't' in '{name}@t' expects float input.") from None
        return True
    return metric in supported

def _eval_metric_depends(value: list[str], deps: dict[str, Any]) -> None:
    objective = deps.get("objective", "reg:squarederror")  # the container reads it unconditionally
    if "auc" in value and not objective.startswith(("binary:", "rank:")):
        raise UserError("Metric 'auc' can only be applied for classification and ranking problems.")

def _monotone_depends(value: tuple[Any, ...] | None, deps: dict[str, Any]) -> None:
    if value is not None and deps.get("tree_method") not in ("exact", "hist"):
        raise UserError("monotone_constraints can be used only when the tree_method parameter is set to "
                        "either 'exact' or 'hist'.")

def _interaction_depends(value: Any, deps: dict[str, Any]) -> None:
    if value is not None and deps.get("tree_method") not in ("exact", "hist", "approx"):
        raise UserError("interaction_constraints can be used only when the tree_method parameter is set to "
                        "either 'exact', 'hist' or 'approx'.")


def hyperparameter_specs() -> Hyperparameters:
    """algorithm_mode/hyperparameter_validation.py, the CPU training half (1.7-1)."""
    # short names keep the table below as readable as the container's
    H, I, C, K, L = (Hyperparameters, IntegerHyperparameter, ContinuousHyperparameter,  # noqa: E741
                     CategoricalHyperparameter, CommaSeparatedListHyperparameter)

    def unit(**kw: float) -> Interval:
        return Interval(**kw)

    hps = H(
        I("num_round", range=unit(min_closed=1), required=True),
        I("csv_weights", range=unit(min_closed=0, max_closed=1)),
        I("early_stopping_rounds", range=unit(min_closed=1)),
        K("booster", range=["gbtree", "gblinear", "dart"]),
        I("silent", range=unit(min_closed=0, max_closed=1)),
        I("verbosity", range=unit(min_closed=0, max_closed=3)),
        I("nthread", range=unit(min_closed=1)),
        C("eta", range=unit(min_closed=0, max_closed=1)),
        C("gamma", range=unit(min_closed=0)),
        I("max_depth", range=unit(min_closed=0)),
        C("min_child_weight", range=unit(min_closed=0)),
        C("max_delta_step", range=unit(min_closed=0)),
        C("subsample", range=unit(min_open=0, max_closed=1)),
        K("sampling_method", range=["uniform", "gradient_based"]),
        C("colsample_bytree", range=unit(min_open=0, max_closed=1)),
        C("colsample_bylevel", range=unit(min_open=0, max_closed=1)),
        C("colsample_bynode", range=unit(min_open=0, max_closed=1)),
        C("lambda", range=unit(min_closed=0)),
        C("alpha", range=unit(min_closed=0)),
        K("tree_method", range=RangeValidator(["auto", "exact", "approx", "hist", "gpu_hist"], _tree_method_check)),
        C("sketch_eps", range=unit(min_open=0, max_open=1)),
        C("scale_pos_weight", range=unit(min_open=0)),
        L("updater", range=["grow_colmaker", "distcol", "grow_histmaker", "grow_local_histmaker", "grow_skmaker",
                            "sync", "refresh", "prune", "shotgun", "coord_descent", "grow_quantile_histmaker"],
          dependencies=("booster", "process_type"), depends=_updater_depends),
        K("dsplit", range=["row", "col"]),
        I("refresh_leaf", range=unit(min_closed=0, max_closed=1)),
        K("process_type", range=["default", "update"]),
        K("grow_policy", range=["depthwise", "lossguide"]),
        I("max_leaves", range=unit(min_closed=0)),
        I("max_bin", range=unit(min_closed=0)),
        K("predictor", range=["auto", "cpu_predictor", "gpu_predictor"]),
        TupleHyperparameter("monotone_constraints", range=[-1, 0, 1], dependencies=("tree_method",),
                            depends=_monotone_depends),
        NestedListHyperparameter("interaction_constraints", range=unit(min_closed=1),  # sic, as the container
                                 dependencies=("tree_method",), depends=_interaction_depends),
        K("sample_type", range=["uniform", "weighted"]),
        K("normalize_type", range=["tree", "forest"]),
        C("rate_drop", range=unit(min_closed=0, max_closed=1)),
        I("one_drop", range=unit(min_closed=0, max_closed=1)),
        C("skip_drop", range=unit(min_closed=0, max_closed=1)),
        C("lambda_bias", range=unit(min_closed=0, max_closed=1)),
        C("tweedie_variance_power", range=unit(min_open=1, max_open=2)),
        K("objective", range=OBJECTIVES, dependencies=("num_class",), depends=_objective_depends),
        I("num_class", range=unit(min_closed=2)),
        C("base_score", range=unit(min_closed=0)),
        K("_tuning_objective_metric", range=metric_names()),
        L("eval_metric", range=RangeValidator(XGB_MAXIMIZE_METRICS + XGB_MINIMIZE_METRICS, _eval_metric_check),
          dependencies=("objective",), depends=_eval_metric_depends),
        I("seed", range=unit(min_open=-2**31, max_open=2**31 - 1)),
        I("num_parallel_tree", range=unit(min_closed=1)),
        K("save_model_on_termination", range=["true", "false"]),
        I("max_cat_to_onehot", range=unit(min_closed=1)),
        K("deterministic_histogram", range=["true", "false"]),
        K("single_precision_histogram", range=["true", "false"]),
        K("use_dask_gpu_training", range=["true", "false"]),
        I("_kfold", range=unit(min_closed=2)),
        I("_num_cv_round", range=unit(min_closed=1)),
    )
    hps.declare_alias("eta", "learning_rate")
    hps.declare_alias("gamma", "min_split_loss")
    hps.declare_alias("lambda", "reg_lambda")
    hps.declare_alias("alpha", "reg_alpha")
    return hps


def validate_hyperparameters(train_config: dict[str, Any]) -> dict[str, Any]:
    """``hyperparameters.validate(train_config)`` and the ``updater`` join, as ``sagemaker_train`` does."""
    validated = hyperparameter_specs().validate(dict(train_config))
    if validated.get("updater"):
        validated["updater"] = ",".join(validated["updater"])
    return validated


# ---- what xgb.train gets ---------------------------------------------------------------------------------------
#: the container's own metrics (metrics/custom_metrics.py), computed on the predictions, not by xgboost
CUSTOM_METRICS = ("accuracy", "balanced_accuracy", "f1", "f1_binary", "f1_macro", "mse", "precision",
                  "precision_macro", "precision_micro", "r2", "recall", "recall_macro", "recall_micro")
_NOT_XGB_PARAMS = ("num_round", "csv_weights", "early_stopping_rounds", "_tuning_objective_metric", "eval_metric",
                   "save_model_on_termination", "use_dask_gpu_training", "_kfold", "_num_cv_round")


@dataclass
class TrainConfig:
    """``train_job``'s reading of the validated hyperparameters."""

    params: dict[str, Any]
    num_round: int
    early_stopping_rounds: int | None = None
    early_stopping_metric: str | None = None
    custom_metrics: list[str] = field(default_factory=list)
    save_model_on_termination: bool = False
    csv_weights: int = 0
    dropped: list[str] = field(default_factory=list)

    @property
    def maximize(self) -> bool | None:
        m = self.early_stopping_metric
        if m is None:
            return None
        return m.split("@")[0] in XGB_MAXIMIZE_METRICS


def eval_metrics(tuning_objective_metric: str | None,
                 eval_metric: list[str] | None) -> tuple[list[str] | None, list[str], list[str] | None]:
    """train_utils.get_eval_metrics_and_feval: (xgboost's metrics, the container's custom ones, the tuning
    objective's metric names). With both given, the union is sorted so every host asks for the same list."""
    tuning = None
    if tuning_objective_metric is not None:
        tuning = tuning_objective_metric.split(":")[1].split(",")
    if tuning is None and eval_metric is None:
        return None, [], None
    if tuning is None:
        assert eval_metric is not None  # (both None returned above)
        union = list(eval_metric)
    elif eval_metric is None:
        union = list(tuning)
    else:
        union = sorted(set(tuning) | set(eval_metric))
    custom = [m for m in union if m in CUSTOM_METRICS]
    native = [m for m in union if m not in CUSTOM_METRICS]
    return native or None, custom, tuning


def training_config(validated: dict[str, Any]) -> TrainConfig:
    """Split validated hyperparameters into xgb.train's params and what the container handles itself."""
    cfg = dict(validated)
    native, custom, tuning = eval_metrics(cfg.get("_tuning_objective_metric"), cfg.get("eval_metric"))
    early = cfg.get("early_stopping_rounds")
    metric = None
    if early:
        if tuning:
            metric = tuning[-1]
        elif cfg.get("eval_metric"):
            metric = cfg["eval_metric"][-1]
    params: dict[str, Any] = {}
    dropped: list[str] = []
    for key, value in cfg.items():
        if key in _NOT_XGB_PARAMS:
            continue
        if key in NOT_USED_BY_THIS_XGBOOST:
            dropped.append(key)
            continue
        if key == "monotone_constraints":
            value = "(" + ",".join(str(int(v)) for v in value) + ")"
        elif key == "interaction_constraints":
            value = json.dumps(value)
        params[key] = value
    if native:
        params["eval_metric"] = native
    return TrainConfig(params=params, num_round=int(cfg["num_round"]), early_stopping_rounds=early,
                       early_stopping_metric=metric, custom_metrics=custom,
                       save_model_on_termination=cfg.get("save_model_on_termination") == "true",
                       csv_weights=int(cfg.get("csv_weights", 0)), dropped=dropped)


# ---- channels (sagemaker_algorithm_toolkit.channel_validation + algorithm_mode/channel_validation.py) ------------
def validate_channels(user_channels: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``train`` required, ``validation`` and ``code`` optional, ContentType default text/libsvm, and only the
    (content type, input mode, distribution) combinations the container declares."""
    supported: dict[str, set[tuple[str, str, str]]] = {"train": set(), "validation": set(),
                                 "code": {("text/python", "File", "FullyReplicated")}}
    for name in ("train", "validation"):
        for ct in VALID_CONTENT_TYPES:
            for dist in ("ShardedByS3Key", "FullyReplicated"):
                supported[name].add((ct, "File", dist))
        for ct in VALID_PIPED_CONTENT_TYPES:
            for dist in ("ShardedByS3Key", "FullyReplicated"):
                supported[name].add((ct, "Pipe", dist))
    if "train" not in user_channels:
        raise UserError("Missing required channel: train")
    validated: dict[str, dict[str, Any]] = {}
    for channel, value in user_channels.items():
        if channel not in supported:
            raise UserError(f"Extraneous channel found: {channel}")
        value = dict(value)
        value.setdefault("ContentType", "text/libsvm")
        key = (value["ContentType"], value.get("TrainingInputMode"), value.get("S3DistributionType"))
        if key not in supported[channel]:
            raise UserError(f"Channel configuration for '{channel}' channel is not supported: {value}")
        validated[channel] = value
    return validated


def get_content_type(content_type: str | None) -> str:
    """data_utils.get_content_type: 'csv' / 'libsvm' / 'parquet' / 'recordio-protobuf' (None -> libsvm)."""
    if content_type is None:
        return LIBSVM
    main, _, rest = content_type.lower().partition(";")
    main = main.strip()
    params = dict(p.strip().split("=", 1) for p in rest.split(";") if "=" in p)
    if main in (CSV, "text/csv"):
        if params.get("label_size", "1").strip() != "1":
            raise UserError(f"{content_type} is not an accepted csv ContentType. "
                            "Optional parameter label_size must be equal to 1")
        return CSV
    if main in (LIBSVM, "text/libsvm", "text/x-libsvm"):
        return LIBSVM
    if main in (PARQUET, "application/x-parquet"):
        return PARQUET
    if main in (RECORDIO_PROTOBUF, "application/x-recordio-protobuf"):
        return RECORDIO_PROTOBUF
    raise UserError(INVALID_CONTENT_TYPE_ERROR.format(invalid_content_type=content_type))


# ---- data ----------------------------------------------------------------------------------------------------
def get_size(data_path: str | None) -> int:
    """data_utils.get_size: bytes under the channel (0 when missing); hidden files are refused."""
    if not data_path or not os.path.exists(data_path):
        return 0
    if os.path.isfile(data_path):
        return os.path.getsize(data_path)
    total = 0
    for root, _dirs, files in os.walk(data_path):
        for name in files:
            if name.startswith("."):
                raise UserError("Hidden file found in the data path! Remove that before training.")
            total += os.path.getsize(os.path.join(root, name))
    return total


def data_files(data_path: str) -> list[str]:
    """The files the container reads: the channel's files and those of sub-folders down to 3 levels (deeper ones
    are ignored with a warning), names starting with '.' or '_' skipped, in sorted order."""
    if os.path.isfile(data_path):
        return [data_path]
    out: list[str] = []
    too_deep = False
    for root, dirs, files in os.walk(data_path):
        depth = os.path.relpath(root, data_path).count(os.sep) + (0 if root == data_path else 1)
        if depth >= MAX_FOLDER_DEPTH:
            too_deep = too_deep or bool(files or dirs)
            dirs[:] = []
            continue
        dirs.sort()
        out += [os.path.join(root, f) for f in sorted(files) if not f.startswith((".", "_"))]
    if too_deep:
        logger.warning(f"The depth of folder {data_path} exceed the limit {MAX_FOLDER_DEPTH}. Files in deeper sub "
                       "dirs won't be loaded. Please adjust the folder structure accordingly.")
    return out


def csv_delimiter(sample_line: str) -> str:
    try:
        delimiter = csv.Sniffer().sniff(sample_line).delimiter
    except Exception as e:  # noqa: BLE001 - csv.Error and whatever the sniffer raises
        raise UserError(f"Could not determine delimiter on line {sample_line[:50]}:\n{e}") from None
    logger.info(f"Determined delimiter of CSV input is '{delimiter}'")
    return delimiter


def _first_line(path: str) -> str:
    with open(path, errors="ignore") as f:
        return f.readline()


def _libsvm_features(line: str) -> int:
    """Number of well-formed ``index:value`` features, or -1 when the line is not LIBSVM."""
    parts = line.split("#", 1)[0].split()
    if not parts:
        return 0
    label = parts[0].split(":")
    try:
        if len(label) > 2:
            return -1
        [float(x) for x in label]
    except ValueError:
        return -1
    n = 0
    for token in parts[1:]:
        if token.startswith("qid:"):
            continue
        pair = token.split(":")
        if len(pair) != 2:
            return -1
        n += 1
    return n


def validate_data_files(files: list[str], content_type: str) -> None:
    """data_utils.validate_data_file_path: CSV files must have a sniffable delimiter, LIBSVM files a LIBSVM line."""
    for path in files:
        if content_type == CSV:
            csv_delimiter(_first_line(path))
        elif content_type == LIBSVM:
            with open(path, errors="ignore") as f:
                for line in f:
                    n = _libsvm_features(line)
                    if n > 1:
                        break
                    if n < 0:
                        raise UserError(INVALID_CONTENT_FORMAT_ERROR.format(
                            line_snippet=line[:50], file_name=os.path.basename(path), content_type="LIBSVM"))
                else:
                    logger.warning(f"File {os.path.basename(path)} is not an invalid LIBSVM file but has no "
                                   "features. Accepting simple validation.")


def load_csv(files: list[str], csv_weights: int = 0) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32],
                                                             npt.NDArray[np.float32] | None, None] | None:
    """(features, label, weight): the label in the first column, no header; ``csv_weights=1``: weight second."""
    import numpy as np

    delimiter = csv_delimiter(_first_line(files[0]))
    blocks = []
    for path in files:
        if os.path.getsize(path) == 0:
            continue
        try:
            try:
                block = np.loadtxt(path, delimiter=delimiter, dtype=np.float32, ndmin=2)
            except ValueError:  # empty fields: missing values, as xgboost's CSV parser reads them
                block = np.genfromtxt(path, delimiter=delimiter, dtype=np.float32, ndmin=2)
                if np.isnan(block[:, 0]).any():
                    raise
        except ValueError as e:
            raise UserError(f"Failed to load csv data with exception:\n{e}") from None
        if block.size:
            blocks.append(block)
    if not blocks:
        return None
    widths = {b.shape[1] for b in blocks}
    if len(widths) > 1:
        raise UserError(f"Failed to load csv data with exception:\nfiles have different numbers of columns: "
                        f"{sorted(widths)}")
    data = np.vstack(blocks)
    if csv_weights == 1:
        return data[:, 2:], data[:, 0], data[:, 1], None
    return data[:, 1:], data[:, 0], None, None


def load_libsvm(files: list[str]) -> tuple[Any, npt.NDArray[np.float32], npt.NDArray[np.float32] | None,
                                           npt.NDArray[Any] | None] | None:
    """(CSR features, label, weight or None, qid or None): ``<label>[:<weight>] <index>:<value> ...``, zero-based
    indices, ``qid:<n>`` for ranking."""
    import numpy as np
    import scipy.sparse as sp

    labels, weights, qids, indptr, indices, values = [], [], [], [0], [], []
    for path in files:
        with open(path) as f:
            for lineno, raw in enumerate(f, 1):
                parts = raw.split("#", 1)[0].split()
                if not parts:
                    continue
                try:
                    label, _, weight = parts[0].partition(":")
                    labels.append(float(label))
                    weights.append(float(weight) if weight else 1.0)
                    for token in parts[1:]:
                        key, _, value = token.partition(":")
                        if key == "qid":
                            qids.append(int(value))
                            continue
                        indices.append(int(key))
                        values.append(float(value))
                except ValueError as e:
                    raise UserError(f"Failed to load libsvm data with exception:\n{os.path.basename(path)} line "
                                    f"{lineno}: {e}") from None
                indptr.append(len(indices))
    if not labels:
        return None
    n_cols = (max(indices) + 1) if indices else 0
    X = sp.csr_matrix((np.asarray(values, dtype=np.float32), np.asarray(indices, dtype=np.int64),
                       np.asarray(indptr, dtype=np.int64)), shape=(len(labels), n_cols))
    w = np.asarray(weights, dtype=np.float32)
    return (X, np.asarray(labels, dtype=np.float32), None if (w == 1.0).all() else w,
            np.asarray(qids) if qids and len(qids) == len(labels) else None)


def get_dmatrix(data_path: str, content_type: str, csv_weights: int = 0) -> xgb.DMatrix | None:
    """data_utils.get_dmatrix for File mode: every data file of the channel in one DMatrix."""
    import xgboost as xgb

    files = data_files(data_path)
    if not files:
        return None
    loaded: tuple[Any, npt.NDArray[np.float32], npt.NDArray[np.float32] | None, npt.NDArray[Any] | None] | None
    if content_type == CSV:
        loaded = load_csv(files, csv_weights)
    elif content_type == LIBSVM:
        loaded = load_libsvm(files)
    else:
        raise UserError(f"{content_type} input is not emulated by the local backend: use text/csv or text/libsvm.")
    if loaded is None:
        raise UserError(NO_LABELS_ERROR)
    X, y, w, qid = loaded
    return xgb.DMatrix(X, label=y, weight=w, qid=qid)


def get_validated_dmatrices(train_path: str, validate_path: str | None, content_type: str,
                            csv_weights: int = 0) -> tuple[xgb.DMatrix | None, xgb.DMatrix | None]:
    train_size = get_size(train_path)
    val_size = get_size(validate_path)
    logger.debug(f"File size need to be processed in the node: {round((train_size + val_size) / 1048576, 2)}mb.")
    if train_size > 0:
        validate_data_files(data_files(train_path), content_type)
    if val_size > 0 and validate_path is not None:  # (get_size is 0 for None)
        validate_data_files(data_files(validate_path), content_type)
    train = get_dmatrix(train_path, content_type, csv_weights) if train_size > 0 else None
    val = get_dmatrix(validate_path, content_type, csv_weights) if val_size > 0 and validate_path is not None else None
    return train, val


def check_data_redundancy(train_path: str, validate_path: str) -> None:
    """Warn about same-name, same-size files in train and validation (data_utils.check_data_redundancy)."""
    if not (os.path.isdir(train_path) and os.path.isdir(validate_path)):
        return
    train_files = {f for f in os.listdir(train_path) if os.path.isfile(os.path.join(train_path, f))}
    for f in sorted(train_files & set(os.listdir(validate_path))):
        a, b = os.path.join(train_path, f), os.path.join(validate_path, f)
        if os.path.isfile(b) and os.path.getsize(a) == os.path.getsize(b):
            logger.warning(f"Suspected identical files found. ({a} and {b}with same size {os.path.getsize(b)} bytes)."
                           " Note: Duplicate data in the training set and validation set is usually not intentional "
                           "and can impair the validity of the model evaluation by the validation score.")


# ---- the container's metrics ------------------------------------------------------------------------------------
def _class_predictions(predt: npt.NDArray[Any], labels: npt.NDArray[Any]) -> npt.NDArray[Any]:
    import numpy as np

    # (numpy's annotations type argmax along an axis, and round of a dtype[Any] array, as Any)
    if predt.ndim == 2:
        class_ids: npt.NDArray[np.intp] = np.argmax(predt, axis=1)
        return class_ids.astype(labels.dtype)
    rounded: npt.NDArray[Any] = np.round(np.clip(predt, 0, None))  # probabilities (binary) or class ids (softmax)
    return rounded.astype(labels.dtype)


def _per_class(y_true: npt.NDArray[Any],
               y_pred: npt.NDArray[Any]) -> tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any]]:
    import numpy as np

    classes = np.union1d(np.unique(y_true), np.unique(y_pred))
    precision, recall = [], []
    for c in classes:
        tp = float(np.sum((y_pred == c) & (y_true == c)))
        predicted, actual = float(np.sum(y_pred == c)), float(np.sum(y_true == c))
        precision.append(tp / predicted if predicted else 0.0)
        recall.append(tp / actual if actual else 0.0)
    return classes, np.asarray(precision), np.asarray(recall)


def custom_metric_value(name: str, predt: npt.NDArray[Any], labels: npt.NDArray[Any]) -> float:
    """One of :data:`CUSTOM_METRICS` on (transformed) predictions, as sklearn computes it for the container."""
    import numpy as np

    if name == "mse":
        return float(np.mean((predt - labels) ** 2))
    if name == "r2":
        total = float(np.sum((labels - labels.mean()) ** 2))
        return 1.0 - float(np.sum((labels - predt) ** 2)) / total if total else 0.0
    y_pred = _class_predictions(predt, labels)
    if name in ("accuracy", "precision_micro", "recall_micro"):
        return float(np.mean(y_pred == labels))
    classes, precision, recall = _per_class(labels, y_pred)
    f1 = np.divide(2 * precision * recall, precision + recall, out=np.zeros_like(precision),
                   where=(precision + recall) > 0)
    binary = set(np.unique(labels)) <= {0.0, 1.0}
    pos = list(classes).index(1.0) if 1.0 in classes else None
    if name == "balanced_accuracy":
        present = [i for i, c in enumerate(classes) if np.any(labels == c)]
        return float(np.mean(recall[present]))
    if name in ("f1_binary",) or (name in ("f1", "precision", "recall") and binary):
        if pos is None:
            return 0.0
        return float({"f1": f1, "f1_binary": f1, "precision": precision, "recall": recall}[name][pos])
    if name in ("f1", "f1_macro"):
        return float(np.mean(f1))
    if name in ("precision", "precision_macro"):
        return float(np.mean(precision))
    if name in ("recall", "recall_macro"):
        return float(np.mean(recall))
    raise AlgorithmError(f"unknown custom metric {name}")


def configure_custom_metric(
        names: list[str]) -> Callable[[npt.NDArray[Any], xgb.DMatrix], list[tuple[str, float]]] | None:
    """custom_metrics.configure_feval, for xgb.train(custom_metric=...)."""
    if not names:
        return None

    def custom_metric(predt: npt.NDArray[Any], dmatrix: xgb.DMatrix) -> list[tuple[str, float]]:
        labels = dmatrix.get_label()
        return [(name, custom_metric_value(name, predt, labels)) for name in names]

    return custom_metric


# ---- callbacks ---------------------------------------------------------------------------------------------
def format_evaluation(iteration: int, evals_log: TrainingCallback.EvalsLog) -> str:
    """``[<i>]#011<data>-<metric>:<value>...``: the container's line (xgboost's EvaluationMonitor format) with the
    tab as CloudWatch shows it, so SageMaker's MetricDefinitions regexes match it as they do there."""
    msg = f"[{iteration}]"
    for data, metrics in evals_log.items():
        for name, log in metrics.items():
            score = log[-1]
            if isinstance(score, tuple):
                msg += f"#011{data}-{name}:{score[0]:.5f}+{score[1]:.5f}"
            else:
                msg += f"#011{data}-{name}:{score:.5f}"
    return msg


def _callbacks() -> tuple[Callable[..., TrainingCallback], Callable[..., TrainingCallback],
                          Callable[..., TrainingCallback]]:
    """The callback classes, built on xgboost's TrainingCallback (imported here, not at module import)."""
    import xgboost as xgb
    from xgboost import collective

    class PrintEvaluation(xgb.callback.TrainingCallback):
        """Prints each round on rank 0 (the master host), as the container's tracker print does."""

        def __init__(self, start_iteration: int = 0) -> None:
            super().__init__()
            self.start_iteration = start_iteration

        def after_iteration(self, model: xgb.Booster, epoch: int, evals_log: TrainingCallback.EvalsLog) -> bool:
            if evals_log and collective.get_rank() == 0:
                print(format_evaluation(epoch + self.start_iteration, evals_log), flush=True)
            return False

    class SaveCheckpoint(xgb.callback.TrainingCallback):
        """xgboost-checkpoint.<12 digits> after each round on rank 0, keeping the last five."""

        def __init__(self, checkpoint_dir: str, start_iteration: int = 0) -> None:
            super().__init__()
            self.dir, self.start_iteration = checkpoint_dir, start_iteration
            os.makedirs(checkpoint_dir, exist_ok=True)

        def after_iteration(self, model: xgb.Booster, epoch: int, evals_log: TrainingCallback.EvalsLog) -> bool:
            if collective.get_rank() != 0:
                return False
            i = self.start_iteration + epoch
            save_booster(model, checkpoint_path(self.dir, i))
            old = checkpoint_path(self.dir, i - CHECKPOINTS_TO_KEEP)
            if i - CHECKPOINTS_TO_KEEP >= self.start_iteration and os.path.isfile(old):
                os.remove(old)
            return False

    class SaveIntermediateModel(xgb.callback.TrainingCallback):
        """save_model_on_termination: the model so far in the model directory after each round (master only)."""

        def __init__(self, model_dir: str, is_master: bool) -> None:
            super().__init__()
            self.model_dir, self.is_master = model_dir, is_master

        def after_iteration(self, model: xgb.Booster, epoch: int, evals_log: TrainingCallback.EvalsLog) -> bool:
            if self.is_master:
                os.makedirs(self.model_dir, exist_ok=True)
                save_booster(model, os.path.join(self.model_dir, MODEL_NAME))
            return False

    return PrintEvaluation, SaveCheckpoint, SaveIntermediateModel


def save_booster(booster: xgb.Booster, path: str) -> None:
    """Save as xgboost saves a name without extension (UBJSON), atomically and without its format warning."""
    tmp = os.path.join(os.path.dirname(path) or ".", f".{os.path.basename(path)}.sagemaker-ignore.ubj")
    booster.save_model(tmp)
    os.replace(tmp, path)


def checkpoint_path(checkpoint_dir: str, iteration: int) -> str:
    return os.path.join(checkpoint_dir, f"{CHECKPOINT_FILENAME}.{iteration:0{CHECKPOINT_NUM_DIGITS}d}")


def load_checkpoint(checkpoint_dir: str | None) -> tuple[str | None, int]:
    """(booster file or None, iteration to resume from): the latest loadable ``xgboost-checkpoint.<n>``."""
    import re

    import xgboost as xgb

    if not checkpoint_dir or not os.path.isdir(checkpoint_dir):
        return None, 0
    pattern = re.compile(rf"^{CHECKPOINT_FILENAME}\.([0-9]+)$")
    found = sorted((int(m.group(1)), f) for f in os.listdir(checkpoint_dir) if (m := pattern.match(f)))
    for iteration, name in reversed(found[-5:]):
        path = os.path.join(checkpoint_dir, name)
        try:
            xgb.Booster().load_model(path)
        except xgb.core.XGBoostError:
            logger.debug(f"Wrong checkpoint model format {name}")
            continue
        return path, iteration + 1
    return None, 0


# ---- training ----------------------------------------------------------------------------------------------
def train_job(train_cfg: dict[str, Any], train_dmatrix: xgb.DMatrix, val_dmatrix: xgb.DMatrix | None,
              model_dir: str, checkpoint_dir: str | None, is_master: bool) -> None:
    """algorithm_mode/train.py::train_job: train on this host's data (with the others' when distributed) and,
    on the master, save ``xgboost-model``."""
    import xgboost as xgb

    cfg = training_config(train_cfg)
    if cfg.dropped:
        logger.info(f"Not passing {', '.join(cfg.dropped)} to xgboost {xgb.__version__}, which no longer reads "
                    f"{'it' if len(cfg.dropped) == 1 else 'them'}.")
    logger.info(f"Train matrix has {train_dmatrix.num_row()} rows and {train_dmatrix.num_col()} columns")
    if val_dmatrix is not None:
        logger.info(f"Validation matrix has {val_dmatrix.num_row()} rows")
    watchlist = [(train_dmatrix, "train")]
    if val_dmatrix is not None:
        watchlist.append((val_dmatrix, "validation"))

    PrintEvaluation, SaveCheckpoint, SaveIntermediateModel = _callbacks()
    xgb_model, iteration = load_checkpoint(checkpoint_dir)
    if xgb_model is not None:
        logger.info(f"Checkpoint loaded from {xgb_model}")
        logger.info(f"Resuming from iteration {iteration}")
    callbacks: list[TrainingCallback] = [PrintEvaluation(start_iteration=iteration)]
    if checkpoint_dir:
        callbacks.append(SaveCheckpoint(checkpoint_dir, start_iteration=iteration))
    if cfg.save_model_on_termination:
        callbacks.append(SaveIntermediateModel(model_dir, is_master))
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if cfg.early_stopping_rounds and val_dmatrix is not None:
        callbacks.append(xgb.callback.EarlyStopping(rounds=cfg.early_stopping_rounds, data_name="validation",
                                                    metric_name=cfg.early_stopping_metric, maximize=cfg.maximize,
                                                    save_best=True))
    try:
        bst = xgb.train(cfg.params, train_dmatrix, num_boost_round=max(cfg.num_round - iteration, 0),
                        evals=watchlist, custom_metric=configure_custom_metric(cfg.custom_metrics),
                        callbacks=callbacks, xgb_model=xgb_model, verbose_eval=False)
    except Exception as e:  # noqa: BLE001 - the container sorts every xgboost failure the same way
        for message in CUSTOMER_ERRORS:
            if message in str(e):
                raise UserError(str(e)) from None
        raise AlgorithmError(f"XGB train call failed with exception:\n {e}") from None
    os.makedirs(model_dir, exist_ok=True)
    if is_master:
        location = os.path.join(model_dir, MODEL_NAME)
        save_booster(bst, location)
        logger.debug(f"Stored trained model at {location}")


# ---- distributed (distributed.py) ---------------------------------------------------------------------------
class Rabit:
    """Context manager for one XGBoost communicator over ``hosts``: the first sorted host runs the tracker on
    ``port``; every host waits for it, then joins with its index in the sorted list as task id (rank)."""

    def __init__(self, hosts: list[str], current_host: str, port: int, connect_timeout: float = 900.0) -> None:
        self.hosts = sorted(hosts)
        self.current_host = current_host
        self.master_host = self.hosts[0]
        self.is_master = current_host == self.master_host
        self.port = port
        self.connect_timeout = connect_timeout
        self.tracker: RabitTracker | None = None
        self._context: collective.CommunicatorContext | None = None

    def __enter__(self) -> Rabit:
        import xgboost as xgb
        from xgboost import collective
        from xgboost.tracker import RabitTracker

        if self.is_master:
            level = xgb.get_config().get("verbosity", 1)
            # the tracker's thread keeps the verbosity it starts with: keep it from logging the probes below
            xgb.set_config(verbosity=0)
            try:
                self.tracker = RabitTracker(n_workers=len(self.hosts), host_ip=self.master_host, port=self.port,
                                            sortby="task")
                self.tracker.start()
            finally:
                xgb.set_config(verbosity=level)
            logger.info(f"Rabit slave environment: {self.tracker.worker_args()}")
        self._wait_for_tracker()
        self._context = collective.CommunicatorContext(
            dmlc_communicator="rabit", dmlc_tracker_uri=self.master_host, dmlc_tracker_port=self.port,
            dmlc_task_id=str(self.hosts.index(self.current_host)))
        self._context.__enter__()
        logger.debug(f"Rabit started - Rank {collective.get_rank()}")
        return self

    def _wait_for_tracker(self) -> None:
        deadline = time.time() + self.connect_timeout
        attempt, last_log = 0, 0.0
        while True:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.connect((self.master_host, self.port))
                    logger.info("Connected to RabitTracker.")
                    return
                except OSError:
                    pass
            if time.time() > deadline:
                raise PlatformError(f"Failed to connect to Rabit Tracker on {self.master_host}:{self.port} "
                                    f"after {attempt} attempts")
            if time.time() - last_log > 5:
                logger.info(f"Failed to connect to RabitTracker on attempt {attempt}")
                last_log = time.time()
            attempt += 1
            time.sleep(0.1)

    def synchronize(self, data: Any) -> list[Any]:
        """Every host's ``data``, in rank order (a broadcast from each rank in turn)."""
        from xgboost import collective

        rank = collective.get_rank()
        return [collective.broadcast(data if rank == i else None, i) for i in range(collective.get_world_size())]

    def __exit__(self, *exc: object) -> None:
        if exc[0] is not None:
            # a failed host leaves without the collective shutdown (which would wait for the others); main()
            # ends the process with os._exit, as the container's trainer does, and the platform ends the rest
            return
        if self._context is not None:
            self._context.__exit__(*exc)
        if self.tracker is not None:
            self.tracker.wait_for()
            self.tracker.free()


def rabit_run(exec_fun: Callable[..., None], args: dict[str, Any], include_in_training: bool, hosts: list[str],
              current_host: str, first_port: int = TRACKER_PORT, second_port: int | None = None) -> None:
    """distributed.rabit_run: rendezvous once to learn which hosts have data, then train over those."""
    with Rabit(hosts, current_host, first_port) as rabit:
        records = rabit.synchronize({"host": current_host, "include_in_training": include_in_training})
    hosts_with_data = [r["host"] for r in records if r["include_in_training"]]
    if not include_in_training:
        logger.warning(f"Host {current_host} not being used for distributed training.")
        sys.exit(0)
    if len(hosts_with_data) > 1:
        with Rabit(hosts_with_data, current_host, second_port or first_port + 1) as cluster:
            exec_fun(**{**args, "is_master": cluster.is_master})
    elif len(hosts_with_data) == 1:
        logger.debug(f"Only 1 host with training data, starting single node training job from: {current_host}")
        exec_fun(**{**args, "is_master": True})
    else:
        raise RuntimeError("No hosts received training data.")


def sagemaker_train(train_config: dict[str, Any], data_config: dict[str, dict[str, Any]], train_path: str,
                    val_path: str | None, model_dir: str, sm_hosts: list[str], sm_current_host: str,
                    checkpoint_config: dict[str, Any],
                    relocate: Callable[[str], str] = lambda p: p, port: int = TRACKER_PORT) -> None:
    """algorithm_mode/train.py::sagemaker_train."""
    validated = validate_hyperparameters(train_config)
    channels = validate_channels(data_config)
    logger.debug(f"hyperparameters {validated}")
    logger.debug(f"channels {channels}")
    file_type = get_content_type(channels["train"].get("ContentType"))
    if channels["train"].get("TrainingInputMode") == "Pipe":
        raise UserError("Pipe mode is not emulated by the local backend.")
    if file_type in (PARQUET, RECORDIO_PROTOBUF):
        raise UserError(f"{file_type} input is not emulated by the local backend: use text/csv or text/libsvm.")
    csv_weights = validated.get("csv_weights", 0)
    validation_channel = channels.get("validation")
    if val_path is not None:
        if train_path == val_path or os.path.basename(train_path) == os.path.basename(val_path):
            logger.warning("Found same path for training and validation. This is not recommended and results may "
                           "not be correct.")
        else:
            check_data_redundancy(train_path, val_path)
    num_hosts = len(sm_hosts)
    checkpoint_dir = checkpoint_config.get("LocalPath")
    checkpoint_dir = relocate(checkpoint_dir) if checkpoint_dir else None
    num_gpus = int(os.getenv("SM_NUM_GPUS", "0") or 0)
    logger.info(f"Determined {num_gpus} GPU(s) available on the instance.")
    if validated.pop("use_dask_gpu_training", "false") == "true":
        raise UserError("Some configurations unsuitable for Dask GPU training were found: the local backend has "
                        "no GPU (Dask GPU training is not emulated).")
    if "_kfold" in validated:
        raise UserError("Cross validation (_kfold) is not emulated by the local backend.")

    train_dmatrix, val_dmatrix = get_validated_dmatrices(train_path, val_path, file_type, csv_weights)
    missing_validation_data = validation_channel is not None and val_dmatrix is None
    train_args: dict[str, Any] = dict(train_cfg=validated, train_dmatrix=train_dmatrix, val_dmatrix=val_dmatrix,
                      model_dir=model_dir, checkpoint_dir=checkpoint_dir)
    if num_hosts > 1:
        logger.info(f"Distributed node training with {num_hosts} hosts: {sm_hosts}")
        for host in sm_hosts:
            socket.gethostbyname(host)
        include_in_training = True
        if train_dmatrix is None:
            logger.warning(f"Host {sm_current_host} does not have training data. Will broadcast to cluster and this "
                           f"host {sm_current_host} will not be used in distributed training. Please divide the "
                           "training data across instances properly. See https://docs.aws.amazon.com/sagemaker/latest"
                           "/dg/xgboost.html#Instance-XGBoost-distributed-training-divide-data. ")
            include_in_training = False
        if missing_validation_data:
            logger.warning(f"Host {sm_current_host} does not have validation data in the validation channel : "
                           f"{validation_channel}. Will broadcast to cluster and this host {sm_current_host} will not "
                           "be used in distributed training. Please divide the validation data across instances "
                           "properly. See https://docs.aws.amazon.com/sagemaker/latest/dg/xgboost.html"
                           "#Instance-XGBoost-distributed-training-divide-data. ")
            include_in_training = False
        rabit_run(train_job, train_args, include_in_training, sm_hosts, sm_current_host, first_port=port)
    elif num_hosts == 1:
        if train_dmatrix is None:
            raise UserError(f"No data in training channel path {train_path}")
        if missing_validation_data:
            raise UserError(f"No data in validation channel path {val_path}")
        logger.info("Single node training.")
        train_job(**train_args, is_master=True)
    else:
        raise PlatformError("Number of hosts should be an int greater than or equal to 1")


# ---- entry -------------------------------------------------------------------------------------------------
@dataclass
class ContainerPaths:
    """/opt/ml, wherever the platform put it for this host."""

    base: str

    def p(self, *parts: str) -> str:
        return os.path.join(self.base, *parts)

    def relocate(self, path: str) -> str:
        """A path the request names under /opt/ml (CheckpointConfig.LocalPath), under this host's base."""
        if self.base != "/opt/ml" and (path == "/opt/ml" or path.startswith("/opt/ml/")):
            return self.p(os.path.relpath(path, "/opt/ml"))
        return path


def _read_json(path: str, default: Any = None) -> Any:
    if default is not None and not os.path.exists(path):
        return default
    with open(path) as f:
        return json.load(f)


def run_algorithm_mode(paths: ContainerPaths) -> None:
    """training.py::run_algorithm_mode: read the config files and train."""
    train_config = _read_json(paths.p("input", "config", "hyperparameters.json"), {})
    data_config = _read_json(paths.p("input", "config", "inputdataconfig.json"), {})
    checkpoint_config = _read_json(paths.p("input", "config", "checkpointconfig.json"), {})
    resource = _read_json(paths.p("input", "config", "resourceconfig.json"))
    val_path = paths.p("input", "data", "validation") if "validation" in data_config else None
    port = int(os.environ.get(PORT_ENV) or TRACKER_PORT)
    sagemaker_train(train_config=train_config, data_config=data_config, train_path=paths.p("input", "data", "train"),
                    val_path=val_path, model_dir=paths.p("model"), sm_hosts=list(resource["hosts"]),
                    sm_current_host=resource["current_host"], checkpoint_config=checkpoint_config,
                    relocate=paths.relocate, port=port)


def failure_message(error: BaseException) -> str:
    """What sagemaker_containers._trainer writes to output/failure for an error that is not a ClientError:
    ``framework error:``, the traceback (its innermost frames here, so the message stays within the 1024
    characters of FailureReason) and the message."""
    tb = "".join(traceback.format_exception(type(error), error, error.__traceback__, limit=-2))
    return f"framework error: \n{tb}\n{error}"


def main(argv: list[str] | None = None) -> int:
    if isinstance(sys.stdout, io.TextIOWrapper):  # as it is in a host (python -m); typeshed says only TextIO
        sys.stdout.reconfigure(line_buffering=True)
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, datefmt=LOG_DATEFMT, stream=sys.stdout, force=True)
    logging.captureWarnings(True)
    paths = ContainerPaths(os.environ.get("SAGEMAKER_BASE_DIR") or "/opt/ml")
    try:
        import xgboost

        logger.info("Imported framework sagemaker_xgboost_container.training")
        logger.info(f"Running XGBoost Sagemaker in algorithm mode (local emulation on xgboost {xgboost.__version__})")
        run_algorithm_mode(paths)
    except Exception as e:  # noqa: BLE001 - every failure becomes the failure file, as in the container
        message = failure_message(e)
        try:
            os.makedirs(paths.p("output"), exist_ok=True)
            with open(paths.p("output", "failure"), "w") as f:
                f.write(message)
        finally:
            logger.error("Reporting training FAILURE")
            logger.error(message)
        return 1
    os.makedirs(paths.p("output"), exist_ok=True)
    with open(paths.p("output", "success"), "w"):
        pass
    logger.info("Reporting training SUCCESS")
    return 0


if __name__ == "__main__":
    try:
        code = main()
    except SystemExit as stop:  # a host without data leaves the cluster with 0
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # as sagemaker_containers._trainer ends: no waiting on xgboost's threads
