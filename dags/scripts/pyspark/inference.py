"""SageMaker inference handlers for the churn model train_sklearn.py saves (model.joblib).

Batch transform sends CSV feature rows (the DataProcessing InputFilter drops the label column); the
scikit-learn serving container (or the local backend) calls these; output_fn is the container's default
encoder for the Accept type.
"""

import io
import os

import joblib
import numpy as np


def model_fn(model_dir):
    return joblib.load(os.path.join(model_dir, "model.joblib"))


def input_fn(request_body, content_type):
    if content_type != "text/csv":
        raise ValueError(f"unsupported content type {content_type!r}: send text/csv")
    if isinstance(request_body, bytes):
        request_body = request_body.decode()
    return np.atleast_2d(np.genfromtxt(io.StringIO(request_body), delimiter=",", dtype=np.float64))


def predict_fn(data, model):
    """The churn probability of each row."""
    return model.predict_proba(data)[:, 1]
