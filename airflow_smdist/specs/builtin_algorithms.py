"""SageMaker's built-in algorithms: channels, input modes, instance class, and how each can scale.

The table is SageMaker Developer Guide's "Built-in algorithms: common information"
(``common-info-all-im-models``): algorithm, channel names, training input mode, instance class and the
*Parallelizable* column ("Algorithms that are parallelizable can be deployed on multiple compute instances
for distributed training"). Each entry keeps that column verbatim in ``parallelizable`` and derives:

* ``multi_instance``: "Yes" / "Yes (...)" -> True unless the qualifier says single instance; "No" -> False.
* ``multi_gpu``: "Yes (only across multiple GPUs on a single instance)" -> True (and multi_instance False);
  "(single GPU device on one or more instances)" -> False; CPU-only algorithms -> False; other "Yes" with a
  GPU instance class -> True; "(single instance only)" -> False.

Where an algorithm's own Developer Guide page says more than the summary table, the page wins and the
entry's ``notes`` say so:

* K-Means: the table says "No", but its own row's instance class reads "single GPU device on one or more
  instances", and the K-Means page recommends ``ShardedByS3Key`` for the train channel ("only one GPU per
  instance is used"): multi_instance True, multi_gpu False.
* Object2Vec: "can train only on a single machine. However, it does offer support for multiple GPUs."
* Seq2Seq: "only set up to train on a single machine. But it does also offer support for multiple GPUs."
* Semantic Segmentation: single machine, and its page lists the multi-GPU ml.p2.8xlarge/16xlarge and
  ml.p3.8xlarge/16xlarge among supported training instances.
* BlazingText: the table says single instance; the page says ``mode=batch_skipgram`` runs on single or
  multiple CPU instances, so :func:`check_scaling` allows that one case when given the hyperparameters.
* XGBoost: one GPU per instance, except with ``use_dask_gpu_training="true"`` (1.7-1 and later), which
  uses every GPU; :func:`check_scaling` honours that hyperparameter.

``name`` is the SDK's ``image_uris`` framework name where the SDK has the image (``xgboost``, ``kmeans``,
``linear-learner``, ``forecasting-deepar``...). AutoGluon-Tabular, CatBoost, LightGBM, TabTransformer and
the TensorFlow image/text algorithms are JumpStart models: their images are resolved through JumpStart,
which needs network access, so :func:`algorithm_image_uri` asks for ``image_uri`` for those.
"""

from __future__ import annotations

from typing import Any, Sequence
from dataclasses import dataclass

from airflow_smdist.specs.errors import SpecError, close_matches
from airflow_smdist.specs.instances import check_instance_type, family, gpu_count, is_gpu, single_gpu_types

INPUT_MODES = ("File", "Pipe", "FastFile")


@dataclass(frozen=True)
class BuiltinAlgorithm:
    """One row of the built-in algorithms table (see the module docstring)."""

    name: str
    display_name: str
    channels: tuple[str, ...]
    required_channels: tuple[str, ...]
    input_modes: tuple[str, ...]
    instance_class: str  # "cpu" | "gpu" | "both"
    multi_instance: bool
    multi_gpu: bool
    parallelizable: str  # the Developer Guide's column, verbatim
    image_framework: str | None = None  # the SDK image_uris name; None: no image in the SDK
    default_version: str | None = None
    notes: str = ""


def _alg(name: str, display: str, channels: Sequence[str], required: Sequence[str], modes: Sequence[str],
         iclass: str, multi_instance: bool, multi_gpu: bool, parallelizable: str, image: bool = True,
         version: str | None = None, notes: str = "") -> BuiltinAlgorithm:
    return BuiltinAlgorithm(
        name=name, display_name=display, channels=tuple(channels), required_channels=tuple(required),
        input_modes=tuple(modes), instance_class=iclass, multi_instance=multi_instance, multi_gpu=multi_gpu,
        parallelizable=parallelizable, image_framework=name if image else None, default_version=version,
        notes=notes,
    )


_F, _FP = ("File",), ("File", "Pipe")
_YES, _NO = "Yes", "No"
_YES_1 = "Yes (only across multiple GPUs on a single instance)"

