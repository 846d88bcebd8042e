"""SageMaker inference handlers for the model train.py saves (shipped inside model.tar.gz as code/inference.py).

The serving container (here the scikit-learn one) imports this module and calls ``model_fn`` once, then
``input_fn`` for every request; ``predict_fn`` and ``output_fn`` are left to the container's defaults
(``model.predict``, and the toolkit's encoder for the Accept type).
"""

import io
import os

import joblib
import numpy as np


def model_fn(model_dir):
    return joblib.load(os.path.join(model_dir, "model.joblib"))


def input_fn(request_body, content_type):
    """CSV rows x0..x3 -> a 2-D float array (a single-record request is one row, not a 1-D vector)."""
    if content_type != "text/csv":
        raise ValueError(f"unsupported content type {content_type!r}: send text/csv")
    rows = np.genfromtxt(io.StringIO(request_body), delimiter=",", dtype=np.float64)
    rows = np.atleast_2d(rows)
    if rows.shape[1] != 4 or np.isnan(rows).any():
        raise ValueError(f"every record needs 4 numeric features; got {rows.shape[1]} column(s)"
                         + (" with non-numeric values" if np.isnan(rows).any() else ""))
    return rows
