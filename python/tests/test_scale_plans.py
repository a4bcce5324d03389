"""Every config of the shipped scale-out plans is one the runner accepts, as `trainfit bench` hands
it over: each plan runs through `trainfit bench` with check_runner.py as the runner (it
checks the config as the real runner does and runs nothing), and every row must come back `ok`
with the layout its label names. A plan whose matrix or exclusions drift, or a config the runner
would refuse on the GPU machine, fails here instead of there.

Needs a built trainfit: TRAINFIT_CLI (ctest sets it). `python3 -m unittest python/tests/test_scale_plans.py`
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CLI = os.environ.get("TRAINFIT_CLI", "trainfit")
CHECK_RUNNER = "%s %s" % (sys.executable, Path(__file__).with_name("check_runner.py"))

# plan: (configs, the layouts its labels name, each with the runner's API for it)
PLANS = {
    "scale-out-h200x2": 20,
    "scale-out-time-h200x2": 20,
    "scale-out-h200x4": 28,
    "scale-out-h200x8": 24,
}
API_OF_LABEL = [  # a word of the label -> what measured.layout.api must say
    (" tp", "tensor parallel"), (" pp", "Schedule1F1B"), (" zero1", "ZeroRedundancyOptimizer"),
    (" hsdp", "replicate 2"), (" fsdp-grad-op", "reshard_after_forward=False"),
    (" offload-optimizer,params", "CPUOffloadPolicy"), (" param-bf16 reduce-fp32", "MixedPrecisionPolicy"),
]


class ShippedPlans(unittest.TestCase):
    def test_every_config_is_one_the_runner_runs(self):
        for plan, count in PLANS.items():
            with self.subTest(plan=plan), tempfile.TemporaryDirectory() as d:
                subprocess.run([CLI, "bench", str(REPO / "plans" / (plan + ".toml")), "--runner", CHECK_RUNNER,
                                "--results", d, "--no-telemetry", "--gpu", "h200"],
                               check=True, capture_output=True, text=True)
                rows = [json.loads(line) for line in (Path(d) / "results.jsonl").read_text().splitlines()]
                self.assertEqual(len(rows), count)
                for row in rows:
                    label, measured = row["bench"]["label"], row["measured"]
                    self.assertEqual(measured["status"], "ok", "%s: %s" % (label, measured.get("error")))
                    api = measured["layout"]["api"]
                    for word, expected in API_OF_LABEL:
                        if word in label:
                            self.assertIn(expected, api, label)
                    if " tp" not in label and " pp" not in label:
                        self.assertTrue("DistributedDataParallel" in api or "FSDP2" in api, label)


if __name__ == "__main__":
    unittest.main()
