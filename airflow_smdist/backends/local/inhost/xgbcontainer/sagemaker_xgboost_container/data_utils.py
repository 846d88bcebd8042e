"""``sagemaker_xgboost_container.data_utils``: a channel's files as an ``xgb.DMatrix``, for scripts.

Written by airflow-smdist from the behaviour of the container's module (aws/sagemaker-xgboost-container,
Apache-2.0, ``src/sagemaker_xgboost_container/data_utils.py`` at ``f7a93a21e50e44b4077f0889a7f676cad8c226f3``, the
``1.7-1`` branch), with its public names and signatures: :func:`get_content_type`, :func:`validate_data_file_path`,
:func:`get_dmatrix` (a file or a directory: its files, down to 3 levels of sub-directories, linked into one
directory that xgboost reads whole; a DMatrix without labels is a UserError),
:func:`get_csv_dmatrix` (the delimiter sniffed from the first line; label first, weight second with
``csv_weights=1``), :func:`get_libsvm_dmatrix`, :func:`get_parquet_dmatrix` (pyarrow, where the runtime has it),
:func:`get_size`, :func:`check_data_redundancy`. Errors are ``sagemaker_algorithm_toolkit.exceptions.UserError``
with the container's messages.

Not here: Pipe mode and recordio-protobuf, which the container reads with mlio (built from source in the image,
not on PyPI: the runtime leaves it out); both raise a UserError that says so.
"""

from __future__ import annotations

import csv
import logging
import os
import shutil
import tempfile
from email.message import Message

from sagemaker_algorithm_toolkit import exceptions as exc

from .constants import xgb_content_types

TYPE_CHECKING = False  # typing's own, without importing typing at run time (mypy reads it so)
if TYPE_CHECKING:
    from typing import Any, NoReturn, Protocol

    import xgboost

    class _XGBoost(Protocol):
        """The ``xgboost`` module, its DMatrix typed (``__version__`` through ``__getattr__``: mypy matches no
        module's dunder attribute to a protocol's)."""

        DMatrix: type[xgboost.DMatrix]

        def __getattr__(self, name: str) -> Any: ...

BATCH_SIZE = 4000

CSV = "csv"
LIBSVM = "libsvm"
PARQUET = "parquet"
RECORDIO_PROTOBUF = "recordio-protobuf"
_TEXT_CSV = "text/csv"  # sagemaker_containers._content_types.CSV

MAX_FOLDER_DEPTH = 3

VALID_CONTENT_TYPES = [CSV, LIBSVM, PARQUET, RECORDIO_PROTOBUF, _TEXT_CSV, xgb_content_types.LIBSVM,
                       xgb_content_types.X_LIBSVM, xgb_content_types.X_PARQUET, xgb_content_types.X_RECORDIO_PROTOBUF]
VALID_PIPED_CONTENT_TYPES = [CSV, PARQUET, RECORDIO_PROTOBUF, _TEXT_CSV, xgb_content_types.X_PARQUET,
                             xgb_content_types.X_RECORDIO_PROTOBUF]

INVALID_CONTENT_TYPE_ERROR = (
    "{invalid_content_type} is not an accepted ContentType: " + ", ".join(["%s" % c for c in VALID_CONTENT_TYPES]) + "."
)
INVALID_CONTENT_FORMAT_ERROR = (
    "First line '{line_snippet}...' of file '{file_name}' is not "
    "'{content_type}' format. Please ensure the file is in '{content_type}' format."
)
_NO_MLIO = ("{what} is not emulated by airflow-smdist's local backend (the image reads it with mlio, which is not "
            "on PyPI): use File mode with text/csv, text/libsvm or application/x-parquet")


def _get_invalid_content_type_error_msg(invalid_content_type: str) -> str:
    return INVALID_CONTENT_TYPE_ERROR.format(invalid_content_type=invalid_content_type)


def _get_invalid_libsvm_error_msg(line_snippet: str, file_name: str) -> str:
    return INVALID_CONTENT_FORMAT_ERROR.format(line_snippet=line_snippet, file_name=file_name, content_type="LIBSVM")


def _get_invalid_csv_error_msg(line_snippet: str, file_name: str) -> str:
    return INVALID_CONTENT_FORMAT_ERROR.format(line_snippet=line_snippet, file_name=file_name, content_type="CSV")


def _parse_header(value: str) -> tuple[str, dict[str, str]]:
    """``cgi.parse_header`` (gone in Python 3.13): the main value and its ``;key=value`` parameters."""
    message = Message()
    message["content-type"] = value
    pairs = message.get_params()
    if pairs is None:  # only without a content-type header, which the line above sets
        raise ValueError("no content type")
    params = {k.lower(): v for k, v in pairs[1:]}
    return pairs[0][0].strip().lower(), params


