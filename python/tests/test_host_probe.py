"""The host probe's runner side (python/trainfit_runner/host_probe.py).

The packaged request is what trainfit prints (`trainfit calibrate --host --print-request`; needs
TRAINFIT_CLI). With torch (Debian's CPU-only python3-torch is enough) the probe runs end to end on
the CPU: the runner's own build_model and run_steps time the steps of its torch-only toy model
(x_toy: no transformers needed), the probe's record has every step, the CPU's name and torch's
version; `trainfit bench --host-probe`'s path (run.py under $TRAINFIT_HOST_PROBE) puts the record
in the row. Without torch the probe says torch is missing. Run by ctest with the interpreter CMake
found, and again with one that has torch when there is one.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from trainfit_runner import host_probe, run  # noqa: E402

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

CLI = os.environ.get("TRAINFIT_CLI")


def toy_request(steps=4, warmup=1):
    """A request whose runs are the runner's torch-only toy (full and lora-less: the toy has no
    adapters), on the CPU."""
    return {"schema": "trainfit.host_probe_request/1",
            "model": {"model_type": "toy"},
            "runs": [{"name": "full", "config": {"method": "full", "weights": "fp32", "seq": 8, "batch": 1,
                                                 "x_toy": True, "x_toy_layers": 2}}],
            "steps": steps, "warmup": warmup, "device": "cpu", "busy_check": True}


class PackagedRequest(unittest.TestCase):
    @unittest.skipUnless(CLI, "TRAINFIT_CLI names no trainfit")
    def test_the_packaged_request_is_what_trainfit_prints(self):
        printed = json.loads(subprocess.run([CLI, "calibrate", "--host", "--print-request"], check=True,
                                            capture_output=True, text=True).stdout)
        self.assertEqual(host_probe.packaged_request(), printed,
                         "python/trainfit_runner/host_probe_request.json is stale: trainfit calibrate --host "
                         "--print-request > python/trainfit_runner/host_probe_request.json")


class BusyTime(unittest.TestCase):
    def test_the_union_of_what_ran_on_the_gpu(self):
        events = [{"ph": "X", "cat": "kernel", "ts": 100, "dur": 10},
                  {"ph": "X", "cat": "kernel", "ts": 105, "dur": 10},       # overlaps the first: 100-115
                  {"ph": "X", "cat": "gpu_memcpy", "ts": 200, "dur": 5},
                  {"ph": "X", "cat": "gpu_memset", "ts": 300, "dur": 1},
                  {"ph": "X", "cat": "gpu_user_annotation", "ts": 0, "dur": 1000},  # a range's mirror: not work
                  {"ph": "X", "cat": "cpu_op", "ts": 0, "dur": 1000},
                  {"ph": "f", "cat": "kernel", "ts": 400}]
        busy, kernels = host_probe.busy_of_trace(events)
        self.assertAlmostEqual(busy, 21e-6)
        self.assertEqual(kernels, 2)


class CpuModel(unittest.TestCase):
    def test_reads_proc_cpuinfo(self):
        name = host_probe.cpu_model()
        if os.path.exists("/proc/cpuinfo"):
            self.assertTrue(name)


@unittest.skipIf(HAVE_TORCH, "torch is installed here")
class WithoutTorch(unittest.TestCase):
    def test_says_torch_is_missing(self):
        rec = host_probe.measure(toy_request())
        self.assertEqual(rec["status"], "error")
        self.assertIn("torch is not installed", rec["error"])


@unittest.skipUnless(HAVE_TORCH, "needs torch (python3-torch is enough)")
class OnTheCpu(unittest.TestCase):
    def test_times_every_step_of_each_run(self):
        rec = host_probe.measure(toy_request(steps=4, warmup=1))
        self.assertEqual(rec["status"], "ok", rec.get("error"))
        self.assertEqual(rec["device"], "cpu")
        self.assertIsNone(rec["gpu"])
        self.assertEqual(rec["torch"], torch.__version__)
        self.assertEqual(rec["request"], toy_request(steps=4, warmup=1))
        self.assertTrue(rec["measured_at"].endswith("Z"))
        (r,) = rec["runs"]
        self.assertEqual(r["name"], "full")
        self.assertEqual(len(r["step_seconds"]), 5)
        self.assertTrue(all(s > 0 for s in r["step_seconds"]))
        self.assertEqual(r["warmup"], 1)
        self.assertNotIn("gpu_busy_seconds", r)  # no GPU, nothing to check

    def test_without_cuda_a_gpu_request_is_refused(self):
        if torch.cuda.is_available():
            self.skipTest("a GPU is here")
        rec = host_probe.measure(dict(toy_request(), device="cuda"))
        self.assertEqual(rec["status"], "error")
        self.assertIn("no CUDA device", rec["error"])

    def test_a_bench_row_carries_the_record(self):
        with tempfile.TemporaryDirectory() as tmp:
            req = Path(tmp) / "request.json"
            req.write_text(json.dumps(toy_request(steps=3, warmup=1)))
            out = Path(tmp) / "row.json"
            cfg = {"model": "qwen2.5-0.5b", "method": "full", "weights": "fp32", "seq": 8, "batch": 1,
                   "device": "cpu", "steps": 2, "warmup": 1, "x_toy": True}
            env = dict(os.environ, TRAINFIT_HOST_PROBE=str(req))
            subprocess.run([sys.executable, "-m", "trainfit_runner", "--config", json.dumps(cfg), "--out", str(out)],
                           check=True, env=dict(env, PYTHONPATH=str(Path(run.__file__).parents[1])))
            row = json.loads(out.read_text())
            self.assertEqual(row["measured"]["status"], "ok", row["measured"].get("error"))
            probe = row["measured"]["host_probe"]
            self.assertEqual(probe["status"], "ok", probe.get("error"))
            self.assertEqual(len(probe["runs"][0]["step_seconds"]), 4)

    def test_the_probe_for_your_own_code_carries_the_record(self):
        from trainfit_runner.probe import Probe
        with tempfile.TemporaryDirectory() as tmp:
            rows = Path(tmp) / "rows.jsonl"
            probe = Probe(config={"model": "qwen2.5-0.5b", "method": "full"}, rows=str(rows), device="cpu",
                          host_probe=toy_request(steps=3, warmup=1))
            probe.record(0.1)
            probe.record(0.1)
            probe.close()
            row = json.loads(rows.read_text())
            self.assertEqual(row["measured"]["host_probe"]["status"], "ok", row["measured"]["host_probe"].get("error"))

    def test_the_runner_writes_the_record_for_calibrate(self):
        with tempfile.TemporaryDirectory() as tmp:
            req = Path(tmp) / "request.json"
            req.write_text(json.dumps(toy_request(steps=3, warmup=1)))
            out = Path(tmp) / "record.json"
            subprocess.run([sys.executable, "-m", "trainfit_runner", "--host-probe", str(req), "--out", str(out)],
                           check=True, env=dict(os.environ, PYTHONPATH=str(Path(run.__file__).parents[1])))
            rec = json.loads(out.read_text())
            self.assertEqual(rec["status"], "ok", rec.get("error"))
            self.assertEqual(rec["schema"], "trainfit.host_probe/1")


if __name__ == "__main__":
    unittest.main()
