#!/usr/bin/env python3
"""A data-parallel PyTorch script (gloo) that uses python/dslaunch the way a
user's train.py would: heartbeats each step, checkpoints it commits, resume
from the committed tag after a restart, and preemption.

  dslaunch --num_gpus 2 python3 python_train.py --steps 10 --checkpoint_dir DIR

Fault injection for tests/integration/test_python_client.sh, on attempt 0
only: --freeze_at_step N (rank --fault_rank's main thread sleeps after step
N while its heartbeat thread goes on: a hang) and --stop_at_step N (that rank
stops itself with SIGSTOP: a frozen process).
"""
import argparse
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import dslaunch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--checkpoint_dir", required=True)
    p.add_argument("--interval", type=int, default=4)
    p.add_argument("--step_sleep", type=float, default=0.0)
    p.add_argument("--freeze_at_step", type=int, default=0)
    p.add_argument("--stop_at_step", type=int, default=0)
    p.add_argument("--fault_rank", type=int, default=1)
    p.add_argument("--loss_log", default="")
    p.add_argument("--local_rank", type=int, default=-1)  # dslaunch passes it, as DeepSpeed does
    args = p.parse_args()

    dist.init_process_group("gloo")  # RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from dslaunch
    rank, world = dist.get_rank(), dist.get_world_size()
    attempt = int(os.environ.get("DSLAUNCH_ATTEMPT", "0"))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    first = 1
    tag = dslaunch.resume_tag()
    if tag:
        state = torch.load(os.path.join(args.checkpoint_dir, tag, "rank%d.pt" % rank))
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        first = state["step"] + 1
        if rank == 0:
            print("resumed from %s at step %d" % (tag, state["step"]), flush=True)
    log = open(args.loss_log, "a") if args.loss_log and rank == 0 else None

    for step in range(first, args.steps + 1):
        g = torch.Generator().manual_seed(1000 * step + rank)
        x = torch.randn(32, 16, generator=g)
        y = torch.sin(x.sum(1, keepdim=True))
        loss = ((model(x) - y) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        for param in model.parameters():
            dist.all_reduce(param.grad)
            param.grad /= world
        optimizer.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        mean /= world
        dslaunch.heartbeat(step, loss=mean.item(), total_steps=args.steps)
        if rank == 0:
            print("step=%d loss=%.9f" % (step, mean.item()), flush=True)
            if log:
                log.write("%d\t%.9g\n" % (step, mean.item()))
                log.flush()
        faulting = attempt == 0 and rank == args.fault_rank and step in (args.freeze_at_step, args.stop_at_step)
        if faulting and not dslaunch.wait_for_heartbeat(60):
            # Both detections are armed by the first report the agent accepted.
            sys.exit("rank %d: no heartbeat accepted within 60 s" % rank)
        if attempt == 0 and rank == args.fault_rank and step == args.freeze_at_step:
            print("rank %d: main thread stuck after step %d on purpose" % (rank, step), flush=True)
            time.sleep(3600)
        if attempt == 0 and rank == args.fault_rank and step == args.stop_at_step:
            print("rank %d: stopping itself after step %d on purpose" % (rank, step), flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)
        # Every rank acts on the same answer: any rank that saw the flag counts.
        flag = torch.tensor([1 if dslaunch.preempt_requested() else 0])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        preempted = bool(flag.item())
        if step % args.interval == 0 or step == args.steps or preempted:
            tag = "global_step%d" % step
            folder = os.path.join(args.checkpoint_dir, tag)
            os.makedirs(folder, exist_ok=True)
            path = os.path.join(folder, "rank%d.pt" % rank)
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, path + ".tmp")
            os.replace(path + ".tmp", path)
            dist.barrier()  # every rank's file is written
            dslaunch.checkpoint_committed(tag)
        if preempted:
            if rank == 0:
                print("preempted after step %d; checkpoint global_step%d committed" % (step, step), flush=True)
            break
        if args.step_sleep:
            time.sleep(args.step_sleep)
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