def get_content_type(content_type_cfg_val: str | None) -> str:
    """The content type of a channel's ContentType: ``libsvm`` (also when None), ``csv`` (``label_size`` must be
    1), ``parquet`` or ``recordio-protobuf``; anything else is a UserError."""
    if content_type_cfg_val is None:
        return LIBSVM
    content_type, params = _parse_header(content_type_cfg_val.lower())
    if content_type in [CSV, _TEXT_CSV]:
        if params and "label_size" in params and params["label_size"] != "1":
            msg = ("{} is not an accepted csv ContentType. "
                   "Optional parameter label_size must be equal to 1".format(content_type_cfg_val))
            raise exc.UserError(msg)
        return CSV
    if content_type in [LIBSVM, xgb_content_types.LIBSVM, xgb_content_types.X_LIBSVM]:
        return LIBSVM
    if content_type in [PARQUET, xgb_content_types.X_PARQUET]:
        return PARQUET
    if content_type in [RECORDIO_PROTOBUF, xgb_content_types.X_RECORDIO_PROTOBUF]:
        return RECORDIO_PROTOBUF
    raise exc.UserError(_get_invalid_content_type_error_msg(content_type_cfg_val))


def _is_data_file(file_path: str, file_name: str) -> bool:
    """A file, not hidden (``.``/``_`` first), not one of xgboost's ``dtrain``/``dval`` cache files."""
    if not os.path.isfile(os.path.join(file_path, file_name)):
        return False
    if file_name.startswith(".") or file_name.startswith("_"):
        return False
    if ".cache" in file_name and ("dtrain" in file_name or "dval" in file_name):
        return False
    return True


def _get_csv_delimiter(sample_csv_line: str) -> str:
    try:
        delimiter = csv.Sniffer().sniff(sample_csv_line).delimiter
        logging.info("Determined delimiter of CSV input is '{}'".format(delimiter))
    except Exception as e:
        raise exc.UserError("Could not determine delimiter on line {}:\n{}".format(sample_csv_line[:50], e)) from e
    return delimiter


def _is_valid_libsvm_label(libsvm_label: str) -> bool:
    """``<label>`` or ``<label>:<instance weight>``, numbers."""
    parts = libsvm_label.split(":")
    if len(parts) > 2:
        return False
    try:
        [float(p) for p in parts]
    except ValueError:
        return False
    return True


def _get_num_valid_libsvm_features(libsvm_line: str) -> int:
    """How many ``<index>:<value>`` features a LIBSVM line has; -1 when it is not LIBSVM."""
    split_line = libsvm_line.split(" ")
    if not _is_valid_libsvm_label(split_line[0]):
        logging.error("{} does not follow LIBSVM label format <label>(:<weight>).".format(split_line[0]))
        return -1
    if len(split_line) == 1:
        return 0
    count = 0
    for item in split_line[1:]:
        # (the container checks the first feature's shape on every item, as here)
        if ":" not in item or len(split_line[1].split(":")) != 2:
            return -1
        count += 1
    return count


def _validate_csv_format(file_path: str) -> None:
    """The first line's delimiter can be sniffed (xgboost validates the rest)."""
    with open(file_path, "r", errors="ignore") as read_file:
        _get_csv_delimiter(read_file.readline())


def _validate_libsvm_format(file_path: str) -> None:
    """The first line with features is LIBSVM (xgboost validates the rest)."""
    with open(file_path, "r", errors="ignore") as read_file:
        for line in read_file:
            features = _get_num_valid_libsvm_features(line)
            if features > 1:
                return
            if features < 0:
                raise exc.UserError(_get_invalid_libsvm_error_msg(line_snippet=line[:50],
                                                                  file_name=file_path.split("/")[-1]))
    logging.warning("File {} is not an invalid LIBSVM file but has no features. Accepting simple validation.".format(
        file_path.split("/")[-1]))


def validate_data_file_path(data_path: str, content_type: str | None) -> None:
    """Check the first lines of the data files under ``data_path`` (its first leaf directory) for ``content_type``."""
    parsed = get_content_type(content_type)
    if not os.path.exists(data_path):
        raise exc.UserError("{} is not a valid path!".format(data_path))
    if os.path.isfile(data_path):
        data_files = [data_path]
    else:
        dir_path = data_path
        for root, dirs, _files in os.walk(data_path):
            if dirs == []:
                dir_path = root
                break
        data_files = [os.path.join(dir_path, f) for f in os.listdir(dir_path) if _is_data_file(dir_path, f)]
    if parsed == CSV:
        for path in data_files:
            _validate_csv_format(path)
    elif parsed == LIBSVM:
        for path in data_files:
            _validate_libsvm_format(path)


def _xgb() -> _XGBoost:
    import xgboost as xgb

    return xgb


