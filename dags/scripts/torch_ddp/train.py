"""Distributed data-parallel regression with PyTorch, as it runs in SageMaker's PyTorch container.

Launched by torchrun (distribution={"torch_distributed": {"enabled": True}}) on every host. Reads its
channel from SM_CHANNEL_TRAIN (each host holds its ShardedByS3Key shard), uses the learning rate the DAG
scaled for the global batch (linear scaling rule) with gradual warm-up (Goyal et al. 2017), checkpoints
from rank 0 only into /opt/ml/checkpoints (synced to S3 by SageMaker, restored on restart), and saves the
model from rank 0 into SM_MODEL_DIR.
"""

import argparse
import glob
import json
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

# /opt/ml/checkpoints on SageMaker; SAGEMAKER_BASE_DIR relocates /opt/ml where the local backend has to
CHECKPOINT_DIR = os.path.join(os.environ.get("SAGEMAKER_BASE_DIR", "/opt/ml"), "checkpoints")


def load(channel_dir):
    rows = []
    for path in sorted(glob.glob(os.path.join(channel_dir, "**", "*.csv"), recursive=True)):
        with open(path) as f:
            rows += [[float(v) for v in line.split(",")] for line in f if line.strip()]
    data = torch.tensor(rows, dtype=torch.float32)
    return data[:, :-1], data[:, -1:]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--learning_rate", type=float, default=0.01)
    p.add_argument("--warmup_epochs", type=float, default=0.0)
    p.add_argument("--batch_size", type=int, default=32, help="per-device batch size")
    p.add_argument("--epoch_seconds", type=float, default=0.0,
                   help="pace each epoch to at least this long (demo-sized data trains in milliseconds; a "
                        "rehearsed spot interruption needs epochs that take time)")
    p.add_argument("--model_dir", default=os.environ.get("SM_MODEL_DIR", "/opt/ml/model"))
    p.add_argument("--train", default=os.environ.get("SM_CHANNEL_TRAIN"))
    args = p.parse_args()

    dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if torch.cuda.is_available() else "cpu")
    # every rank contributes rank + 1: the sum proves all ranks joined one process group
    check = torch.tensor([float(rank + 1)])
    dist.all_reduce(check)
    if check.item() != world * (world + 1) / 2:
        raise RuntimeError(f"all-reduce gave {check.item()}, expected {world * (world + 1) / 2}")
    print(f"rank {rank}: all-reduce check passed (sum {check.item():.0f} over world size {world})", flush=True)
    x, y = load(args.train)
    print(f"rank {rank}/{world} on {os.environ.get('SM_CURRENT_HOST')}: {len(x)} rows in its shard", flush=True)
    # ranks agree on the number of steps per epoch (shards may differ by one object)
    steps = torch.tensor([len(x) // args.batch_size])
    dist.all_reduce(steps, op=dist.ReduceOp.MIN)
    steps = max(1, int(steps.item()))

    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(x.shape[1], 16), torch.nn.ReLU(),
                                    torch.nn.Linear(16, 1)).to(device))
    opt = torch.optim.SGD(model.parameters(), lr=args.learning_rate, momentum=0.9)
    start_epoch, mean = 0, None
    ckpt = os.path.join(CHECKPOINT_DIR, "checkpoint.pt")
    if os.path.exists(ckpt):  # resume: SageMaker copied the checkpoint S3 URI here at start
        state = torch.load(ckpt, map_location=device)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start_epoch, mean = state["epoch"] + 1, state.get("train_loss")
        # a retry after the last epoch's checkpoint (the failed try got that far) has nothing left to train,
        # and still saves the model below
        print(f"resumed from checkpoint at epoch {start_epoch}", flush=True)

    warmup_steps = int(args.warmup_epochs * steps)
    global_step = start_epoch * steps
    for epoch in range(start_epoch, args.epochs):
        perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(epoch))
        total = torch.zeros(1)
        began = time.time()
        for i in range(steps):
            # gradual warm-up: ramp from lr/world to the scaled lr over warmup_epochs
            if global_step < warmup_steps:
                lr = args.learning_rate * (1 / world + (1 - 1 / world) * global_step / warmup_steps)
            else:
                lr = args.learning_rate
            for group in opt.param_groups:
                group["lr"] = lr
            idx = perm[i * args.batch_size:(i + 1) * args.batch_size]
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x[idx].to(device)), y[idx].to(device))
            loss.backward()
            opt.step()
            total += loss.detach().cpu()
            global_step += 1
        time.sleep(max(0.0, args.epoch_seconds - (time.time() - began)))
        dist.all_reduce(total)
        mean = total.item() / (steps * world)
        samples_per_sec = steps * args.batch_size * world / max(time.time() - began, 1e-9)  # global throughput
        if rank == 0:
            print(f"epoch={epoch} lr={lr:.5f} train_loss={mean:.6f} samples_per_sec={samples_per_sec:.1f}", flush=True)
            os.makedirs(CHECKPOINT_DIR, exist_ok=True)
            torch.save({"model": model.module.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch,
                        "train_loss": mean}, ckpt)
        dist.barrier()

    if rank == 0:
        torch.save(model.module.state_dict(), os.path.join(args.model_dir, "model.pt"))
        with open(os.path.join(args.model_dir, "training.json"), "w") as f:
            json.dump({"world_size": world, "epochs": args.epochs, "learning_rate": args.learning_rate,
                       "final_train_loss": mean}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
