"""Train a small scikit-learn regressor, as it runs in SageMaker's scikit-learn container (script mode).

Reads every CSV of the ``train`` channel (SM_CHANNEL_TRAIN; columns x0..x3, y), fits a ridge regression on
polynomial features, and saves into SM_MODEL_DIR what batch inference needs: ``model.joblib`` and
``code/inference.py`` (the SageMaker inference handlers). SageMaker packs SM_MODEL_DIR as model.tar.gz, so
the artifact carries its own inference code: a model created from it (SAGEMAKER_SUBMIT_DIRECTORY
/opt/ml/model/code) serves with these handlers, in a transform job, a processing job or an endpoint.
"""

import argparse
import glob
import os
import shutil

import joblib
import numpy as np
from sklearn.linear_model import Ridge
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import PolynomialFeatures, StandardScaler


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--alpha", type=float, default=1.0)
    p.add_argument("--degree", type=int, default=2)
    p.add_argument("--model-dir", default=os.environ.get("SM_MODEL_DIR", "/opt/ml/model"))
    p.add_argument("--train", default=os.environ.get("SM_CHANNEL_TRAIN", "/opt/ml/input/data/train"))
    args = p.parse_args()

    files = sorted(glob.glob(os.path.join(args.train, "**", "*.csv"), recursive=True))
    data = np.vstack([np.atleast_2d(np.loadtxt(f, delimiter=",")) for f in files])
    x, y = data[:, :-1], data[:, -1]
    model = make_pipeline(StandardScaler(), PolynomialFeatures(args.degree), Ridge(alpha=args.alpha))
    model.fit(x, y)
    r2 = model.score(x, y)
    print(f"trained on {len(x)} rows from {len(files)} file(s): train_r2={r2:.5f}", flush=True)

    os.makedirs(os.path.join(args.model_dir, "code"), exist_ok=True)
    joblib.dump(model, os.path.join(args.model_dir, "model.joblib"))
    here = os.path.dirname(os.path.abspath(__file__))
    shutil.copyfile(os.path.join(here, "inference.py"), os.path.join(args.model_dir, "code", "inference.py"))


if __name__ == "__main__":
    main()
