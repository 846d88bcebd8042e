"""Own distributed code (seed option 3): hosts coordinate themselves through the cluster contract.

Each host scores its ShardedByS3Key share of the records (an embarrassingly parallel map), then the
hosts reduce by hand over TCP: every host sends its partial result to the master (the first host of
SM_HOSTS / resourceconfig.json), which listens on its own address, adds them up and writes the model.
``airflow_smdist.runtime.cluster()`` reads the same facts on SageMaker and on the local backend; the
operator ships it in sourcedir.tar.gz (include_runtime=True).
"""

import argparse
import glob
import json
import math
import os
import socket
import time

from airflow_smdist.runtime import cluster

PORT = 29400


def partial(channel_dir):
    n, total, sq = 0, 0.0, 0.0
    for path in sorted(glob.glob(os.path.join(channel_dir, "**", "*.csv"), recursive=True)):
        with open(path) as f:
            for line in f:
                if line.strip():
                    value = float(line.split(",")[-1])
                    n += 1
                    total += value
                    sq += value * value
    return {"n": n, "sum": total, "sumsq": sq}


def send(master, message, deadline):
    while True:  # the master may not listen yet (hosts resolve and start at different times)
        try:
            with socket.create_connection((master, PORT), timeout=5) as s:
                s.sendall(json.dumps(message).encode() + b"\n")
                return
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.2)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--timeout", type=float, default=120)
    args = p.parse_args()
    c = cluster()
    mine = partial(c.channels["records"])
    print(f"host {c.current_host} (rank {c.host_rank}/{c.num_hosts}): {mine['n']} records", flush=True)
    deadline = time.time() + args.timeout
    if not c.is_master_host:
        send(c.master_addr, {"host": c.current_host, **mine}, deadline)
        return
    results = {c.current_host: mine}
    with socket.create_server((c.master_addr, PORT)) as server:  # the master host's own address
        server.settimeout(max(1.0, deadline - time.time()))
        while len(results) < c.num_hosts:
            conn, _ = server.accept()
            with conn, conn.makefile() as f:
                message = json.loads(f.readline())
            results[message.pop("host")] = message
    n = sum(r["n"] for r in results.values())
    mean = sum(r["sum"] for r in results.values()) / n
    std = math.sqrt(sum(r["sumsq"] for r in results.values()) / n - mean * mean)
    print(f"records={n} mean={mean:.6f} std={std:.6f}", flush=True)
    with open(os.path.join(c.model_dir, "summary.json"), "w") as f:
        json.dump({"records": n, "mean": mean, "std": std, "hosts": sorted(results)}, f)


if __name__ == "__main__":
    main()
