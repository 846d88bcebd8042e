"""The job page's e2e job: every host says a numbered line (and a loss for the plot) twice a second until it is
stopped (or after --ticks lines)."""
import argparse
import os
import time

parser = argparse.ArgumentParser()
parser.add_argument("--ticks", type=int, default=1200)
args, _ = parser.parse_known_args()
host = os.environ.get("SM_CURRENT_HOST", "?")
for i in range(args.ticks):
    print(f"{host} tick {i} loss={1.0 / (i + 1):.4f}", flush=True)
    time.sleep(0.5)
