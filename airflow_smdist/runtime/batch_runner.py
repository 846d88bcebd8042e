"""The SageMaker inference toolkit's handler contract, and batch transform's record handling, run here.

What a SageMaker serving container does with a model's inference code, for the requests batch transform
sends it: ``model_fn(model_dir)`` once, then per request ``input_fn(data, content_type)`` ->
``predict_fn(data, model)`` -> ``output_fn(prediction, accept)`` (or one ``transform_fn(model, data,
content_type, accept)``), a missing function replaced by its default. And what the batch transform platform
does around it: split each object into records (``SplitType``), pack them into mini-batches
(``BatchStrategy``, ``MaxPayloadInMB``), keep ``MaxConcurrentTransforms`` requests in flight, retry
(``ModelClientConfig``), apply ``DataProcessing`` (``InputFilter`` / ``JoinSource`` / ``OutputFilter``,
JSONPath via jsonpath-ng) and assemble the responses (``AssembleWith``) into the object's ``.out``.

This file is standalone on purpose: stdlib only at import (numpy, torch and jsonpath-ng are imported when a
handler needs them) and no ``airflow_smdist`` import, so the very same file is the entry script of the
processing-job fan-out (uploaded as ``smdist_batch_runner.py``, run on each instance of a ShardedByS3Key
processing job, on SageMaker or locally) and the engine of the local transform workers. The ways of
sharded batch inference therefore produce byte-identical outputs.

Where the user's inference code comes from, as the SageMaker framework serving containers find it:

* ``SAGEMAKER_PROGRAM`` names the module (default ``inference.py``, the inference toolkit's default);
* its directory is ``SAGEMAKER_SUBMIT_DIRECTORY`` when that is a directory (the caller downloads and
  extracts a ``sourcedir.tar.gz`` URI first, as the SKLearn container does), and ``<model_dir>/code`` when
  it is unset or ``/opt/ml/model/code`` (the PyTorch / TensorFlow serving containers, and the SDK's
  repacked model.tar.gz with ``code/inference.py``);
* no such module: the defaults alone run (``model_fn`` then fails as the toolkit's does).

Defaults: ``generic`` is sagemaker-inference-toolkit's ``DefaultInferenceHandler`` with its ``decoder`` /
``encoder`` (CSV, JSON, NPY; no default model_fn / predict_fn); ``sklearn`` is the SKLearn container's
(inputs as float32, ``model.predict``); ``pytorch`` is the PyTorch inference toolkit's (TorchScript
``model.pt``, tensors, ``model(x)`` under ``no_grad``); ``huggingface`` is the Hugging Face inference toolkit's
(``HF_TASK``, else the task of config.json's architecture: a transformers pipeline over the model directory;
JSON / CSV / image / audio requests as ``{"inputs", "parameters"}``; compact JSON answers). ``tensorflow`` is not
the inference toolkit at all but the TensorFlow Serving container's contract (:class:`TensorFlowServingHandler`:
``handler`` or ``input_handler`` / ``output_handler`` around TF Serving's REST API, stood in for by
:class:`SavedModelServer`; docs/contracts.md §4.5).
:func:`defaults_for_image` picks them from the model's image, as the container in that image would.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import importlib
import inspect
import io
import json
import os
import sys
import tarfile
import tempfile
import textwrap
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

if TYPE_CHECKING:  # annotations only: nothing more is imported at run time
    from types import ModuleType

# -- content types (sagemaker_inference.content_types) ------------------------------------------------------
JSON = "application/json"
CSV = "text/csv"
NPY = "application/x-npy"
JSONLINES = "application/jsonlines"
OCTET_STREAM = "application/octet-stream"
ANY = "*/*"
UTF8_TYPES = (JSON, CSV)
SUPPORTED_CONTENT_TYPES = (JSON, CSV, NPY)
DEFAULT_MODULE_NAME = "inference.py"
CODE_IN_MODEL = "/opt/ml/model/code"
MB = 1024 * 1024
RUNNER_NAME = "smdist_batch_runner.py"


class UnsupportedFormatError(Exception):
    """The toolkit's error for a content type its default decoder / encoder does not know."""

    def __init__(self, content_type: str) -> None:
        super().__init__(
            f"Content type {content_type} is not supported by this framework. Please implement input_fn to "
            "deserialize the request data or an output_fn to serialize the response.")


def base_type(content_type: str | None) -> str:
    """``"text/csv; charset=utf-8"`` -> ``"text/csv"``."""
    return (content_type or "").split(";")[0].strip().lower()


# -- decoder / encoder (sagemaker_inference.decoder, .encoder) ------------------------------------------------
def _json_to_numpy(string_like: str | bytes, dtype: Any = None) -> Any:
    import numpy as np

    return np.array(json.loads(string_like), dtype=dtype)


def _csv_to_numpy(string_like: str, dtype: Any = None) -> Any:
    import numpy as np

    return np.genfromtxt(io.StringIO(string_like), dtype=dtype, delimiter=",")


def _npy_to_numpy(npy_array: bytes) -> Any:
    import numpy as np

    return np.load(io.BytesIO(npy_array), allow_pickle=True)


def decode(obj: Any, content_type: str) -> Any:
    """The toolkit's ``decoder.decode``: JSON, CSV or NPY into a numpy array."""
    decoders: dict[str, Callable[[Any], Any]] = {NPY: _npy_to_numpy, CSV: _csv_to_numpy, JSON: _json_to_numpy}
    try:
        decoder = decoders[base_type(content_type)]
    except KeyError:
        raise UnsupportedFormatError(content_type) from None
    return decoder(obj)


def _array_to_json(array_like: Any) -> str:
    def default(value: Any) -> Any:
        if hasattr(value, "tolist"):
            return value.tolist()
        return json.JSONEncoder().default(value)

    return json.dumps(array_like, default=default)


def _array_to_npy(array_like: Any) -> bytes:
    import numpy as np

    buffer = io.BytesIO()
    np.save(buffer, array_like)
    return buffer.getvalue()


def _array_to_csv(array_like: Any) -> str:
    import numpy as np

    stream = io.StringIO()
    np.savetxt(stream, array_like, delimiter=",", fmt="%s")
    return stream.getvalue()


def encode(array_like: Any, content_type: str) -> Any:
    """The toolkit's ``encoder.encode``: an array-like into JSON (str), CSV (str) or NPY (bytes)."""
    encoders: dict[str, Callable[[Any], str | bytes]] = {NPY: _array_to_npy, CSV: _array_to_csv, JSON: _array_to_json}
    try:
        encoder = encoders[base_type(content_type)]
    except KeyError:
        raise UnsupportedFormatError(content_type) from None
    return encoder(array_like)


def parse_accept(accept: str) -> list[str]:
    return [base_type(a) for a in (accept or "").split(",") if a.strip()]


# -- default handlers ---------------------------------------------------------------------------------------
class DefaultInferenceHandler:
    """sagemaker-inference-toolkit's ``DefaultInferenceHandler``: decode / encode, no model_fn or predict_fn."""

    name = "generic"

    def default_model_fn(self, model_dir: str) -> Any:
        raise NotImplementedError(textwrap.dedent("""
            Please provide a model_fn implementation.
            See documentation for model_fn at https://sagemaker.readthedocs.io/en/stable/
            """).strip())

    def default_input_fn(self, input_data: Any, content_type: str) -> Any:
        return decode(input_data, content_type)

    def default_predict_fn(self, data: Any, model: Any) -> Any:
        raise NotImplementedError(textwrap.dedent("""
            Please provide a predict_fn implementation.
            See documentation for predict_fn at https://sagemaker.readthedocs.io/en/stable/
            """).strip())

    def default_output_fn(self, prediction: Any, accept: str) -> Any:
        return encode(prediction, accept), accept


class SKLearnInferenceHandler(DefaultInferenceHandler):
    """The SageMaker scikit-learn container's defaults (``sagemaker_sklearn_container.serving``)."""

    name = "sklearn"

    def default_input_fn(self, input_data: Any, content_type: str) -> Any:
        import numpy as np

        array = decode(input_data, content_type)
        return array.astype(np.float32) if base_type(content_type) in UTF8_TYPES else array

    def default_predict_fn(self, data: Any, model: Any) -> Any:
        return model.predict(data)


