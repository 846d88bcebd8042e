"""Gradient-boosted trees on tabular data, as it runs in SageMaker's scikit-learn container (script mode).

One trial of the tuning job: reads its channels from SM_CHANNEL_TRAIN / SM_CHANNEL_VALIDATION (CSV, the
label in the last column), takes the tuned ``learning_rate`` and ``max_depth`` (and the static ones) as
command-line arguments, and grows the ensemble in ``epochs`` rounds of ``trees_per_epoch`` trees
(``warm_start``), printing the validation RMSE after each round. Every printed ``val_rmse=`` is one
intermediate objective value, one resource unit for Hyperband, which stops losing trials after a few
rounds. The model goes to SM_MODEL_DIR as ``model.joblib`` (plus ``metadata.json``).
"""

import argparse
import glob
import json
import math
import os

import numpy as np


def load(channel_dir):
    frames = [np.loadtxt(p, delimiter=",", ndmin=2) for p in sorted(glob.glob(os.path.join(channel_dir, "*.csv")))]
    data = np.vstack(frames)
    return data[:, :-1], data[:, -1]


def rmse(model, x, y):
    return math.sqrt(float(np.mean((model.predict(x) - y) ** 2)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--learning_rate", type=float, default=0.1)
    p.add_argument("--max_depth", type=int, default=3)
    p.add_argument("--epochs", type=int, default=8, help="boosting rounds; Hyperband's resource unit")
    p.add_argument("--trees_per_epoch", type=int, default=15)
    p.add_argument("--subsample", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model_dir", default=os.environ.get("SM_MODEL_DIR", "/opt/ml/model"))
    p.add_argument("--train", default=os.environ.get("SM_CHANNEL_TRAIN"))
    p.add_argument("--validation", default=os.environ.get("SM_CHANNEL_VALIDATION"))
    args, _unknown = p.parse_known_args()

    from sklearn.ensemble import GradientBoostingRegressor

    x_train, y_train = load(args.train)
    x_val, y_val = load(args.validation)
    print(f"{len(x_train)} training rows, {len(x_val)} validation rows; learning_rate={args.learning_rate} "
          f"max_depth={args.max_depth} on {os.environ.get('SM_CURRENT_HOST')}", flush=True)
    model = GradientBoostingRegressor(learning_rate=args.learning_rate, max_depth=args.max_depth, n_estimators=0,
                                      subsample=args.subsample, warm_start=True, random_state=args.seed)
    for epoch in range(1, args.epochs + 1):
        model.n_estimators = epoch * args.trees_per_epoch
        model.fit(x_train, y_train)  # warm_start: adds this round's trees to the ones already grown
        print(f"epoch={epoch} trees={model.n_estimators} train_rmse={rmse(model, x_train, y_train):.5f} "
              f"val_rmse={rmse(model, x_val, y_val):.5f}", flush=True)

    import joblib

    os.makedirs(args.model_dir, exist_ok=True)
    joblib.dump(model, os.path.join(args.model_dir, "model.joblib"))
    # the inference handlers travel with the model, as SageMaker's serving containers expect them
    import shutil

    os.makedirs(os.path.join(args.model_dir, "code"), exist_ok=True)
    shutil.copyfile(os.path.join(os.path.dirname(os.path.abspath(__file__)), "inference.py"),
                    os.path.join(args.model_dir, "code", "inference.py"))
    with open(os.path.join(args.model_dir, "metadata.json"), "w") as f:
        json.dump({"learning_rate": args.learning_rate, "max_depth": args.max_depth, "trees": model.n_estimators,
                   "features": int(x_train.shape[1]), "validation_rmse": rmse(model, x_val, y_val)}, f)


if __name__ == "__main__":
    main()
