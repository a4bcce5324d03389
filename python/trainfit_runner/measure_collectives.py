"""Measures what data parallelism's collectives achieve between this machine's GPUs (docs/model.md,
"Data parallelism"): NCCL all-reduce (DDP's gradient buckets), all-gather and reduce-scatter
(FSDP's parameter gathering and gradient sharding), bf16, from 1 MiB to 1 GiB per GPU.

    torchrun --standalone --nproc_per_node 2 -m trainfit_runner.measure_collectives --out FILE

Each size reports the time of one collective (median of timed repeats after warm-ups) and its bus
bandwidth, the figure NCCL's own tests print: what each GPU's link carries per second, so that one
number describes all three collectives.  For n GPUs and S bytes per GPU (the full tensor):
all-reduce moves 2 (n-1)/n S per GPU, all-gather and reduce-scatter (n-1)/n S.
Rank 0 prints one JSON object and writes it to --out.
"""
import argparse
import json
import os
import statistics
import subprocess
import time

import torch
import torch.distributed as dist

MIB = 1 << 20


def timed(fn, repeats=10, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        dist.barrier()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(prog="python -m trainfit_runner.measure_collectives", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="also write the JSON here")
    ap.add_argument("--max-mib", type=int, default=1024)
    args = ap.parse_args()
    dist.init_process_group("nccl")
    rank, n = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    rows = []
    size = MIB
    while size <= args.max_mib * MIB:
        elems = size // 2
        full = torch.ones(elems, dtype=torch.bfloat16, device="cuda")
        shard = torch.ones(elems // n, dtype=torch.bfloat16, device="cuda")
        t_ar = timed(lambda: dist.all_reduce(full))
        t_ag = timed(lambda: dist.all_gather_into_tensor(full, shard))
        t_rs = timed(lambda: dist.reduce_scatter_tensor(shard, full))
        moved = (n - 1) / n * size
        rows.append({"bytes": size,
                     "all_reduce": {"seconds": t_ar, "bus_bytes_per_s": 2 * moved / t_ar},
                     "all_gather": {"seconds": t_ag, "bus_bytes_per_s": moved / t_ag},
                     "reduce_scatter": {"seconds": t_rs, "bus_bytes_per_s": moved / t_rs}})
        del full, shard
        size *= 4
    if rank == 0:
        try:
            topo = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=30).stdout
        except Exception as e:  # the figures stand without it
            topo = "unavailable: %s" % e
        doc = {"world_size": n, "gpu": torch.cuda.get_device_name(local), "torch": torch.__version__,
               "nccl": ".".join(map(str, torch.cuda.nccl.version())), "topology": topo, "sizes": rows}
        text = json.dumps(doc, indent=1)
        print(text)
        if args.out:
            with open(args.out, "w") as f:
                f.write(text + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
