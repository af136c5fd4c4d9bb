"""A stand-in training script for fleet jobs: it reads the task's place in
its gang from the environment the agent sets, "trains" for --steps steps and
prints one line per step. Runs anywhere (no GPU, no framework needed):

    ferry submit --tasks 2 --gpus 4 -- python3 $PWD/examples/fleet/train.py --steps 3
"""

import argparse
import os
import time


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--step-seconds", type=float, default=0.2)
    args = parser.parse_args()

    # RANK/WORLD_SIZE are what torch.distributed reads; FERRY_TASK_* are
    # Ferry's own names for the same thing.
    rank = int(os.environ.get("RANK", os.environ.get("FERRY_TASK_INDEX", "0")))
    world = int(os.environ.get("WORLD_SIZE", os.environ.get("FERRY_TASK_COUNT", "1")))
    node = os.environ.get("FERRY_NODE", "?")
    gpus = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    print(f"rank {rank} of {world} on {node}, GPUs {gpus or 'none'}", flush=True)
    loss = 2.0
    for step in range(1, args.steps + 1):
        time.sleep(args.step_seconds)
        loss *= 0.7
        print(f"rank {rank} step {step}/{args.steps} loss {loss:.3f}", flush=True)
    print(f"rank {rank} done", flush=True)


if __name__ == "__main__":
    main()
