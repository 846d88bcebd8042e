"""Train a churn classifier on the splits the PySpark preprocessing job wrote (scikit-learn script mode).

Runs in SageMaker's scikit-learn container (or on the local backend): the ``train`` and ``validation``
channels hold the headerless CSV parts Spark wrote (label first). Prints the validation metrics in the form
the job's MetricDefinitions parse, and saves the model (joblib) plus a metrics file into SM_MODEL_DIR.
"""

import argparse
import glob
import json
import os

import joblib
import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, roc_auc_score


def load(channel_dir):
    parts = sorted(glob.glob(os.path.join(channel_dir, "**", "*.csv"), recursive=True))
    if not parts:
        raise FileNotFoundError(f"no CSV parts in {channel_dir}: {os.listdir(channel_dir)}")
    data = np.vstack([np.loadtxt(p, delimiter=",", ndmin=2) for p in parts if os.path.getsize(p)])
    return data[:, 1:], data[:, 0], len(parts)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--regularization", type=float, default=1.0, help="inverse regularization strength C")
    p.add_argument("--max_iter", type=int, default=200)
    p.add_argument("--model-dir", default=os.environ.get("SM_MODEL_DIR", "/opt/ml/model"))
    p.add_argument("--train", default=os.environ.get("SM_CHANNEL_TRAIN"))
    p.add_argument("--validation", default=os.environ.get("SM_CHANNEL_VALIDATION"))
    args = p.parse_args()

    x_train, y_train, n_train = load(args.train)
    x_val, y_val, n_val = load(args.validation)
    print(f"train: {len(y_train)} rows from {n_train} file(s); validation: {len(y_val)} rows from {n_val} file(s)",
          flush=True)
    model = LogisticRegression(C=args.regularization, max_iter=args.max_iter).fit(x_train, y_train)
    accuracy = accuracy_score(y_val, model.predict(x_val))
    auc = roc_auc_score(y_val, model.predict_proba(x_val)[:, 1])
    print(f"validation:accuracy={accuracy:.4f} validation:auc={auc:.4f}", flush=True)
    joblib.dump(model, os.path.join(args.model_dir, "model.joblib"))
    with open(os.path.join(args.model_dir, "metrics.json"), "w") as f:
        json.dump({"train_rows": int(len(y_train)), "validation_rows": int(len(y_val)),
                   "validation_accuracy": accuracy, "validation_auc": auc}, f)


if __name__ == "__main__":
    main()