#: Every built-in algorithm, keyed by name.
ALGORITHMS: dict[str, BuiltinAlgorithm] = {a.name: a for a in (
    _alg("autogluon-tabular", "AutoGluon-Tabular", ["training", "validation"], ["training"], _F,
         "both", False, False, _NO, image=False, notes="CPU or GPU (single instance only); JumpStart model."),
    _alg("blazingtext", "BlazingText", ["train"], ["train"], _FP, "both", False, False, _NO,
         notes="CPU or GPU (single instance only); mode=batch_skipgram scales over several CPU instances."),
    _alg("catboost", "CatBoost", ["training", "validation"], ["training"], _F, "cpu", False, False, _NO,
         image=False, notes="CPU (single instance only); JumpStart model."),
    _alg("forecasting-deepar", "DeepAR Forecasting", ["train", "test"], ["train"], _F, "both", True, True,
         _YES, notes="JSON Lines or Parquet."),
    _alg("factorization-machines", "Factorization Machines", ["train", "test"], ["train"], _FP, "both",
         True, True, _YES, notes="CPU (GPU for dense data); recordIO-protobuf only."),
    _alg("image-classification", "Image Classification - MXNet",
         ["train", "validation", "train_lst", "validation_lst", "model"], ["train", "validation"], _FP,
         "gpu", True, True, _YES),
    _alg("image-classification-tensorflow", "Image Classification - TensorFlow", ["training", "validation"],
         ["training", "validation"], _F, "both", False, True, _YES_1, image=False, notes="JumpStart model."),
    _alg("ipinsights", "IP Insights", ["train", "validation"], ["train"], _F, "both", True, True, _YES),
    _alg("kmeans", "K-Means", ["train", "test"], ["train"], _FP, "both", True, False, _NO,
         notes="CPU or GPU (single GPU device on one or more instances). Table says not parallelizable, but "
               "its instance class and the K-Means page (ShardedByS3Key train channel) say multi-instance."),
    _alg("knn", "K-Nearest-Neighbors (k-NN)", ["train", "test"], ["train"], _FP, "both", True, False, _YES,
         notes="CPU or GPU (single GPU device on one or more instances)."),
    _alg("lda", "LDA", ["train", "test"], ["train"], _FP, "cpu", False, False, _NO,
         notes="CPU (single instance only)."),
    _alg("lightgbm", "LightGBM", ["train", "training", "validation"], [], _F, "cpu", True, False, _YES,
         image=False, notes="The train channel is 'train' or 'training'; JumpStart model."),
    _alg("linear-learner", "Linear Learner", ["train", "validation", "test"], ["train"], _FP, "both", True,
         True, _YES),
    _alg("ntm", "Neural Topic Model", ["train", "validation", "test"], ["train"], _FP, "both", True, True,
         _YES),
    _alg("object2vec", "Object2Vec", ["train", "validation", "test"], ["train"], _F, "both", False, True,
         _NO, notes="CPU or GPU (single instance only); its page: 'does offer support for multiple GPUs'."),
    _alg("object-detection", "Object Detection - MXNet",
         ["train", "validation", "train_annotation", "validation_annotation", "model"],
         ["train", "validation"], _FP, "gpu", True, True, _YES),
    _alg("object-detection-tensorflow", "Object Detection - TensorFlow", ["training", "validation"],
         ["training", "validation"], _F, "gpu", False, True, _YES_1, image=False, notes="JumpStart model."),
    _alg("pca", "PCA", ["train", "test"], ["train"], _FP, "both", True, True, _YES),
    _alg("randomcutforest", "Random Cut Forest", ["train", "test"], ["train"], _FP, "cpu", True, False, _YES),
    _alg("semantic-segmentation", "Semantic Segmentation",
         ["train", "validation", "train_annotation", "validation_annotation", "label_map", "model"],
         ["train", "validation", "train_annotation", "validation_annotation"], _FP, "gpu", False, True, _NO,
         notes="GPU (single instance only); its page lists multi-GPU p2/p3 sizes for training."),
    _alg("seq2seq", "Seq2Seq Modeling", ["train", "validation", "vocab"], ["train", "validation", "vocab"],
         _F, "gpu", False, True, _NO,
         notes="GPU (single instance only); its page: 'does also offer support for multiple GPUs'."),
    _alg("tabtransformer", "TabTransformer", ["training", "validation"], ["training"], _F, "both", False,
         False, _NO, image=False, notes="CPU or GPU (single instance only); JumpStart model."),
    _alg("text-classification-tensorflow", "Text Classification - TensorFlow", ["training", "validation"],
         ["training", "validation"], _F, "both", False, True, _YES_1, image=False, notes="JumpStart model."),
    _alg("xgboost", "XGBoost", ["train", "validation"], ["train"], _FP, "both", True, False, _YES,
         version="1.7-1",
         notes="CPU (or GPU from 1.2-1); one GPU per instance unless use_dask_gpu_training='true' (1.7-1+)."),
)}

