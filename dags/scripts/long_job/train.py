"""A long training as resumable units of work: the script of a job chain (seed Option 4).

Each job of the chain is cut off by MaxRuntimeInSeconds (SIGTERM). The script keeps its progress in
/opt/ml/checkpoints (SageMaker syncs it to the checkpoint S3 URI and copies it back into the next job),
resumes from it, and writes the FINISHED marker there when all units are done.
"""

import argparse
import json
import os
import signal
import sys
import time

# /opt/ml/checkpoints on SageMaker; SAGEMAKER_BASE_DIR relocates /opt/ml where the local backend has to
CKPT = os.path.join(os.environ.get("SAGEMAKER_BASE_DIR", "/opt/ml"), "checkpoints")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--units", type=int, default=12)
    p.add_argument("--seconds_per_unit", type=float, default=0.5)
    args = p.parse_args()
    os.makedirs(CKPT, exist_ok=True)
    state_path = os.path.join(CKPT, "progress.json")
    state = {"done": 0, "total": 0.0}
    if os.path.exists(state_path):
        with open(state_path) as f:
            state = json.load(f)
        print(f"resuming at unit {state['done']}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: (print("SIGTERM: runtime limit, progress is checkpointed", flush=True),
                                              sys.exit(0)))
    while state["done"] < args.units:
        time.sleep(args.seconds_per_unit)  # the work of one unit
        state["done"] += 1
        state["total"] += state["done"] ** 0.5
        tmp = state_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(state, f)
        os.replace(tmp, state_path)  # never a half-written checkpoint
        print(f"unit={state['done']} progress={state['done'] / args.units:.3f}", flush=True)
    with open(os.path.join(os.environ.get("SM_MODEL_DIR", "/opt/ml/model"), "result.json"), "w") as f:
        json.dump(state, f)
    open(os.path.join(CKPT, "FINISHED"), "w").close()
    print("finished=1", flush=True)


if __name__ == "__main__":
    main()