def _get_csv_dmatrix_file_mode(files_path: str, csv_weights: int) -> xgboost.DMatrix:
    """CSV files (label first; weight second with ``csv_weights=1``), the delimiter sniffed from the first line."""
    csv_file = (files_path if os.path.isfile(files_path)
                else [f for f in os.listdir(files_path) if os.path.isfile(os.path.join(files_path, f))][0])
    with open(os.path.join(files_path, csv_file)) as read_file:
        delimiter = _get_csv_delimiter(read_file.readline())
    uri = "{}?format=csv&label_column=0&delimiter={}".format(files_path, delimiter)
    try:
        return _xgb().DMatrix(uri + ("&weight_column=1" if csv_weights == 1 else ""))
    except Exception as e:
        raise exc.UserError("Failed to load csv data with exception:\n{}".format(e)) from e


def get_csv_dmatrix(path: str, csv_weights: int, is_pipe: bool = False) -> xgboost.DMatrix:
    """A DMatrix of CSV data in ``path`` (a file or directory); Pipe mode is not emulated (UserError)."""
    if is_pipe:
        raise exc.UserError(_NO_MLIO.format(what="Pipe mode"))
    return _get_csv_dmatrix_file_mode(path, csv_weights)


def get_libsvm_dmatrix(files_path: str | None, is_pipe: bool = False) -> xgboost.DMatrix:
    """A DMatrix of the LIBSVM data in ``files_path`` (a file or directory); no Pipe mode, as in the container."""
    if is_pipe:
        raise exc.UserError("Pipe mode not supported for LibSVM.")
    xgb = _xgb()
    uri = files_path if files_path is None or int(xgb.__version__.split(".")[0]) < 2 else files_path + "?format=libsvm"
    try:
        return xgb.DMatrix(uri)
    except Exception as e:
        raise exc.UserError("Failed to load libsvm data with exception:\n{}".format(e)) from e


def get_parquet_dmatrix(path: str, is_pipe: bool = False) -> xgboost.DMatrix:
    """A DMatrix of the parquet data in ``path`` (label first); Pipe mode is not emulated (UserError)."""
    if is_pipe:
        raise exc.UserError(_NO_MLIO.format(what="Pipe mode"))
    try:
        import pyarrow.parquet as pq

        data = pq.read_table(path).to_pandas().to_numpy()
        return _xgb().DMatrix(data[:, 1:], label=data[:, 0])
    except Exception as e:
        raise exc.UserError("Failed to load parquet data with exception:\n{}".format(e)) from e


def get_recordio_protobuf_dmatrix(path: str, is_pipe: bool = False) -> NoReturn:
    """recordio-protobuf: not emulated (UserError)."""
    raise exc.UserError(_NO_MLIO.format(what="recordio-protobuf input"))


def _get_pipe_mode_files_path(data_path: str | list[str]) -> list[str] | None:
    if isinstance(data_path, list):
        return data_path
    if not os.path.exists(f"{data_path}_0"):
        logging.info(f"Pipe path {data_path} does not exist!")
        return None
    return [data_path]


def _make_symlink(path: str, source_path: str, name: str) -> None:
    file_name = os.path.join(source_path, name) + str(hash(path))
    logging.info(f"creating symlink between Path {path} and destination {file_name}")
    os.symlink(path, file_name)


def _make_symlinks_from_a_folder(dest_path: str, data_path: str, depth: int) -> None:
    if depth > MAX_FOLDER_DEPTH:
        raise exc.UserError(f"Folder depth exceed the limit: {MAX_FOLDER_DEPTH}.")
    if os.path.isfile(data_path):
        _make_symlink(data_path, dest_path, os.path.basename(data_path))
        return
    logging.info(f"Making smlinks from folder {data_path} to folder {dest_path}")
    for item in os.scandir(data_path):
        if item.is_file():
            _make_symlink(item.path, dest_path, item.name)
        elif item.is_dir():
            _make_symlinks_from_a_folder(dest_path, item.path, depth + 1)


def _make_symlinks_from_a_folder_with_warning(dest_path: str, data_path: str) -> None:
    """Link ``data_path`` (a file, or a directory's files down to MAX_FOLDER_DEPTH) into ``dest_path``; deeper
    files are left, with a warning."""
    if not os.path.exists(dest_path) or not os.path.exists(data_path):
        raise exc.AlgorithmError(f"Unable to create symlinks as {data_path} or {dest_path} doesn't exist ")
    if not os.path.isdir(dest_path):
        raise exc.AlgorithmError(f"Unable to create symlinks as dest_path {dest_path} is not a dir")
    try:
        _make_symlinks_from_a_folder(dest_path, data_path, 1)
    except exc.UserError as e:
        if e.message == f"Folder depth exceed the limit: {MAX_FOLDER_DEPTH}.":
            logging.warning(f"The depth of folder {data_path} exceed the limit {MAX_FOLDER_DEPTH}."
                            f" Files in deeper sub dirs won't be loaded."
                            f" Please adjust the folder structure accordingly.")