class PyTorchInferenceHandler(DefaultInferenceHandler):
    """The SageMaker PyTorch inference toolkit's defaults (``DefaultPytorchInferenceHandler``)."""

    name = "pytorch"

    def default_model_fn(self, model_dir: str) -> Any:
        import torch

        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        path = os.path.join(model_dir, "model.pt")
        if not os.path.exists(path):
            files = [f for f in os.listdir(model_dir) if os.path.isfile(os.path.join(model_dir, f))
                     and os.path.splitext(f)[1] in (".pt", ".pth")]
            if len(files) != 1:
                raise ValueError(f"Exactly one .pth or .pt file is required for PyTorch models: {files}")
            path = os.path.join(model_dir, files[0])
        try:
            jit_load: Callable[..., Any] = torch.jit.load  # torch leaves it unannotated
            return jit_load(path, map_location=device).to(device)
        except RuntimeError as e:
            raise RuntimeError(f"Failed to load {path}. Please ensure model is saved using torchscript.") from e

    def default_input_fn(self, input_data: Any, content_type: str) -> Any:
        import torch

        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        array = decode(input_data, content_type)
        tensor = torch.FloatTensor(array) if base_type(content_type) in UTF8_TYPES else torch.from_numpy(array)
        return tensor.to(device)

    def default_predict_fn(self, data: Any, model: Any) -> Any:
        import torch

        with torch.no_grad():
            model.eval()
            return model(data)

    def default_output_fn(self, prediction: Any, accept: str) -> Any:
        import torch

        if isinstance(prediction, torch.Tensor):
            prediction = prediction.detach().cpu().numpy().tolist()
        for content_type in parse_accept(accept):
            if content_type in SUPPORTED_CONTENT_TYPES:
                encoded = encode(prediction, content_type)
                return (encoded.encode("utf-8") if content_type == CSV else encoded), content_type
        raise UnsupportedFormatError(accept)


# -- the Hugging Face inference toolkit (sagemaker-huggingface-inference-toolkit 2.6.0: handler_service.py,
# decoder_encoder.py, transformers_utils.py, diffusers_utils.py, content_types.py) ------------------------------
#: transformers_utils.ARCHITECTURES_2_TASK: a config's architecture (by its ending) -> the pipeline task
HF_ARCHITECTURES_2_TASK = {
    "TapasForQuestionAnswering": "table-question-answering",
    "ForQuestionAnswering": "question-answering",
    "ForTokenClassification": "token-classification",
    "ForSequenceClassification": "text-classification",
    "ForMultipleChoice": "multiple-choice",
    "ForMaskedLM": "fill-mask",
    "ForCausalLM": "text-generation",
    "ForConditionalGeneration": "text2text-generation",
    "MTModel": "text2text-generation",
    "EncoderDecoderModel": "text2text-generation",
    "GPT2LMHeadModel": "text-generation",
    "T5WithLMHeadModel": "text2text-generation",
}
#: get_pipeline: the tasks whose pipeline takes the model directory as its feature extractor (else tokenizer)
HF_FEATURE_EXTRACTOR_TASKS = ("automatic-speech-recognition", "image-segmentation", "image-classification",
                              "audio-classification", "object-detection", "zero-shot-image-classification")
HF_IMAGE_TYPES = ("image/jpeg", "image/png", "image/tiff", "image/bmp", "image/gif", "image/webp", "image/x-image")
HF_AUDIO_TYPES = ("audio/x-flac", "audio/mpeg", "audio/wave", "audio/ogg", "audio/x-audio")


def _strtobool(value: str) -> bool:
    """transformers_utils.strtobool."""
    value = value.lower()
    if value in ("y", "yes", "t", "true", "on", "1"):
        return True
    if value in ("n", "no", "f", "false", "off", "0"):
        return False
    raise ValueError(f"invalid truth value {value!r}")


def hf_infer_task(config_path: str) -> str:
    """transformers_utils.infer_task_from_model_architecture: the task from config.json's first architecture
    (the last matching ending wins); sets ``HF_TASK``, as the toolkit does."""
    with open(config_path) as f:
        architecture = json.load(f).get("architectures", [None])[0]
    task = None
    for ending, candidate in HF_ARCHITECTURES_2_TASK.items():
        if architecture.endswith(ending):
            task = candidate
    if task is None:
        raise ValueError(f"Task couldn't be inferenced from {architecture}.Inference Toolkit can only inference tasks "
                         f"from architectures ending with {list(HF_ARCHITECTURES_2_TASK)}.Use env `HF_TASK` to "
                         "define your task.")
    os.environ["HF_TASK"] = task
    return task


class _HFText2Image:
    """diffusers_utils.SMDiffusionPipelineForText2Image on the CPU: the first image of one per prompt."""

    def __init__(self, model_dir: str) -> None:
        import torch
        from diffusers import DiffusionPipeline

        self.pipeline = DiffusionPipeline.from_pretrained(model_dir, torch_dtype=torch.float32).to("cpu")

    def __call__(self, prompt: Any, **kwargs: Any) -> Any:
        kwargs.pop("num_images_per_prompt", None)
        return self.pipeline(prompt, num_images_per_prompt=1, **kwargs).images[0]


def _hf_json_default(obj: Any) -> Any:
    """decoder_encoder._JSONEncoder.default: numpy scalars, arrays (``tolist``), datetimes, PIL images (PNG,
    base64)."""
    import base64
    import datetime

    kind = type(obj).__module__.split(".")[0]
    if kind == "numpy" and hasattr(obj, "item") and getattr(obj, "ndim", 1) == 0:
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, datetime.datetime):
        return str(obj)
    if kind == "PIL":
        with io.BytesIO() as out:
            obj.save(out, format="PNG")
            return base64.b64encode(out.getvalue()).decode("utf-8")
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def hf_decode(content: Any, content_type: str) -> Any:
    """decoder_encoder.decode: JSON as it is (a dict for pipelines), CSV with an ``inputs`` / ``question`` /
    ``context`` header, NPY, images ({"inputs": PIL image}) and audio ({"inputs": bytes}); the content type
    as given (the toolkit matches it exactly)."""
    if content_type == JSON:
        return json.loads(content)
    if content_type == CSV:
        if not any(h in content.splitlines()[0].lower() for h in ("question", "context", "inputs")):
            raise ValueError("You need to provide the correct CSV with Header columns to use it with the inference "
                             "toolkit default handler.")
        rows = list(csv.DictReader(io.StringIO(content)))
        return {"inputs": [r["inputs"] for r in rows]} if "inputs" in rows[0] else {"inputs": rows}
    if content_type == NPY:
        return _npy_to_numpy(content)
    if content_type in HF_IMAGE_TYPES:
        from PIL import Image

        return {"inputs": Image.open(io.BytesIO(content)).convert("RGB")}
    if content_type in HF_AUDIO_TYPES:
        return {"inputs": bytes(content)}
    raise UnsupportedFormatError(content_type)


def hf_encode(content: Any, accept: str) -> Any:
    """decoder_encoder.encode: compact JSON (non-ASCII kept), CSV of the result's dicts, NPY, or an image."""
    if accept == JSON:
        return json.dumps(content, ensure_ascii=False, allow_nan=False, indent=None, default=_hf_json_default,
                          separators=(",", ":"))
    if accept == CSV:
        stream = io.StringIO()
        rows = content if isinstance(content, list) else list(content)
        writer = csv.DictWriter(stream, rows[0].keys())
        writer.writeheader()
        writer.writerows(rows)
        return stream.getvalue()
    if accept == NPY:
        return _array_to_npy(content)
    if accept in HF_IMAGE_TYPES:
        fmt = "PNG" if accept == "image/x-image" else accept.split("/")[-1].upper()
        with io.BytesIO() as out:
            content.save(out, format=fmt)
            return out.getvalue()
    raise UnsupportedFormatError(accept)


