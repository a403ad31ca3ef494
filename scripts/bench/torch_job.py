"""A torchrun-style PyTorch job for scripts/check-torch-jobs: nothing in it knows about
tandemrun. It reads torchrun's variables, joins the group through env:// (rank 0 serves
its TCPStore on MASTER_PORT) over gloo, and all-reduces rank+1 once: the sum must be
exactly W(W+1)/2. Every rank prints one line with what it saw and got.

    torch_job.py [--kill-rank R]   rank R kills itself (SIGKILL) on the first attempt
                                   (TORCHELASTIC_RESTART_COUNT=0), after joining the group
"""
import argparse
import os
import signal
import sys

import torch
import torch.distributed as dist


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kill-rank", type=int, default=-1)
    a = p.parse_args()
    env = {k: os.environ.get(k, "<unset>") for k in (
        "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
        "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
        "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", "OMP_NUM_THREADS")}
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    if rank == a.kill_rank and restart == 0:
        print(f"rank {rank}: killing myself (SIGKILL) on attempt 0", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    want = world * (world + 1) // 2
    ok = t.item() == want
    print(f"rank {rank}/{world} all_reduce sum={t.item():g} expected={want} {'OK' if ok else 'WRONG'} "
          f"torch.get_num_threads()={torch.get_num_threads()} " + " ".join(f"{k}={v}" for k, v in env.items()),
          flush=True)
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