#: Other spellings people use for the same algorithms.
ALIASES: dict[str, str] = {
    "autogluon": "autogluon-tabular",
    "deepar": "forecasting-deepar",
    "fm": "factorization-machines",
    "factorization-machine": "factorization-machines",
    "ip-insights": "ipinsights",
    "k-means": "kmeans",
    "k-nn": "knn",
    "linear": "linear-learner",
    "linearlearner": "linear-learner",
    "neural-topic-model": "ntm",
    "rcf": "randomcutforest",
    "random-cut-forest": "randomcutforest",
    "image-classification-mxnet": "image-classification",
    "object-detection-mxnet": "object-detection",
    "sequence-to-sequence": "seq2seq",
}


def get_algorithm(name: str) -> BuiltinAlgorithm:
    """The table entry for ``name`` (case and ``_``/``-`` insensitive; see :data:`ALIASES`)."""
    key = str(name).strip().lower().replace("_", "-").replace(" ", "-")
    key = ALIASES.get(key, key)
    if key in ALGORITHMS:
        return ALGORITHMS[key]
    names = sorted(ALGORITHMS)
    close = close_matches(key, names + sorted(ALIASES), n=1)
    suggestion = ALIASES.get(close[0], close[0]) if close else None
    raise SpecError("algorithm", f"{name!r} is not a SageMaker built-in algorithm.",
                    f"did you mean '{suggestion}'?" if suggestion else f"use one of {', '.join(names)}.")


def _truthy(value: object) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes")


def check_scaling(
    name: str,
    instance_type: str,
    instance_count: int,
    input_mode: str | None,
    hyperparameters: dict[str, Any] | None = None,
) -> list[str]:
    """Check that a training job asks ``name`` to scale only the ways it can.

    Raises SpecError (field = the CreateTrainingJob member) for: an instance type SageMaker does not offer,
    ``instance_count > 1`` for an algorithm that trains on one instance, an input mode it does not support,
    and a GPU-only algorithm on a CPU instance. Returns warnings (strings) for what wastes money without
    failing: a multi-GPU instance for an algorithm that uses one GPU, a GPU instance for a CPU-only algorithm,
    FastFile mode (not listed by the table). ``hyperparameters`` enables the BlazingText ``batch_skipgram``
    and XGBoost ``use_dask_gpu_training`` exceptions (see the module docstring).
    """
    algo = get_algorithm(name)
    hps = hyperparameters or {}
    warnings: list[str] = []
    check_instance_type(instance_type, "ResourceConfig.InstanceType")
    if isinstance(instance_count, bool) or not isinstance(instance_count, int) or instance_count < 1:
        raise SpecError("ResourceConfig.InstanceCount", f"must be a positive integer, not {instance_count!r}.",
                        "give 1 or more.")
    gpu = is_gpu(instance_type)

    if input_mode is not None:
        if input_mode not in INPUT_MODES:
            close = close_matches(str(input_mode), INPUT_MODES, n=1)
            raise SpecError("AlgorithmSpecification.TrainingInputMode", f"{input_mode!r} is not an input mode.",
                            f"did you mean '{close[0]}'?" if close else f"use one of {', '.join(INPUT_MODES)}.")
        if input_mode == "FastFile":
            warnings.append(f"{algo.display_name}: SageMaker's built-in algorithms table lists only "
                            f"{' or '.join(algo.input_modes)} input for it; FastFile presents the data as files, "
                            "but is not documented for this algorithm.")
        elif input_mode not in algo.input_modes:
            raise SpecError("AlgorithmSpecification.TrainingInputMode",
                            f"{algo.display_name} supports only {' or '.join(algo.input_modes)} input, not "
                            f"{input_mode} (SageMaker built-in algorithms table).",
                            f"use TrainingInputMode '{algo.input_modes[0]}'.")

    if algo.instance_class == "gpu" and not gpu:
        raise SpecError("ResourceConfig.InstanceType",
                        f"{algo.display_name} trains only on GPU instances; {instance_type} has no GPU.",
                        "use a GPU instance type such as ml.g5.xlarge or ml.p3.2xlarge.")
    if algo.instance_class == "cpu" and gpu:
        warnings.append(f"{algo.display_name} trains on CPU only: the GPUs of {instance_type} would sit idle. "
                        "Use a CPU instance type (ml.m5 / ml.c5 / ml.m7i...).")

    multi_instance = algo.multi_instance or (
        algo.name == "blazingtext" and hps.get("mode") == "batch_skipgram" and not gpu)
    if instance_count > 1 and not multi_instance:
        extra = (" (BlazingText scales out only with mode=batch_skipgram on CPU instances)"
                 if algo.name == "blazingtext" else "")
        raise SpecError("ResourceConfig.InstanceCount",
                        f"{algo.display_name} trains on a single instance only{extra}; {instance_count} were "
                        f"asked for (SageMaker built-in algorithms table: Parallelizable '{algo.parallelizable}').",
                        "set instance_count=1 and scale up to a larger instance type instead.")

    multi_gpu = algo.multi_gpu or (algo.name == "xgboost" and _truthy(hps.get("use_dask_gpu_training")))
    gpus = gpu_count(instance_type)
    if gpus > 1 and not multi_gpu:
        singles = single_gpu_types(family(instance_type))
        hint = f" such as {singles[-1]}" if singles else ""
        warnings.append(f"{algo.display_name} uses one GPU per instance: {gpus - 1} of the {gpus} GPUs of "
                        f"{instance_type} would sit idle. Use a single-GPU instance type{hint}"
                        + (", or set use_dask_gpu_training='true' (XGBoost 1.7-1 and later)."
                           if algo.name == "xgboost" else "."))
    return warnings


