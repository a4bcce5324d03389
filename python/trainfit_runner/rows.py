"""A row of the runner (docs/bench.md): the unit its memory figures are in, and how it is written.

run.py writes a bench config's row with write_row, host_probe.py the host probe's record; the row's
memory figures (run.py, steps.py) are MiB, rounded by mib.
"""
import json
import os

MIB = 1 << 20


def mib(x):
    return None if x is None else round(x / MIB, 1)


def write_row(path, row):
    # Written beside its path and renamed onto it: whoever reads the path never finds half a row,
    # not even from a runner killed while writing.
    tmp = str(path) + ".tmp"
    with open(tmp, "w") as f:
        f.write(json.dumps(row) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
