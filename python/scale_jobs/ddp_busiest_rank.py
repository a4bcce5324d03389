"""The busiest GPU of a plain DDP loop: why does rank 1 peak higher than rank 0?

A user's two-H200 measurement of full fine-tuning (Qwen2.5-1.5B, Llama-3.2-3B; bf16; DDP; fused
AdamW) peaked higher on rank 1 than on rank 0 by about one bf16 copy of the parameters (+2,951 and
+6,128 MiB). This script is that loop, as a user writes it, with switches that each remove one
suspect, and a record of what each rank holds at every point and at its peak:

    torchrun --standalone --nproc_per_node=2 python/scale_jobs/ddp_busiest_rank.py \\
        --model qwen2.5-1.5b --variant baseline --out OUT_DIR [switches]

(python/scale_jobs/ddp_busiest_rank.sh runs every variant, one clean launch each, and summarises.)

Each rank records memory_allocated / max_memory_allocated on its own device after the model is
built, after DDP construction, after each phase (forward, backward, optimizer step, zero_grad)
of every step; the peak is max_memory_allocated over the whole run (not reset per step, as the
user measured, unless --reset-after-ddp). With --snapshot the allocator's history
(torch.cuda.memory._record_memory_history) is recorded from before the build; at the end each
rank replays it (trainfit_runner.memtrace) and lists the largest blocks alive at its peak and the
allocation sites holding the most, with their Python (and, --stacks all, C++) frames. Writes
OUT_DIR/VARIANT.rankR.json per rank and OUT_DIR/VARIANT.json (rank 0: both ranks side by side).
"""
import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from trainfit_runner import memtrace  # noqa: E402

MIB = 1 << 20


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen2.5-1.5b", help="built-in name (data/models/NAME.json) or config.json")
    ap.add_argument("--variant", default="baseline", help="name of this run (the output file's name)")
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--optimizer", choices=["fused", "foreach", "for-loop"], default="fused",
                    help="AdamW implementation (the user's: fused)")
    ap.add_argument("--build", choices=["device", "cpu"], default="device",
                    help="build the model on its GPU, or on the CPU and then .to(rank)")
    ap.add_argument("--set-device", choices=["before", "none"], default="before",
                    help="torch.cuda.set_device(rank) before anything else, or never")
    ap.add_argument("--no-ddp", action="store_true",
                    help="no DDP: the same model, gradients all-reduced one by one after backward")
    ap.add_argument("--init-sync", choices=["on", "off"], default="on",
                    help="DDP's broadcast of rank 0's parameters at construction (init_sync)")
    ap.add_argument("--broadcast-buffers", choices=["on", "off"], default="on")
    ap.add_argument("--bucket-view", action="store_true", help="DDP gradient_as_bucket_view=True")
    ap.add_argument("--reset-after-ddp", action="store_true",
                    help="reset_peak_memory_stats after DDP construction (the peak of the steps alone)")
    ap.add_argument("--snapshot", action="store_true", help="record the allocator's history and analyse the peak")
    ap.add_argument("--stacks", choices=["python", "all"], default="python", help="with --snapshot: C++ frames too")
    ap.add_argument("--raw-snapshot", action="store_true", help="also write the raw snapshot (pickle, for "
                    "https://pytorch.org/memory_viz)")
    return ap.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    import torch
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM
    from trainfit_runner.models import load_hf_config

    rank, local, world = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    device = torch.device("cuda", local)
    if args.set_device == "before":
        torch.cuda.set_device(device)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rec = {"variant": args.variant, "rank": rank, "world_size": world, "args": vars(args),
           "torch": torch.__version__, "points": [], "status": "running"}

    def point(name):
        # Every figure of this rank's own device (explicitly: without set_device the current
        # device of rank 1 is cuda:0).
        torch.cuda.synchronize(device)
        rec["points"].append({"at": name, "allocated_mib": round(torch.cuda.memory_allocated(device) / MIB, 1),
                              "max_allocated_mib": round(torch.cuda.max_memory_allocated(device) / MIB, 1),
                              "reserved_mib": round(torch.cuda.memory_reserved(device) / MIB, 1),
                              "t": round(time.time() - t0, 3)})

    t0 = time.time()
    if args.snapshot:
        torch.cuda.memory._record_memory_history(max_entries=2_000_000, stacks=args.stacks)
    dist.init_process_group("nccl")
    try:
        torch.manual_seed(0)
        hf = load_hf_config(args.model)
        if args.build == "device":
            with torch.device(device):
                model = AutoModelForCausalLM.from_config(hf, dtype=torch.bfloat16, attn_implementation="sdpa")
        else:
            model = AutoModelForCausalLM.from_config(hf, dtype=torch.bfloat16, attn_implementation="sdpa")
            model = model.to(device)
        model.train()
        rec["params"] = sum(p.numel() for p in model.parameters())
        rec["params_bf16_mib"] = round(rec["params"] * 2 / MIB, 1)
        point("after build")
        if args.no_ddp:
            ddp = model
        else:
            from torch.nn.parallel import DistributedDataParallel as DDP
            kwargs = {"broadcast_buffers": args.broadcast_buffers == "on",
                      "gradient_as_bucket_view": args.bucket_view}
            if args.init_sync == "off":
                kwargs["init_sync"] = False  # torch >= 2.4
            ddp = DDP(model, device_ids=[local], **kwargs)
        point("after DDP construction")
        if args.reset_after_ddp:
            torch.cuda.reset_peak_memory_stats(device)
        params = [p for p in ddp.parameters() if p.requires_grad]
        opt_kwargs = {"fused": True} if args.optimizer == "fused" else \
            {"foreach": True} if args.optimizer == "foreach" else {"foreach": False}
        opt = torch.optim.AdamW(params, lr=1e-5, **opt_kwargs)
        ids = torch.randint(0, hf.vocab_size, (args.batch, args.seq),
                            generator=torch.Generator().manual_seed(1234)).to(device)
        step_seconds = []
        for step in range(1, args.steps + 1):
            torch.cuda.synchronize(device)
            ts = time.perf_counter()
            loss = ddp(input_ids=ids, labels=ids).loss
            point("step %d forward" % step)
            loss.backward()
            del loss
            if args.no_ddp:
                for p in params:
                    dist.all_reduce(p.grad)
                    p.grad.div_(world)
            point("step %d backward" % step)
            opt.step()
            point("step %d optimizer" % step)
            opt.zero_grad(set_to_none=True)
            point("step %d zero_grad" % step)
            step_seconds.append(round(time.perf_counter() - ts, 4))
        rec["step_seconds"] = step_seconds
        rec["peak_allocated_mib"] = round(torch.cuda.max_memory_allocated(device) / MIB, 1)
        rec["peak_reserved_mib"] = round(torch.cuda.max_memory_reserved(device) / MIB, 1)
        rec["status"] = "ok"
    except Exception as e:
        rec["status"] = "error"
        rec["error"] = "%s: %s" % (type(e).__name__, str(e)[:1500])
        rec["traceback"] = traceback.format_exc()[-3000:]
    if args.snapshot:
        try:
            snap = torch.cuda.memory._snapshot()
            torch.cuda.memory._record_memory_history(enabled=None)
            traces = snap.get("device_traces", [])
            events = traces[local] if local < len(traces) else []
            rec["snapshot"] = memtrace.peak_report(events)
            if args.raw_snapshot:
                import pickle
                with open(out / ("%s.rank%d.snapshot.pickle" % (args.variant, rank)), "wb") as f:
                    pickle.dump(snap, f)
        except Exception as e:
            rec["snapshot_error"] = "%s: %s" % (type(e).__name__, str(e)[:500])
    rec["wall_seconds"] = round(time.time() - t0, 2)
    (out / ("%s.rank%d.json" % (args.variant, rank))).write_text(json.dumps(rec, indent=1) + "\n")
    ranks = [None] * world
    dist.all_gather_object(ranks, rec)
    if rank == 0:
        (out / ("%s.json" % args.variant)).write_text(json.dumps(compare(ranks), indent=1) + "\n")
    dist.destroy_process_group()
    return 0 if rec["status"] == "ok" else 1


