"""`trainfit trace --snapshot` on the OOM pickles of a boundary scan, beside PyTorch's own message.

    python3 python/boundary_jobs/check_snapshots.py OUT_DIR --trainfit build/default/app/trainfit

For each trial of OUT_DIR/trials.jsonl that left a snapshot (OUT_DIR/snapshots/*.pickle, or .gz),
the error PyTorch raised names what failed and the allocator's totals at that moment ("Tried to
allocate X. ... Of the allocated memory A is allocated by PyTorch, and R is reserved by PyTorch but
unallocated."); trainfit reads the pickle alone. Prints one line a snapshot with both and the
differences, and the largest of each (issue 35: the request within 0.5%, allocated and reserved
within 1.5%, fragmentation named exactly when the cached free memory held the request).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def size(text):
    value, unit = text.split()
    return float(value) * UNITS[unit]


def from_message(error):
    tried = re.search(r"Tried to allocate ([\d.]+ \w?i?B)", error)
    held = re.search(r"Of the allocated memory ([\d.]+ \w?i?B) is allocated by PyTorch, and ([\d.]+ \w?i?B) is "
                     r"reserved by PyTorch but unallocated", error)
    if not tried or not held:
        return None
    allocated = size(held.group(1))
    return {"segment": size(tried.group(1)), "allocated": allocated, "reserved": allocated + size(held.group(2))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--trainfit", required=True)
    a = ap.parse_args()
    worst = {"segment": 0.0, "allocated": 0.0, "reserved": 0.0, "seconds": 0.0}
    rows = 0
    with open(os.path.join(a.out_dir, "trials.jsonl")) as f:
        trials = [json.loads(line) for line in f if line.strip()]
    for t in trials:
        if not t.get("snapshot"):
            continue
        path = os.path.join(a.out_dir, "snapshots", t["snapshot"])
        if not os.path.exists(path) and os.path.exists(path + ".gz"):
            path += ".gz"
        said = from_message(t.get("error") or "")
        t0 = time.perf_counter()
        r = subprocess.run([a.trainfit, "trace", "--snapshot", path, "--format", "json"], capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        if r.returncode != 0:
            print("%s: trainfit failed: %s" % (t["snapshot"], r.stdout + r.stderr))
            continue
        oom = json.loads(r.stdout)["snapshot"]["oom"]
        if oom is None or said is None:
            print("%s: %s" % (t["snapshot"], "no oom event in the history" if oom is None else "no totals in the error"))
            continue
        got = {"segment": oom["segment_request_bytes"], "allocated": oom["allocated_bytes"],
               "reserved": oom["reserved_bytes"]}
        diff = {k: (got[k] - said[k]) / said[k] for k in got}
        for k in diff:
            worst[k] = max(worst[k], abs(diff[k]))
        worst["seconds"] = max(worst["seconds"], seconds)
        rows += 1
        print("%-44s request %8.1f MiB (message %8.1f, %+.2f%%)  allocated %+.2f%%  reserved %+.2f%%  "
              "cached free %7.1f MiB, largest free block %7.1f MiB, fragmentation %-5s  %.2f s  %d MB" % (
                  t["snapshot"], got["segment"] / 2**20, said["segment"] / 2**20, 100 * diff["segment"],
                  100 * diff["allocated"], 100 * diff["reserved"], oom["cached_free_bytes"] / 2**20,
                  oom["largest_free_block_bytes"] / 2**20, oom["fragmentation"], seconds,
                  os.path.getsize(path) // 10**6))
    print("%d snapshots; largest differences: request %.2f%%, allocated %.2f%%, reserved %.2f%%; slowest %.2f s" % (
        rows, 100 * worst["segment"], 100 * worst["allocated"], 100 * worst["reserved"], worst["seconds"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
