"""SageMaker inference handlers for the tuned model (shipped inside model.tar.gz as code/inference.py).

The scikit-learn serving container (and the local backend's transform) imports this module, calls
``model_fn`` once and ``input_fn`` per request; ``predict_fn`` / ``output_fn`` are the container's
defaults (``model.predict``, and the encoder for the Accept type).
"""

import io
import os

import joblib
import numpy as np


def model_fn(model_dir):
    return joblib.load(os.path.join(model_dir, "model.joblib"))


def input_fn(request_body, content_type):
    """CSV feature rows -> a 2-D float array (one record is one row, not a 1-D vector)."""
    if content_type != "text/csv":
        raise ValueError(f"unsupported content type {content_type!r}: send text/csv")
    if isinstance(request_body, bytes):
        request_body = request_body.decode()
    return np.atleast_2d(np.genfromtxt(io.StringIO(request_body), delimiter=",", dtype=np.float64))