def compare(ranks):
    """Both ranks side by side: each one's peak and points, the difference of every point and of
    the peaks (last rank minus first), and the allocation sites that make the difference at the peak."""
    first, last = ranks[0], ranks[-1]
    out = {"variant": first.get("variant"), "args": first.get("args"), "params": first.get("params"),
           "params_bf16_mib": first.get("params_bf16_mib"),
           "status": "ok" if all(r.get("status") == "ok" for r in ranks) else "error",
           "errors": [r.get("error") for r in ranks if r.get("error")],
           "peak_allocated_mib": [r.get("peak_allocated_mib") for r in ranks],
           "step_seconds": [r.get("step_seconds") for r in ranks]}
    a, b = first.get("peak_allocated_mib"), last.get("peak_allocated_mib")
    out["peak_difference_mib"] = round(b - a, 1) if a is not None and b is not None else None
    points = []
    for pa, pb in zip(first.get("points", []), last.get("points", [])):
        points.append({"at": pa["at"], "allocated_mib": [pa["allocated_mib"], pb["allocated_mib"]],
                       "max_allocated_mib": [pa["max_allocated_mib"], pb["max_allocated_mib"]],
                       "max_difference_mib": round(pb["max_allocated_mib"] - pa["max_allocated_mib"], 1)})
    out["points"] = points
    # Where the difference first appears: the first point at which the peaks part by > 64 MiB.
    parted = [p["at"] for p in points if abs(p["max_difference_mib"]) > 64]
    out["peaks_part_at"] = parted[0] if parted else None
    sa, sb = first.get("snapshot"), last.get("snapshot")
    if sa and sb:
        out["snapshot_peak_mib"] = [sa["peak_mib"], sb["peak_mib"]]
        out["site_differences"] = memtrace.site_differences(sa, sb)
        out["largest_at_peak"] = [sa["largest"][:5], sb["largest"][:5]]
    return out


if __name__ == "__main__":
    sys.exit(main())