class HuggingFaceInferenceHandler(DefaultInferenceHandler):
    """The Hugging Face inference toolkit's defaults (``HuggingFaceHandlerService``: load, preprocess, predict,
    postprocess), on the CPU (device -1). Not here: ``HF_MODEL_ID`` (a model downloaded from the Hub at start),
    optimum-neuron and remote code with a GPU (``HF_TRUST_REMOTE_CODE`` is passed to the pipeline)."""

    name = "huggingface"

    def default_model_fn(self, model_dir: str) -> Any:
        files = os.listdir(model_dir)
        if "HF_TASK" in os.environ:
            task = os.environ["HF_TASK"]
        elif "config.json" in files:
            task = hf_infer_task(os.path.join(model_dir, "config.json"))
        elif "model_index.json" in files:
            task = "text-to-image"
        else:
            try:
                from transformers.pipelines import SUPPORTED_TASKS
                tasks = str(list(SUPPORTED_TASKS.keys()))
            except ImportError:  # no transformers here: the same words without the list
                tasks = "transformers' pipeline tasks"
            raise ValueError(f"You need to define one of the following {tasks} or text-to-image as env 'HF_TASK'.",
                             403)
        return self.pipeline(task, model_dir)

    @staticmethod
    def pipeline(task: str | None, model_dir: str) -> Any:
        """transformers_utils.get_pipeline for a model directory."""
        if task is None:
            raise OSError("The task for this model is not set: Please set one: https://huggingface.co/docs#how-is-a-"
                          "models-type-of-inference-api-and-widget-determined")
        import importlib.util

        if task == "text-to-image" and importlib.util.find_spec("diffusers") is not None:
            return _HFText2Image(model_dir)
        from transformers import pipeline

        key = "feature_extractor" if task in HF_FEATURE_EXTRACTOR_TASKS else "tokenizer"
        trust = _strtobool(os.environ.get("HF_TRUST_REMOTE_CODE", "False"))
        return pipeline(task=task, model=model_dir, device=-1, trust_remote_code=trust, **{key: model_dir})

    def default_input_fn(self, input_data: Any, content_type: str) -> Any:
        task = os.environ.get("HF_TASK")
        if task in ("zero-shot-classification", "table-question-answering") and content_type == CSV:
            raise ValueError(f"content type {content_type} not support with {task}, use different content_type")
        return hf_decode(input_data, content_type)

    def default_predict_fn(self, data: Any, model: Any) -> Any:
        inputs = data.pop("inputs", data)
        parameters = data.pop("parameters", None)
        return model(inputs, **parameters) if parameters is not None else model(inputs)

    def default_output_fn(self, prediction: Any, accept: str) -> Any:
        return hf_encode(prediction, accept)


DEFAULT_HANDLERS = {"generic": DefaultInferenceHandler, "sklearn": SKLearnInferenceHandler,
                    "pytorch": PyTorchInferenceHandler, "huggingface": HuggingFaceInferenceHandler}


def defaults_for_image(image: str | None) -> str:
    """Which container's defaults an image runs: ``sklearn``, ``pytorch``, ``huggingface``, ``tensorflow`` (the
    TensorFlow Serving container: :class:`TensorFlowServingHandler`) or ``generic``."""
    repo = (image or "").rsplit("/", 1)[-1].split(":")[0].split("@")[0].lower()
    if "scikit-learn" in repo or "sklearn" in repo:
        return "sklearn"
    if repo.startswith("pytorch"):
        return "pytorch"
    if repo.startswith(("huggingface-pytorch-inference", "huggingface-tensorflow-inference")):
        return "huggingface"  # the Hugging Face inference toolkit's serving (not TGI / TEI, own servers)
    if repo.startswith("tensorflow-inference") or repo.startswith("sagemaker-tensorflow-serving"):
        return "tensorflow"
    return "generic"


@dataclass
class Context:
    """The slice of the model server's request context that handlers taking a ``context`` argument read."""

    model_dir: str
    system_properties: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.system_properties.setdefault("model_dir", self.model_dir)
        self.system_properties.setdefault("gpu_id", None)


def code_dir_for(model_dir: str, submit_directory: str | None) -> str:
    """The directory the user's module is imported from (see the module docstring)."""
    if submit_directory and submit_directory.rstrip("/") != CODE_IN_MODEL and os.path.isdir(submit_directory):
        return submit_directory
    return os.path.join(model_dir, "code")


class Handler:
    """The model server's Transformer: the user's module's handlers over the defaults, model loaded once."""

    def __init__(self, model_dir: str, *, code_dir: str | None = None, program: str | None = None,
                 defaults: str = "generic", default_accept: str | None = None) -> None:
        self.model_dir = model_dir
        self.code_dir = code_dir or os.path.join(model_dir, "code")
        program = program or os.environ.get("SAGEMAKER_PROGRAM") or DEFAULT_MODULE_NAME
        self.module_name = program[:-3] if program.endswith(".py") else program
        self.default_accept = default_accept or os.environ.get("SAGEMAKER_DEFAULT_INVOCATIONS_ACCEPT") or JSON
        if defaults not in DEFAULT_HANDLERS:
            raise ValueError(f"defaults {defaults!r}: use one of {sorted(DEFAULT_HANDLERS)}")
        self.defaults = DEFAULT_HANDLERS[defaults]()
        self.context = Context(model_dir)
        self.user_module = self._import_user_module()
        self._set_functions()
        self.model = self._run(self.model_fn, model_dir)

    def _import_user_module(self) -> ModuleType | None:
        if not os.path.isdir(self.code_dir):
            return None
        if self.code_dir not in sys.path:
            sys.path.insert(0, self.code_dir)
        path = os.path.join(self.code_dir, *self.module_name.split("."))
        if not (os.path.exists(path + ".py") or os.path.exists(os.path.join(path, "__init__.py"))):
            return None  # the container finds no user module: the defaults alone
        for name in [m for m in sys.modules if m == self.module_name or m.startswith(self.module_name + ".")]:
            del sys.modules[name]  # a module of that name imported earlier is not this model's
        importlib.invalidate_caches()
        return importlib.import_module(self.module_name)

    def _set_functions(self) -> None:
        d, user = self.defaults, self.user_module
        get: Callable[[str], Any] = ((lambda name: getattr(user, name, None)) if user is not None
                                     else (lambda name: None))
        transform_fn, input_fn, predict_fn, output_fn = (get(n) for n in
                                                         ("transform_fn", "input_fn", "predict_fn", "output_fn"))
        if transform_fn and (input_fn or predict_fn or output_fn):
            raise ValueError("Cannot use transform_fn implementation in conjunction with input_fn, predict_fn, "
                             "and/or output_fn implementation")
        self.model_fn = get("model_fn") or d.default_model_fn
        self.input_fn = input_fn or d.default_input_fn
        self.predict_fn = predict_fn or d.default_predict_fn
        self.output_fn = output_fn or d.default_output_fn
        self.transform_fn = transform_fn or self._default_transform_fn

    def _run(self, func: Callable[..., Any], *args: Any) -> Any:
        """The toolkit's _run_handler_function: pass the context when the function takes one more argument."""
        try:
            n = len(inspect.signature(func).parameters)
        except (TypeError, ValueError):
            n = len(args)
        if n == len(args):
            return func(*args)
        if n == len(args) + 1:
            return func(*args, self.context)
        raise TypeError(f"{func.__name__} takes {n} arguments but {len(args)} were given.")

    def _default_transform_fn(self, model: Any, input_data: Any, content_type: str | None, accept: str) -> Any:
        data = self._run(self.input_fn, input_data, content_type)
        prediction = self._run(self.predict_fn, data, model)
        return self._run(self.output_fn, prediction, accept)

    def invoke(self, payload: bytes, content_type: str | None, accept: str | None) -> tuple[bytes, str]:
        """One /invocations request: (response body, response content type)."""
        if not accept or accept == ANY:
            accept = self.default_accept
        data: Any = payload
        if base_type(content_type) in UTF8_TYPES:
            data = payload.decode("utf-8")
        result = self._run(self.transform_fn, self.model, data, content_type, accept)
        body, response_type = (result[0], result[1]) if isinstance(result, tuple) else (result, accept)
        if hasattr(body, "get_data"):  # a Flask/werkzeug Response (the SKLearn container's worker.Response)
            body = body.get_data()
        if isinstance(body, str):
            body = body.encode("utf-8")
        elif not isinstance(body, (bytes, bytearray)):
            body = encode(body, response_type).encode("utf-8") if base_type(response_type) != NPY \
                else encode(body, response_type)
        return bytes(body), response_type


