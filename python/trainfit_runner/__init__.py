"""trainfit's training-side tools: the bench runner (run.py, what `python -m trainfit_runner` runs;
the models it builds are in models.py, the steps it measures in steps.py, how it writes its row in
rows.py), the NF4 layer (nf4.py), the probe for people's own training loops (probe.py), and the
measurement scripts that took data/measurements. No module here but __main__.py imports run.py: it
is the entry point, not a library (python/tests/test_runner_imports.py)."""