def algorithm_image_uri(name: str, region: str, version: str | None = None) -> str:
    """The ECR training image of a built-in algorithm, from the SageMaker SDK's bundled tables (no network).

    ``version`` defaults to the entry's ``default_version`` (XGBoost ``1.7-1``; the others have one image,
    tagged ``1``). Raises SpecError asking for ``image_uri`` when the SDK has no image for the algorithm
    (the JumpStart-based ones), and with the SDK's message for an unknown version or region.
    """
    algo = get_algorithm(name)
    if algo.image_framework is None:
        raise SpecError(
            "image_uri",
            f"the SageMaker SDK has no built-in image URI for {algo.display_name}: it is a JumpStart model, "
            "whose image is resolved through JumpStart (a network call) rather than the SDK's image tables.",
            "pass image_uri explicitly (sagemaker's image_uris.retrieve(region=..., model_id=..., "
            "model_version=..., image_scope='training', instance_type=...) prints it).",
        )
    from airflow_smdist.specs.images import retrieve_image_uri

    return retrieve_image_uri(
        algo.image_framework, region, version=version or algo.default_version, image_scope="training",
        fields={"version": "algorithm_version", "other": "algorithm"},
    )


# -- metrics the service defines for built-in algorithms -------------------------------------------------------
#: SageMaker's regex for one XGBoost evaluation value: the container prints ``[<round>]\t<data>-<metric>:<value>``
#: and CloudWatch (whose log agent writes a tab as ``#011``) is what the regexes read.
_XGB_METRIC_REGEX = r".*\[[0-9]+\].*#011{data}-{metric}:([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?).*"
#: The metric names of the MetricDefinitions that DescribeTrainingJob reports for ``sagemaker-xgboost`` jobs
#: (union of a 1.5-1 job's and a 2020 tuning job's published descriptions: both data sets for each name, and
#: ``validation:r2``, which SageMaker defines for the validation set only).
_XGB_METRICS = ("accuracy", "auc", "aucpr", "cox-nloglik", "error", "f1", "gamma-deviance", "gamma-nloglik",
                "logloss", "mae", "map", "merror", "mlogloss", "mse", "ndcg", "poisson-nloglik", "rmse",
                "tweedie-nloglik")
_XGB_VALIDATION_ONLY = ("r2",)


def metric_definitions(name: str) -> list[dict[str, str]]:
    """The MetricDefinitions SageMaker itself gives a training job of built-in algorithm ``name``.

    SageMaker attaches these to the job (DescribeTrainingJob shows them under AlgorithmSpecification) and
    *refuses* a CreateTrainingJob request for a built-in algorithm that carries its own ("You can't override the
    metric definitions for Amazon SageMaker algorithms"), so request builders must not add them; the local
    backend uses this function to do what the service does. Only XGBoost's are known here: the others return
    an empty list.
    """
    algo = get_algorithm(name)
    if algo.name != "xgboost":
        return []
    out = []
    for metric in _XGB_METRICS:
        for data in ("train", "validation"):
            out.append({"Name": f"{data}:{metric}", "Regex": _XGB_METRIC_REGEX.format(data=data, metric=metric)})
    for metric in _XGB_VALIDATION_ONLY:
        out.append({"Name": f"validation:{metric}",
                    "Regex": _XGB_METRIC_REGEX.format(data="validation", metric=metric)})
    return out
