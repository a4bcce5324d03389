"""trainfit's training-side tools: the bench runner (run.py), the NF4 layer (nf4.py), the probe for
people's own training loops (probe.py), and the measurement scripts that took data/measurements."""