# -- the TensorFlow Serving container (tensorflow-inference images) -----------------------------------------
# What the image's /sagemaker/serve does (deep-learning-containers, tensorflow/inference/docker/build_artifacts/
# sagemaker: serve.py, python_service.py, tfs_utils.py, tensorflowServing.js): TF Serving (C++) serves every
# SavedModel under /opt/ml/model on REST port 8501; /invocations goes through the model's
# code/inference.py (``handler(data, context)``, or ``input_handler`` -> POST to ``context.rest_uri`` ->
# ``output_handler``) when it exists, else through nginx's tensorflowServing.js (JSON / JSON lines / CSV into TF
# Serving's ``{"instances": ...}``). The server binary is not a Python package: a REST server here stands in for
# it (``:predict``, loading each SavedModel in a TensorFlow session as TF Serving does), docs/contracts.md.
TFS_DEFAULTS = "tensorflow"
TFS_REST_PORT = 8501
TFS_GRPC_PORT = "9000"
TFS_CONTEXT_FIELDS = ("model_name, model_version, method, rest_uri, grpc_port, channel, custom_attributes, "
                      "request_content_type, accept_header, content_length")


class TfsError(Exception):
    """A TF Serving REST error: its HTTP status and ``{"error": message}`` body."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)


def find_saved_models(model_dir: str) -> dict[str, dict[int, str]]:
    """TF Serving's model config as serve.py writes it (tfs_utils.find_models / find_model_versions): each
    directory holding a ``<number>/saved_model.pb`` is a model named after the directory (the model directory
    itself: ``model``, as /opt/ml/model is), its numbered directories its versions (leading zeros dropped)."""
    models: dict[str, dict[int, str]] = {}
    for dirpath, dirs, files in os.walk(model_dir):
        dirs.sort()
        version = os.path.basename(dirpath)
        if "saved_model.pb" in files and version.isdigit() and os.path.abspath(dirpath) != os.path.abspath(model_dir):
            base = os.path.dirname(dirpath)
            name = "model" if os.path.abspath(base) == os.path.abspath(model_dir) else os.path.basename(base)
            models.setdefault(name, {})[int(version)] = dirpath
    return models


def _tfs_value(array: Any) -> Any:
    """A result tensor as TF Serving's JSON writes it: float32 at float32's shortest repr (3.5, 0.1), bytes as
    text."""
    import numpy as np

    if array.dtype in (np.float32, np.float16) and array.size:
        return np.vectorize(lambda v: float(str(v)), otypes=[object])(array).tolist()
    if array.dtype.kind in "SO" and array.size:
        return np.vectorize(lambda v: v.decode("utf-8", "replace") if isinstance(v, bytes) else v,
                            otypes=[object])(array).tolist()
    return array.tolist()


def _tfs_decode_b64(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"b64"}:
        import base64

        return base64.b64decode(value["b64"])
    if isinstance(value, list):
        return [_tfs_decode_b64(v) for v in value]
    return value


class SavedModelServer:
    """TF Serving's ``:predict`` REST API over the model directory's SavedModels, each version loaded at start
    into its own TensorFlow session (tags ``serve``), as TF Serving does: a model that does not load fails the
    start. Requests: ``{"instances": [...]}`` (row format) or ``{"inputs": ...}`` (columnar), optional
    ``signature_name`` (default ``serving_default``); answers ``{"predictions": ...}`` / ``{"outputs": ...}``."""

    def __init__(self, model_dir: str) -> None:
        self.paths = find_saved_models(model_dir)
        if not self.paths:
            raise ValueError("no SavedModel bundles found!")  # serve.py's words
        self.default_model = os.environ.get("SAGEMAKER_TFS_DEFAULT_MODEL_NAME", "None")
        if self.default_model == "None":
            self.default_model = sorted(self.paths)[0]
        self.loaded: dict[tuple[str, int], tuple[Any, Any]] = {}
        import tensorflow as tf

        for name, versions in self.paths.items():
            for version, path in versions.items():
                graph = tf.Graph()
                session = tf.compat.v1.Session(graph=graph)
                with graph.as_default():
                    meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], path)
                self.loaded[(name, version)] = (session, meta)
                print(f"TF Serving stand-in: loaded {name} version {version} from {path} "
                      f"(signatures: {', '.join(sorted(meta.signature_def))})", flush=True)
        self.httpd: Any = None

    def status(self, name: str) -> dict[str, Any]:
        if name not in self.paths:
            raise TfsError(404, f"Could not find any versions of model {name}")
        return {"model_version_status": [{"version": str(v), "state": "AVAILABLE",
                                          "status": {"error_code": "OK", "error_message": ""}}
                                         for v in sorted(self.paths[name], reverse=True)]}

    def session_for(self, name: str, version: str | None) -> tuple[Any, Any]:
        versions = self.paths.get(name)
        if version is None:
            if not versions:
                raise TfsError(404, f"Servable not found for request: Latest({name})")
            return self.loaded[(name, max(versions))]
        if not versions or not version.isdigit() or int(version) not in versions:
            raise TfsError(404, f"Servable not found for request: Specific({name}, {version})")
        return self.loaded[(name, int(version))]

    def predict(self, name: str, version: str | None, body: bytes) -> dict[str, Any]:
        session, meta = self.session_for(name, version)
        if not body.strip():
            raise TfsError(400, "JSON Parse error: The document is empty")
        try:
            request = json.loads(body)
        except ValueError as e:
            raise TfsError(400, f"JSON Parse error: {e}") from None
        if not isinstance(request, dict):
            raise TfsError(400, "JSON Value: " + body.decode("utf-8", "replace")[:200] + " Is not object")
        signature_name = request.get("signature_name", "serving_default")
        if signature_name not in meta.signature_def:
            raise TfsError(400, f'Serving signature name: "{signature_name}" not found in signature def')
        signature = meta.signature_def[signature_name]
        if "instances" in request:
            row = True
            feeds = self._row_feeds(signature, request["instances"])
        elif "inputs" in request:
            row = False
            feeds = self._columnar_feeds(signature, request["inputs"])
        else:
            raise TfsError(400, "Missing 'inputs' or 'instances' key")
        outputs = self._run(session, signature, feeds)
        if row:
            if len(outputs) == 1:
                return {"predictions": _tfs_value(next(iter(outputs.values())))}
            n = len(next(iter(outputs.values())))
            return {"predictions": [{k: _tfs_value(v[i]) for k, v in outputs.items()} for i in range(n)]}
        if len(outputs) == 1:
            return {"outputs": _tfs_value(next(iter(outputs.values())))}
        return {"outputs": {k: _tfs_value(v) for k, v in outputs.items()}}

    def _row_feeds(self, signature: Any, instances: Any) -> dict[str, Any]:
        if not isinstance(instances, list):
            raise TfsError(400, "Expecting 'instances' to be an list/array")
        keys = sorted(signature.inputs)
        if instances and all(isinstance(i, dict) and set(i) != {"b64"} for i in instances):
            missing = [k for k in keys if any(k not in i for i in instances)]
            if missing:
                raise TfsError(400, f"Failed to process element: 0 key: {missing[0]} of 'instances' list. Error: "
                               "Invalid argument: JSON object: does not have named input")
            return {k: [_tfs_decode_b64(i[k]) for i in instances] for k in keys}
        if len(keys) != 1:
            raise TfsError(400, "instances is a plain list, but expecting list of objects as multiple input "
                           "tensors required as per tensorinfo_map")
        return {keys[0]: _tfs_decode_b64(instances)}

    def _columnar_feeds(self, signature: Any, inputs: Any) -> dict[str, Any]:
        keys = sorted(signature.inputs)
        if isinstance(inputs, dict) and set(inputs) != {"b64"}:
            missing = [k for k in keys if k not in inputs]
            if missing:
                raise TfsError(400, f"Missing named input: {missing[0]} in 'inputs' object.")
            return {k: _tfs_decode_b64(inputs[k]) for k in keys}
        if len(keys) != 1:
            raise TfsError(400, "inputs is a plain value/list, but expecting an object as multiple input tensors "
                           "required as per tensorinfo_map")
        return {keys[0]: _tfs_decode_b64(inputs)}

    @staticmethod
    def _run(session: Any, signature: Any, feeds: dict[str, Any]) -> dict[str, Any]:
        """The signature's outputs for these inputs. Fed as TF Serving feeds (the C++ session, no client-side
        shape check: ``[1.0, 2.0]`` feeds a ``(?, 1)`` placeholder, as TF Serving takes it)."""
        import numpy as np
        import tensorflow as tf

        graph = session.graph
        feed_dict = {}
        for key, value in feeds.items():
            info = signature.inputs[key]
            t = graph.get_tensor_by_name(info.name)
            try:
                feed_dict[t.ref()] = np.asarray(value, dtype=t.dtype.as_numpy_dtype)
            except (TypeError, ValueError) as e:
                raise TfsError(400, f"Failed to process element of input {key}: {e}") from None
        names = sorted(signature.outputs)
        fetches = [graph.get_tensor_by_name(signature.outputs[k].name) for k in names]
        try:
            results = session._do_run(None, [], fetches, feed_dict, None, None)
        except tf.errors.OpError as e:
            raise TfsError(400, e.message) from None
        return dict(zip(names, results))

    def answer(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        """One REST request: (status, JSON body)."""
        import re

        found = re.fullmatch(r"/v1/models/([^/:]+)(?:/versions/([^/:]+))?(?::([a-zA-Z]+))?", path.split("?")[0])
        try:
            if not found:
                raise TfsError(404, "Malformed request: " + method + " " + path)
            name, version, verb = found.groups()
            if method == "GET" and verb is None:
                result = self.status(name)
            elif method == "POST" and verb == "predict":
                result = self.predict(name, version, body)
            elif method == "POST" and verb in ("classify", "regress"):
                raise TfsError(501, f"the local TF Serving stand-in answers :predict only, not :{verb} (tf.Example "
                               "inputs); run the job with backend='sagemaker'")
            else:
                raise TfsError(404, "Malformed request: " + method + " " + path)
            return 200, json.dumps(result).encode("utf-8")
        except TfsError as e:
            return e.status, json.dumps({"error": str(e)}).encode("utf-8")

    def serve(self) -> int:
        """Listen on loopback: port 8501 (TF Serving's REST port in the container) where free, else any port."""
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        server = self

        class Rest(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _reply(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                status, body = server.answer(method, self.path, self.rfile.read(length) if length else b"")
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # http.server's names
                self._reply("GET")

            def do_POST(self) -> None:
                self._reply("POST")

            def log_message(self, format: str, *args: Any) -> None:  # TF Serving does not log requests
                return

        try:
            self.httpd = ThreadingHTTPServer(("127.0.0.1", TFS_REST_PORT), Rest)
        except OSError:
            self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Rest)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, name="tfs-rest", daemon=True).start()
        return int(self.httpd.server_address[1])


def _njs_csv_to_json(data: str) -> str:
    """tensorflowServing.js ``csv_request``, line for line (JavaScript's ``replace`` of a string replaces the
    first occurrence only, and so does this)."""
    import re

    needs_quotes = re.match(r"\s*(\"|[\d.Ee+\-]+.*)", data) is None
    lines = re.split(r"\r?\n", data.strip())
    builder = ['{"instances":[']
    for i, raw in enumerate(lines):
        line = raw.strip()
        if line:
            multiple = "," in line
            piece = '"' + line.replace('"', '\\"', 1).replace(",", '","', 1) + '"' if needs_quotes else line
            builder.append(f"[{piece}]" if multiple else piece)
            if i != len(lines) - 1:
                builder.append(",")
    builder.append("]}")
    return "".join(builder)


def _njs_json_to_tfs(data: str) -> str:
    """tensorflowServing.js ``json_request``: TF Serving JSON as it is, JSON lines as one instances list,
    any other JSON wrapped as ``{"instances": [...]}``."""
    import re

    if re.search(r"\"(instances|inputs|examples)\"\s*:", data):
        return data
    if re.search(r"[}\]]\s*[\[{]", data):
        lines = re.split(r"\r?\n", data.strip())
        builder = ['{"instances":', "[" if len(lines) != 1 else ""]
        for i, raw in enumerate(lines):
            line = raw.strip()
            if line:
                builder.append(("" if i == 0 else ",") + line)
        builder.append("}" if len(lines) == 1 else "]}")
        return "".join(builder)
    if not re.match(r"\s*\[\s*\[", data):
        data = "[" + data + "]"
    return '{"instances":' + data + "}"


class TensorFlowServingHandler:
    """The TensorFlow Serving container's /invocations, with :class:`SavedModelServer` for TF Serving: the
    model's ``code/inference.py`` (``handler``, or ``input_handler`` and ``output_handler`` around a POST to
    ``context.rest_uri``: python_service.py) or, without it, nginx's JSON / CSV conversion (tensorflowServing.js).
    ``code/`` and ``code/lib`` are on the path (serve.py's PYTHONPATH); ``SAGEMAKER_PROGRAM`` is not read (the
    container always imports ``/opt/ml/model/code/inference.py``). ``context.channel`` is None: no gRPC port."""

    name = TFS_DEFAULTS

    def __init__(self, model_dir: str, **_ignored: Any) -> None:
        from collections import namedtuple

        self.model_dir = model_dir
        self.server = SavedModelServer(model_dir)
        self.port = self.server.serve()
        # a namedtuple class kept on the instance (python_service.py's Context), which mypy does not model
        self.context_type: Any = namedtuple("Context", TFS_CONTEXT_FIELDS)  # type: ignore[misc]
        code = os.path.join(model_dir, "code")
        for path in (code, os.path.join(code, "lib")):
            if os.path.isdir(path) and path not in sys.path:
                sys.path.insert(0, path)
        script = os.path.join(code, "inference.py")
        self.handler = self._import_handlers(script) if os.path.exists(script) else None
        print(f"TF Serving stand-in: REST API on port {self.port} (model {self.server.default_model}); "
              + (f"handlers from {script}" if self.handler else "no inference.py: the container's nginx "
                 "conversion of JSON and CSV"), flush=True)

    @staticmethod
    def _import_handlers(script: str) -> Callable[..., Any]:
        """python_service.py's ``_import_handlers`` and ``_make_handler``."""
        import importlib.util

        spec = importlib.util.spec_from_file_location("inference", script)
        if spec is None or spec.loader is None:  # a .py path always has a spec with a loader
            raise ImportError(f"cannot load {script} as a module")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        if hasattr(module, "handler"):
            user_handler: Callable[..., Any] = module.handler
            return user_handler
        if not (hasattr(module, "input_handler") and hasattr(module, "output_handler")):
            raise NotImplementedError("Handlers are not implemented correctly in user script.")
        import requests

        def handler(data: Any, context: Any) -> Any:
            processed_input = module.input_handler(data, context)
            response = requests.post(context.rest_uri, data=processed_input)
            return module.output_handler(response, context)

        return handler

    def invoke(self, payload: bytes, content_type: str | None, accept: str | None) -> tuple[bytes, str]:
        """One /invocations request: (response body, response content type). A handler's exception is the model
        server's 500; the nginx path's non-200 answer from TF Serving, its status."""
        content_type = content_type or JSON  # tfs_utils.parse_request's defaults
        accept = accept or JSON
        if self.handler is None:
            return self._default(payload, content_type, accept)
        rest_uri = f"http://localhost:{self.port}/v1/models/{self.server.default_model}:predict"
        context = self.context_type(None, None, None, rest_uri, TFS_GRPC_PORT, None, None, content_type, accept,
                                    len(payload))
        body, response_type = self.handler(io.BytesIO(payload), context)
        if isinstance(body, str):
            body = body.encode("utf-8")
        return bytes(body), response_type or accept

    def _default(self, payload: bytes, content_type: str, accept: str) -> tuple[bytes, str]:
        text = payload.decode("utf-8")
        if content_type in (JSON, JSONLINES, "application/jsons"):
            request = _njs_json_to_tfs(text)
        elif content_type == CSV:
            request = _njs_csv_to_json(text)
        else:
            raise TransformError(f"415 Unsupported Media Type: {content_type or 'Unknown'} (the TensorFlow Serving "
                                 "container takes application/json, application/jsonlines and text/csv without an "
                                 "inference.py)")
        status, body = self.server.answer("POST", f"/v1/models/{self.server.default_model}:predict",
                                          request.encode("utf-8"))
        if status != 200:
            raise RuntimeError(f"TF Serving answered {status}: {body.decode('utf-8', 'replace')}")
        types = [t for t in accept.strip().replace(" ", "", 1).split(",")]
        if JSONLINES in types or JSON in types:
            return body.replace(b"\n", b""), types[0]
        return body, accept


def make_handler(model_dir: str, *, code_dir: str | None = None, program: str | None = None,
                 defaults: str = "generic") -> Any:
    """The model server of the model's image: the TensorFlow Serving container's for ``tensorflow``, the
    inference toolkit's (:class:`Handler`) for the others."""
    if defaults == TFS_DEFAULTS:
        return TensorFlowServingHandler(model_dir)
    return Handler(model_dir, code_dir=code_dir, program=program, defaults=defaults)


# -- records, mini-batches, DataProcessing ------------------------------------------------------------------
@dataclass
class Settings:
    """The request fields that shape how objects become requests and responses become ``.out`` objects."""

    content_type: str | None = None
    accept: str | None = None
    split_type: str = "None"
    compression: str = "None"
    batch_strategy: str = "SingleRecord"
    max_payload_mb: int = 6
    max_concurrent_transforms: int = 1
    assemble_with: str = "None"
    input_filter: str | None = None
    join_source: str = "None"
    output_filter: str | None = None
    invocations_timeout: float = 600.0
    invocations_max_retries: int = 3

    @classmethod
    def from_request(cls, request: dict[str, Any]) -> "Settings":
        """From a CreateTransformJob request, with SageMaker's defaults for what it leaves out."""
        ti, to = request["TransformInput"], request["TransformOutput"]
        dp = request.get("DataProcessing") or {}
        mc = request.get("ModelClientConfig") or {}
        return cls(content_type=ti.get("ContentType"), accept=to.get("Accept"),
                   split_type=ti.get("SplitType") or "None", compression=ti.get("CompressionType") or "None",
                   batch_strategy=request.get("BatchStrategy") or "SingleRecord",
                   max_payload_mb=int(request["MaxPayloadInMB"]) if request.get("MaxPayloadInMB") is not None else 6,
                   max_concurrent_transforms=int(request.get("MaxConcurrentTransforms") or 1),
                   assemble_with=to.get("AssembleWith") or "None",
                   input_filter=dp.get("InputFilter"), join_source=dp.get("JoinSource") or "None",
                   output_filter=dp.get("OutputFilter"),
                   invocations_timeout=float(mc.get("InvocationsTimeoutInSeconds") or 600),
                   invocations_max_retries=int(mc["InvocationsMaxRetries"]) if mc.get("InvocationsMaxRetries")
                   is not None else 3)

    def to_args(self) -> list[str]:
        """The runner's command-line arguments for these settings (the processing-job fan-out)."""
        args = ["--split-type", self.split_type, "--compression", self.compression,
                "--batch-strategy", self.batch_strategy, "--max-payload-mb", str(self.max_payload_mb),
                "--max-concurrent-transforms", str(self.max_concurrent_transforms),
                "--assemble-with", self.assemble_with, "--join-source", self.join_source,
                "--invocations-timeout", str(int(self.invocations_timeout)),
                "--invocations-max-retries", str(self.invocations_max_retries)]
        for flag, value in (("--content-type", self.content_type), ("--accept", self.accept),
                            ("--input-filter", self.input_filter), ("--output-filter", self.output_filter)):
            if value:
                args += [flag, value]
        return args

    @property
    def uses_data_processing(self) -> bool:
        return self.join_source == "Input" or bool(self.output_filter and self.output_filter != "$")


class TransformError(Exception):
    """An object could not be transformed; says which object and, where known, which record."""

    def __init__(self, message: str, *, record: int | None = None, line: int | None = None) -> None:
        self.record = record
        self.line = line
        super().__init__(message)


@dataclass
class Record:
    number: int  # 1-based position among the object's records
    line: int | None  # 1-based line in the (decompressed) object, SplitType Line only
    data: bytes


def split_records(data: bytes, split_type: str) -> list[Record]:
    """SplitType ``None``: the object is one record. ``Line``: one record per line; blank lines carry no
    record (and ``\\r\\n`` endings lose their ``\\r``). RecordIO / TFRecord are not split locally."""
    if split_type in (None, "", "None"):
        return [Record(1, None, data)]
    if split_type != "Line":
        raise TransformError(f"SplitType {split_type!r} is not supported by the local backend (only None and "
                             "Line); run the job with backend='sagemaker'.")
    out: list[Record] = []
    for i, raw in enumerate(data.split(b"\n"), start=1):
        line = raw[:-1] if raw.endswith(b"\r") else raw
        if line.strip():
            out.append(Record(len(out) + 1, i, line))
    return out


def count_records(data: bytes, split_type: str = "Line", compression: str = "None") -> int:
    """How many records an object holds (what a completeness check compares with the output's lines)."""
    if compression == "Gzip":
        data = gzip.decompress(data)
    return len(split_records(data, split_type))


def mini_batches(records: list[Record], strategy: str, max_payload_mb: int) -> list[list[Record]]:
    """SingleRecord: one record a request. MultiRecord: as many records as fit in MaxPayloadInMB (records
    joined by newlines). A record larger than MaxPayloadInMB fails; 0 means no limit (streaming)."""
    limit = max_payload_mb * MB if max_payload_mb else None
    for r in records:
        if limit is not None and len(r.data) > limit:
            where = f"record {r.number}" + (f" (line {r.line})" if r.line else "")
            raise TransformError(f"{where} is {len(r.data)} bytes, more than MaxPayloadInMB={max_payload_mb}; "
                                 "raise MaxPayloadInMB (at most 100) or split the input finer.",
                                 record=r.number, line=r.line)
    if strategy != "MultiRecord":
        return [[r] for r in records]
    batches: list[list[Record]] = []
    current: list[Record] = []
    size = 0
    for r in records:
        extra = len(r.data) + (1 if current else 0)
        if current and limit is not None and size + extra > limit:
            batches.append(current)
            current, size = [], 0
            extra = len(r.data)
        current.append(r)
        size += extra
    if current:
        batches.append(current)
    return batches


def _is_csv(content_type: str | None) -> bool:
    return base_type(content_type) == CSV


def _csv_fields(text: str) -> list[str]:
    rows = list(csv.reader([text]))
    return rows[0] if rows else []


def _csv_join(fields: Iterable[Any]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="").writerow(["" if f is None else f for f in fields])
    return buffer.getvalue()


class JsonPath:
    """A DataProcessing JSONPath (jsonpath-ng), with SageMaker's union of indexes and slices (``$[0,5:]``)
    that jsonpath-ng does not parse, and SageMaker's result shapes: a path naming one member gives that
    value; a slice, union or wildcard gives a list (CSV) or, for object fields, an object."""

    def __init__(self, path: str) -> None:
        self.path = path.strip()
        from jsonpath_ng import parse  # type: ignore[attr-defined]  # re-exported by jsonpath_ng, no __all__
        from jsonpath_ng.jsonpath import Child, Fields, Index, Root

        self._types = (Child, Fields, Index, Root)
        inner = self.path[2:-1] if self.path.startswith("$[") and self.path.endswith("]") else None
        if inner is not None and "," in inner and ":" in inner and "'" not in inner and '"' not in inner:
            self.parts = [parse(f"$[{p.strip()}]") for p in inner.split(",")]
            self.single = False
        else:
            self.parts = [parse(self.path)]
            self.single = self._is_single(self.parts[0])

    def _is_single(self, expr: Any) -> bool:
        Child, Fields, Index, Root = self._types
        if isinstance(expr, Root):
            return True
        if isinstance(expr, Child):
            return self._is_single(expr.left) and self._is_single(expr.right)
        if isinstance(expr, Fields):
            return len(expr.fields) == 1 and expr.fields[0] != "*"
        if isinstance(expr, Index):
            return len(getattr(expr, "indices", (getattr(expr, "index", 0),))) == 1
        return False

    def apply(self, value: Any) -> Any:
        matches = [m for part in self.parts for m in part.find(value)]
        if self.single:
            if not matches:
                raise TransformError(f"JSONPath {self.path!r} matches nothing in {json.dumps(value)[:200]}")
            return matches[0].value
        if isinstance(value, dict):
            return {str(m.path): m.value for m in matches}
        return [m.value for m in matches]


def _serialize(value: Any, csv_format: bool) -> str:
    if csv_format:
        if isinstance(value, list):
            return _csv_join(value)
        return "" if value is None else str(value)
    return json.dumps(value)


def _parse_text(text: str, csv_format: bool) -> Any:
    if csv_format:
        return _csv_fields(text)
    return json.loads(text)


def apply_input_filter(record: bytes, path: JsonPath, content_type: str | None) -> bytes:
    csv_format = _is_csv(content_type)
    lines = record.decode("utf-8").split("\n") if csv_format else [record.decode("utf-8")]
    out = [_serialize(path.apply(_parse_text(line, csv_format)), csv_format) for line in lines if line.strip()]
    return "\n".join(out).encode("utf-8")


def _split_response(body: bytes, n: int, accept: str | None) -> list[str]:
    """A mini-batch's response as one output per record (for JoinSource / OutputFilter)."""
    text = body.decode("utf-8")
    kind = base_type(accept)
    if n == 1:
        return [text.rstrip("\n")]
    if kind == JSON:
        parsed = json.loads(text)
        if isinstance(parsed, list) and len(parsed) == n:
            return [json.dumps(p) for p in parsed]
        raise TransformError(f"the response to a mini-batch of {n} records is not a JSON list of {n} items, so "
                             "outputs cannot be matched with their records for JoinSource/OutputFilter; use "
                             "BatchStrategy=SingleRecord or return one item per record.")
    lines = [line for line in text.split("\n") if line.strip()]
    if len(lines) != n:
        raise TransformError(f"the response to a mini-batch of {n} records has {len(lines)} lines, so outputs "
                             "cannot be matched with their records for JoinSource/OutputFilter.")
    return lines


def join_and_filter(record: bytes, output: str, settings: Settings, output_filter: JsonPath | None) -> str:
    """JoinSource=Input: CSV rows get the output columns appended; a JSON object gets ``SageMakerOutput``;
    any other JSON becomes ``{"SageMakerInput": ..., "SageMakerOutput": ...}``. Then OutputFilter."""
    csv_format = _is_csv(settings.content_type) if settings.join_source == "Input" else _is_csv(settings.accept)
    if settings.join_source == "Input":
        text = record.decode("utf-8")
        if csv_format:
            joined: Any = _csv_fields(text) + _csv_fields(output)
        else:
            source = json.loads(text)
            try:
                result: Any = json.loads(output)
            except ValueError:
                result = output
            joined = (dict(source, SageMakerOutput=result) if isinstance(source, dict)
                      else {"SageMakerInput": source, "SageMakerOutput": result})
    else:
        joined = _parse_text(output, csv_format)
    if output_filter is not None:
        joined = output_filter.apply(joined)
    return _serialize(joined, csv_format)


@dataclass
class ObjectResult:
    output: bytes
    records: int
    batches: int


def transform_object(handler: Handler, data: bytes, settings: Settings, *, name: str = "object",
                     executor: ThreadPoolExecutor | None = None) -> ObjectResult:
    """Transform one input object into its ``.out`` bytes. Raises TransformError naming ``name`` and the
    record (the first failing one, found by retrying a failed mini-batch record by record)."""
    try:
        if settings.compression == "Gzip":
            data = gzip.decompress(data)
        records = split_records(data, settings.split_type)
        batches = mini_batches(records, settings.batch_strategy, settings.max_payload_mb)
        in_filter = _json_path(settings.input_filter)
        out_filter = _json_path(settings.output_filter)
    except TransformError as e:
        raise TransformError(f"{name}: {e}", record=e.record, line=e.line) from None

    def payload_of(batch: list[Record]) -> bytes:
        return b"\n".join(apply_input_filter(r.data, in_filter, settings.content_type) if in_filter else r.data
                          for r in batch)

    bodies = _invoke_batches(handler, batches, settings, name, executor, payload_of)
    return ObjectResult(_assemble(batches, bodies, settings, out_filter, name), len(records), len(batches))


def _json_path(expression: str | None) -> JsonPath | None:
    """A DataProcessing filter; None for none or ``$`` (the whole record)."""
    return JsonPath(expression) if expression and expression != "$" else None


def _invoke(handler: Handler, payload: bytes, settings: Settings) -> bytes:
    """One invocation, retried ``invocations_max_retries`` times (the model server answers 500 and batch
    transform retries); a TransformError is not retried."""
    last: BaseException | None = None
    for _attempt in range(settings.invocations_max_retries + 1):
        try:
            body, _type = handler.invoke(payload, settings.content_type, settings.accept)
            return body
        except TransformError:
            raise
        except Exception as e:  # noqa: BLE001 - the model server answers 500 and batch transform retries
            last = e
    assert last is not None
    raise last


def _invoke_batches(handler: Handler, batches: list[list[Record]], settings: Settings, name: str,
                    executor: ThreadPoolExecutor | None, payload_of: Callable[[list[Record]], bytes]) -> list[bytes]:
    """Every mini-batch's response, ``max_concurrent_transforms`` at a time, each within the timeout."""
    own = executor is None
    pool = executor or ThreadPoolExecutor(max_workers=max(1, settings.max_concurrent_transforms))
    try:
        futures = [pool.submit(lambda b: _invoke(handler, payload_of(b), settings), b) for b in batches]
        bodies = []
        for batch, future in zip(batches, futures):
            try:
                bodies.append(future.result(timeout=settings.invocations_timeout))
            except FutureTimeout:
                raise TransformError(f"{name}: the request for {_where(batch)} did not answer within "
                                     f"InvocationsTimeoutInSeconds={int(settings.invocations_timeout)}",
                                     record=batch[0].number, line=batch[0].line) from None
            except Exception as e:  # noqa: BLE001
                raise _locate(handler, batch, settings, name, e, payload_of) from None
        return bodies
    finally:
        if own:
            pool.shutdown(wait=False, cancel_futures=True)


def _assemble(batches: list[list[Record]], bodies: list[bytes], settings: Settings, out_filter: JsonPath | None,
              name: str) -> bytes:
    """The object's output: the responses joined as AssembleWith says, through DataProcessing's join and
    output filter where set."""
    pieces: list[bytes] = []
    line_assembly = settings.assemble_with == "Line"
    try:
        for batch, body in zip(batches, bodies):
            if settings.uses_data_processing:
                outputs = _split_response(body, len(batch), settings.accept)
                for r, out in zip(batch, outputs):
                    text = join_and_filter(r.data, out, settings, out_filter).encode("utf-8")
                    pieces.append(text + b"\n" if line_assembly else text)
            elif line_assembly:
                pieces.append((body[:-1] if body.endswith(b"\n") else body) + b"\n")
            else:
                pieces.append(body)
    except TransformError as e:
        raise TransformError(f"{name}: {e}") from None
    except ValueError as e:
        raise TransformError(f"{name}: DataProcessing could not parse a record or its output: {e}") from None
    return b"".join(pieces)


def _where(batch: list[Record]) -> str:
    if len(batch) == 1:
        r = batch[0]
        return f"record {r.number}" + (f" (line {r.line})" if r.line else "")
    first, last = batch[0], batch[-1]
    lines = f" (lines {first.line}-{last.line})" if first.line else ""
    return f"records {first.number}-{last.number}{lines}"


def _locate(handler: Handler, batch: list[Record], settings: Settings, name: str, error: BaseException,
            payload_of: Callable[[list[Record]], bytes]) -> TransformError:
    """Name the record that broke a mini-batch: try its records one by one (once each)."""
    culprit, cause = None, error
    if len(batch) > 1:
        for r in batch:
            try:
                handler.invoke(payload_of([r]), settings.content_type, settings.accept)
            except Exception as e:  # noqa: BLE001
                culprit, cause = r, e
                break
    elif settings.split_type == "Line":
        culprit = batch[0]
    detail = f"{type(cause).__name__}: {cause}".strip()
    if culprit is not None:
        return TransformError(f"{name}: {_where([culprit])} failed: {detail}", record=culprit.number,
                              line=culprit.line)
    if settings.split_type in (None, "", "None"):
        return TransformError(f"{name}: the object (SplitType=None: one request) failed: {detail}")
    return TransformError(f"{name}: the mini-batch of {_where(batch)} failed, though each record alone "
                          f"succeeds: {detail}", record=batch[0].number, line=batch[0].line)


# -- model archive ------------------------------------------------------------------------------------------
def safe_extract(archive: str | os.PathLike[str], dest: str | os.PathLike[str]) -> None:
    """Extract a tar archive into ``dest`` with nothing landing outside it: tarfile's ``data`` filter where this
    Python has it (3.11.4+, 3.12+), else the same guard by hand (:func:`_checked_members`). The one extractor of
    archives a job receives (sourcedir.tar.gz, model.tar.gz): this file is stdlib-only, so the training
    supervisor and the in-job runner share it."""
    with tarfile.open(archive) as tar:
        try:
            tar.extractall(dest, filter="data")
        except TypeError:  # Python < 3.11.4: no filter argument
            tar.extractall(dest, members=_checked_members(tar, str(dest)), numeric_owner=True)


def _checked_members(tar: tarfile.TarFile, dest: str) -> Iterator[tarfile.TarInfo]:
    """The archive's members, each checked just before it is extracted (so a link extracted earlier is
    followed): no absolute or '..' name, no link to outside ``dest``, no device or fifo; owned by the
    extracting user with no set-id bits (what the ``data`` filter does)."""
    import copy

    root = os.path.realpath(dest)

    def inside(path: str) -> bool:
        return os.path.commonpath([root, os.path.realpath(path)]) == root

    for member in tar.getmembers():
        name = member.name
        where = os.path.join(root, name)
        if os.path.isabs(name) or ".." in name.replace(os.sep, "/").split("/") or not inside(where):
            raise ValueError(f"archive member {name!r} would land outside {dest}")
        if member.issym() and (os.path.isabs(member.linkname) or
                               not inside(os.path.join(os.path.dirname(where), member.linkname))):
            raise ValueError(f"archive member {name!r} links to {member.linkname!r}, outside {dest}")
        if member.islnk() and (os.path.isabs(member.linkname) or not inside(os.path.join(root, member.linkname))):
            raise ValueError(f"archive member {name!r} links to {member.linkname!r}, outside {dest}")
        if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
            raise ValueError(f"archive member {name!r} is a special file (device or fifo)")
        member = copy.copy(member)
        member.uid, member.gid, member.uname, member.gname = os.geteuid(), os.getegid(), "", ""
        member.mode = (member.mode & 0o755) | (0o600 if member.isfile() else 0o700 if member.isdir() else 0)
        yield member


def extract_model(archive: str, model_dir: str) -> str:
    """Extract model.tar.gz into ``model_dir`` as SageMaker does into /opt/ml/model (no '..' or absolute
    members)."""
    os.makedirs(model_dir, exist_ok=True)
    safe_extract(archive, model_dir)
    return model_dir


# -- the processing-job runner ------------------------------------------------------------------------------
def _files_under(root: str) -> list[str]:
    out = []
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            out.append(os.path.relpath(os.path.join(dirpath, f), root))
    return sorted(p.replace(os.sep, "/") for p in out)


def _write_atomic(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.smdist-partial"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="Batch inference over the objects of a directory, as batch "
                                "transform would do them (one <name>.out per object).")
    p.add_argument("--input", default="/opt/ml/processing/input/data")
    p.add_argument("--output", default="/opt/ml/processing/output")
    p.add_argument("--model", default="/opt/ml/processing/input/model",
                   help="model.tar.gz, or a directory holding one (or an extracted model)")
    p.add_argument("--code-dir", default=None, help="the inference code's directory (default <model>/code)")
    p.add_argument("--program", default=None, help="module of the inference code (default SAGEMAKER_PROGRAM "
                   "or inference.py)")
    p.add_argument("--defaults", default="generic", choices=sorted([*DEFAULT_HANDLERS, TFS_DEFAULTS]))
    p.add_argument("--failure-file", default="/opt/ml/output/message")
    p.add_argument("--names", default=None, help="a JSON file mapping an object's path under --input to the name "
                   "its failure gives (its S3 URI, as batch transform names it)")
    p.add_argument("--content-type")
    p.add_argument("--accept")
    p.add_argument("--split-type", default="None")
    p.add_argument("--compression", default="None")
    p.add_argument("--batch-strategy", default="SingleRecord")
    p.add_argument("--max-payload-mb", type=int, default=6)
    p.add_argument("--max-concurrent-transforms", type=int, default=1)
    p.add_argument("--assemble-with", default="None")
    p.add_argument("--input-filter")
    p.add_argument("--join-source", default="None")
    p.add_argument("--output-filter")
    p.add_argument("--invocations-timeout", type=float, default=600)
    p.add_argument("--invocations-max-retries", type=int, default=3)
    return p


def _model_dir_from(arg: str) -> str:
    if os.path.isfile(arg):
        return extract_model(arg, tempfile.mkdtemp(prefix="smdist-model-"))
    archives = [f for f in _files_under(arg) if f.endswith(".tar.gz")] if os.path.isdir(arg) else []
    if len(archives) == 1:
        return extract_model(os.path.join(arg, archives[0]), tempfile.mkdtemp(prefix="smdist-model-"))
    if os.path.isdir(arg):
        return arg
    raise FileNotFoundError(f"no model at {arg}")


def main(argv: list[str] | None = None) -> int:
    """Processing-job mode: every object under --input becomes --output/<relative path>.out; an object's
    output is written only when the whole object succeeded; the first failure ends the run (exit 1) with
    the object and record named on stderr and in --failure-file."""
    args = _parser().parse_args(argv)
    settings = Settings(content_type=args.content_type, accept=args.accept, split_type=args.split_type,
                        compression=args.compression, batch_strategy=args.batch_strategy,
                        max_payload_mb=args.max_payload_mb,
                        max_concurrent_transforms=args.max_concurrent_transforms,
                        assemble_with=args.assemble_with, input_filter=args.input_filter,
                        join_source=args.join_source, output_filter=args.output_filter,
                        invocations_timeout=args.invocations_timeout,
                        invocations_max_retries=args.invocations_max_retries)
    try:
        model_dir = _model_dir_from(args.model)
        code_dir = args.code_dir or code_dir_for(model_dir, os.environ.get("SAGEMAKER_SUBMIT_DIRECTORY"))
        if os.path.isfile(code_dir) and code_dir.endswith((".tar.gz", ".tgz")):  # a sourcedir.tar.gz input
            code_dir = extract_model(code_dir, tempfile.mkdtemp(prefix="smdist-code-"))
        handler = make_handler(model_dir, code_dir=code_dir, program=args.program, defaults=args.defaults)
        names = _files_under(args.input) if os.path.isdir(args.input) else []
        shown = {}
        if args.names:
            with open(args.names) as f:
                shown = json.load(f)
        print(f"{len(names)} object(s) in this instance's shard", flush=True)
        started = time.time()
        total = 0
        with ThreadPoolExecutor(max_workers=max(1, settings.max_concurrent_transforms)) as pool:
            for rel in names:
                with open(os.path.join(args.input, rel), "rb") as f:
                    data = f.read()
                result = transform_object(handler, data, settings, name=shown.get(rel, rel), executor=pool)
                _write_atomic(os.path.join(args.output, rel + ".out"), result.output)
                total += result.records
                print(f"{rel}: {result.records} record(s) in {result.batches} request(s) -> {rel}.out",
                      flush=True)
        print(f"{total} record(s) in {time.time() - started:.2f}s", flush=True)
        return 0
    except Exception as e:  # noqa: BLE001 - the message is the job's failure reason
        message = str(e) if isinstance(e, TransformError) else f"{type(e).__name__}: {e}"
        traceback.print_exc()
        print(message, file=sys.stderr, flush=True)
        try:
            os.makedirs(os.path.dirname(args.failure_file), exist_ok=True)
            with open(args.failure_file, "w") as f:
                f.write(message)  # the supervisor fits it into FailureReason, keeping the end
        except OSError:
            pass
        return 1


if __name__ == "__main__":
    sys.exit(main())