def _input_data_dir() -> str:
    """The container's ``/tmp/sagemaker_xgboost_input_data``: a host's own /tmp in a namespaced host; where the
    hosts share this machine's /tmp (the base directory is not /opt/ml), one per host."""
    base = os.path.join(tempfile.gettempdir(), "sagemaker_xgboost_input_data")
    if os.environ.get("SAGEMAKER_BASE_DIR", "/opt/ml").rstrip("/") != "/opt/ml":
        base += "-" + (os.environ.get("SM_CURRENT_HOST") or str(os.getpid()))
    return base


def _get_file_mode_files_path(data_path: str | list[str]) -> str | None:
    """One directory linking every input file (xgboost reads a directory's files as one data set)."""
    logging.info("File path {} of input files".format(data_path))
    files_path = _input_data_dir()
    shutil.rmtree(files_path, ignore_errors=True)
    os.mkdir(files_path)
    if isinstance(data_path, list):
        for path in data_path:
            _make_symlinks_from_a_folder_with_warning(files_path, path)
    elif not os.path.exists(data_path):
        logging.info("File path {} does not exist!".format(data_path))
        return None
    else:
        _make_symlinks_from_a_folder_with_warning(files_path, data_path)
    return files_path


def get_dmatrix(data_path: str | list[str], content_type: str, csv_weights: int = 0,
                is_pipe: bool = False) -> xgboost.DMatrix | None:
    """A DMatrix of ``data_path`` (a file, a directory, or a list of them) in ``content_type`` (``csv``,
    ``libsvm``, ``parquet``, ``recordio-protobuf``)."""
    # a directory (File mode; None where data_path does not exist) or Pipe mode's pipes: each reader below refuses
    # Pipe mode before it reads the path, and a missing path fails as in the container (for CSV, os.stat's TypeError)
    files_path: Any = _get_pipe_mode_files_path(data_path) if is_pipe else _get_file_mode_files_path(data_path)
    logging.info(f"files path: {files_path}")
    kind = content_type.lower()
    dmatrix = None
    if kind == CSV:
        dmatrix = get_csv_dmatrix(files_path, csv_weights, is_pipe)
    elif kind == LIBSVM:
        dmatrix = get_libsvm_dmatrix(files_path, is_pipe)
    elif kind == PARQUET:
        dmatrix = get_parquet_dmatrix(files_path, is_pipe)
    elif kind == RECORDIO_PROTOBUF:
        dmatrix = get_recordio_protobuf_dmatrix(files_path, is_pipe)
    if dmatrix and dmatrix.get_label().size == 0:
        raise exc.UserError(
            "Got input data without labels. Please check the input data set. "
            "If training job is running on multiple instances, please switch "
            "to using single instance if number of records in the data set "
            "is less than number of workers (16 * number of instance) in the cluster.")
    return dmatrix


def get_size(data_path: str, is_pipe: bool = False) -> int:
    """The bytes of data under ``data_path`` (1 for a Pipe-mode pipe; a hidden file is a UserError)."""
    if is_pipe and os.path.exists(f"{data_path}_0"):
        logging.info(f"Pipe path {data_path} found.")
        return 1
    if not os.path.exists(data_path):
        logging.info(f"Path {data_path} does not exist!")
        return 0
    if os.path.isfile(data_path):
        return os.path.getsize(data_path)
    total = 0
    for root, _dirs, files in os.walk(data_path):
        for name in files:
            if name.startswith("."):
                raise exc.UserError("Hidden file found in the data path! Remove that before training.")
            total += os.path.getsize(os.path.join(root, name))
    return total


def check_data_redundancy(train_path: str, validate_path: str) -> None:
    """Warn of files with one name and size in both the training and validation directories."""
    if not os.path.exists(train_path):
        raise exc.UserError("training data's path is not existed")
    if not os.path.exists(validate_path):
        raise exc.UserError("validation data's path is not existed")
    train = {f for f in os.listdir(train_path) if os.path.isfile(os.path.join(train_path, f))}
    val = {f for f in os.listdir(validate_path) if os.path.isfile(os.path.join(validate_path, f))}
    for f in train & val:
        t, v = os.path.join(train_path, f), os.path.join(validate_path, f)
        if os.path.getsize(t) == os.path.getsize(v):
            logging.warning(f"Suspected identical files found. ({t} and {v}with same size {os.path.getsize(v)} bytes)."
                            f" Note: Duplicate data in the training set and validation set is usually"
                            f" not intentional and can impair the validity of the model evaluation by"
                            f" the validation score.")
