"""What the watch jobs share: the project's one event writer (python/trainfit_runner/probe.py), which
appends to $TRAINFIT_WATCH_EVENTS when `trainfit watch -- JOB` sets it, and the job's device."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from trainfit_runner.probe import Probe  # noqa: E402,F401
