"""The summary table of python/scale_jobs/ddp_busiest_rank.sh: one line per variant.

    python3 python/scale_jobs/busiest_summary.py OUT_DIR     # writes OUT_DIR/summary.md, prints it

Per variant (OUT_DIR/VARIANT.json, written by ddp_busiest_rank.py): each rank's peak allocated
memory over the run, the difference (last rank minus rank 0) and as a multiple of one bf16 copy of
the parameters, the first point at which the ranks' peaks part, and the allocation sites alive at
the peaks whose bytes differ most between the ranks.
"""
import json
import sys
from pathlib import Path


def row_of(v):
    peaks = v.get("peak_allocated_mib") or []
    diff = v.get("peak_difference_mib")
    copies = v.get("params_bf16_mib")
    ratio = "%.2f" % (diff / copies) if diff is not None and copies else "-"
    sites = "; ".join("%+.0f MiB %s" % (d["mib"], d["site"]) for d in (v.get("site_differences") or [])[:3])
    return "| %s | %s | %s | %s | %s | %s | %s |" % (
        v.get("variant"), v.get("status"), " / ".join("%.1f" % p if p is not None else "-" for p in peaks),
        "%+.1f" % diff if diff is not None else "-", ratio, v.get("peaks_part_at") or "-",
        sites or ("; ".join(v.get("errors") or []) or "-"))


def summary(variants):
    lines = ["| variant | status | peak allocated MiB (rank 0 / 1) | difference MiB | / bf16 params | peaks part at | "
             "sites alive at the peak that differ most (rank 1 - rank 0) |",
             "|---|---|---|---:|---:|---|---|"]
    lines += [row_of(v) for v in variants]
    return "\n".join(lines) + "\n"


def main(argv):
    out = Path(argv[1])
    variants = []
    for p in sorted(out.glob("*.json")):
        if ".rank" in p.name:
            continue
        try:
            variants.append(json.loads(p.read_text()))
        except ValueError as e:
            variants.append({"variant": p.stem, "status": "unreadable", "errors": [str(e)]})
    text = summary(variants)
    (out / "summary.md").write_text(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
