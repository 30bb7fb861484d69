#!/usr/bin/env python3
"""NCCL's collectives through torch.distributed at crossgpu's bench sizes.

`--collective` picks one: all_reduce (sum, the default), all_reduce_max, all_gather,
reduce_scatter or broadcast, sized as nccl-tests and `crossgpu bench collectives` size them
(the all-gather's receive tensor, the reduce-scatter's send tensor), with nccl-tests' bus
bandwidth beside the algorithmic one.

One process per GPU (torch.multiprocessing), f32 payload of 4 KiB to 256 MiB per rank, the same
schedule as `crossgpu bench allreduce` (src/bench/allreduce.rs `schedule`): after warm-up,
batches of back-to-back all-reduces with nothing waiting between them (the decode pattern),
timed from the host with a device synchronize at the batch's end; the figure is the median time
per round over the batches, with p10 and p90. Algorithmic bandwidth = payload bytes / time.
Every result is checked against the sum computed on the host in f64 (ranks fill distinct,
non-zero values).

    python3 nccl_allreduce.py --gpus 2 --label default --out nccl.json
    python3 nccl_allreduce.py --gpus 2 --collective all_gather --out nccl-gather.json
    NCCL_P2P_DISABLE=1 python3 nccl_allreduce.py --gpus 2 --label p2p-disabled --out nccl-nop2p.json
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SIZES = [4 << 10, 16 << 10, 32 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20]


def schedule(nbytes):
    if nbytes <= 262_144:
        return 200, 10
    if nbytes <= 4_194_304:
        return 50, 8
    if nbytes <= 67_108_864:
        return 10, 6
    return 3, 5


def quantile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))]


BUS_FACTOR = {"all_reduce": lambda w: 2 * (w - 1) / w, "all_reduce_max": lambda w: 2 * (w - 1) / w,
              "all_gather": lambda w: (w - 1) / w, "reduce_scatter": lambda w: (w - 1) / w,
              "broadcast": lambda w: 1.0}


def prepare(collective, rank, world, n):
    """The call to time and the check of its result: (run, check) where check() -> (ok, err)."""
    share = n // world
    n = share * world
    ramp = 0.5 + (torch.arange(n, device="cuda", dtype=torch.float64) % 1024) / 1024.0
    mine = (ramp * (rank + 1)).to(torch.float32)
    total = world * (world + 1) / 2
    if collective in ("all_reduce", "all_reduce_max"):
        t = mine.clone()
        op = dist.ReduceOp.SUM if collective == "all_reduce" else dist.ReduceOp.MAX
        want = ramp * (total if collective == "all_reduce" else world)
        return (lambda: dist.all_reduce(t, op=op)), t, want
    if collective == "all_gather":
        src, out = mine[:share].clone(), torch.empty(n, device="cuda", dtype=torch.float32)
        want = torch.cat([ramp[:share] * (r + 1) for r in range(world)])
        return (lambda: dist.all_gather_into_tensor(out, src)), out, want
    if collective == "reduce_scatter":
        out = torch.empty(share, device="cuda", dtype=torch.float32)
        want = (ramp * total)[rank * share:(rank + 1) * share]
        return (lambda: dist.reduce_scatter_tensor(out, mine)), out, want
    if collective == "broadcast":
        t = mine.clone()
        return (lambda: dist.broadcast(t, src=0)), t, ramp
    raise SystemExit(f"--collective {collective}: unknown")


def worker(rank, world, port, sizes, label, out, collective):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.cuda.set_device(rank)
    try:
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    except TypeError:  # torch older than 2.3 has no device_id
        dist.init_process_group("nccl", rank=rank, world_size=world)
    points = []
    for nbytes in sizes:
        # Distinct, non-zero values per rank: rank+1 scaled by a ramp in [0.5, 1.5).
        call, result, want = prepare(collective, rank, world, nbytes // 4)
        nbytes = want.numel() * 4
        # Correctness: one call against the f64 result of every rank's values.
        call()
        err = (result.to(torch.float64) - want).abs().max().item() if want.numel() else 0.0
        bound = world * 2.0 ** -23 * want.abs().max().item() if want.numel() else 0.0
        ok = err <= bound
        per_batch, batches = schedule(nbytes)
        for _ in range(max(3, per_batch // 10)):
            call()
        torch.cuda.synchronize()
        times = []
        for _ in range(batches):
            dist.barrier()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(per_batch):
                call()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) / per_batch * 1e6)
        # The slowest rank's time is the collective's time.
        gathered = [None] * world
        dist.all_gather_object(gathered, (times, ok, err))
        if rank == 0:
            worst = [max(g[0][i] for g in gathered) for i in range(batches)]
            med = statistics.median(worst)
            p = {
                "layout": f"{world} GPUs, NCCL {label}, {collective}",
                "members": world,
                "mode": f"NCCL ({label})",
                "bytes": nbytes,
                "wire": "f32",
                "us_per_round": {"median": med, "p10": quantile(worst, 0.1), "p90": quantile(worst, 0.9), "samples": batches},
                "collective": collective,
                "algbw_gbps": nbytes / med / 1e3,
                "busbw_gbps": nbytes / med / 1e3 * BUS_FACTOR[collective](world),
                "rounds_per_batch": per_batch,
                "checked": all(g[1] for g in gathered),
                "max_abs_error": max(g[2] for g in gathered),
            }
            points.append(p)
            print(f"{p['layout']:<32} {nbytes:>10} B  {med:>10.1f} us (p10 {p['us_per_round']['p10']:>9.1f}, "
                  f"p90 {p['us_per_round']['p90']:>9.1f})  {p['algbw_gbps']:>7.2f} GB/s  checked={p['checked']}", flush=True)
    if rank == 0:
        env = {k: v for k, v in os.environ.items() if k.startswith(("NCCL_", "TORCH_SYMM", "NVSHMEM"))}
        with open(out, "w") as f:
            json.dump({"torch": torch.__version__, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                       "env": env, "allreduce": points}, f, indent=1)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=torch.cuda.device_count())
    ap.add_argument("--label", default="default")
    ap.add_argument("--out", default="nccl.json")
    ap.add_argument("--max-bytes", type=int, default=256 << 20)
    ap.add_argument("--port", type=int, default=29517)
    ap.add_argument("--collective", default="all_reduce", choices=sorted(BUS_FACTOR))
    a = ap.parse_args()
    sizes = [s for s in SIZES if s <= a.max_bytes]
    mp.spawn(worker, args=(a.gpus, a.port, sizes, a.label, a.out, a.collective), nprocs=a.gpus, join=True)


if __name__ == "__main__":
    main()
