"""snapshot_json renders a snapshot (the dict torch.cuda.memory._snapshot() returns) as trainfit.snapshot/1,
and `trainfit trace --snapshot` reads what it wrote: the peak, with the stacks' categories. No torch."""
import json
import os
import pickle
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from trainfit_runner import snapshot_json  # noqa: E402


def frame(name, filename, line=1):
    return {"name": name, "filename": filename, "line": line}


# Weights (4 KiB), an activation (8 KiB) alive at the peak and freed after it, then an optimizer state.
SNAPSHOT = {
    "segments": [
        {"device": 0, "address": 0, "total_size": 65536, "blocks": [
            {"size": 4096, "state": "active_allocated", "frames": [frame("__init__", "/t/nn/modules/linear.py")]},
            {"size": 2048, "state": "active_allocated", "frames": [frame("_init_group", "/t/optim/adamw.py"),
                                                                   frame("c10::cuda::alloc", "??")]},
            {"size": 59392, "state": "inactive", "frames": []}]},
        {"device": 1, "address": 999999, "total_size": 512, "blocks": []}],
    "device_traces": [[
        {"action": "alloc", "addr": 0, "size": 4096, "frames": [frame("__init__", "/t/nn/modules/linear.py")], "time_us": 10},
        {"action": "alloc", "addr": 8192, "size": 8192, "frames": [frame("forward", "/m/qwen2.py", 7)], "time_us": 20},
        {"action": "free_requested", "addr": 8192, "size": 8192, "frames": [], "time_us": 30},
        {"action": "free_completed", "addr": 8192, "size": 8192, "frames": [], "time_us": 30},
        {"action": "alloc", "addr": 4096, "size": 2048, "frames": [frame("_init_group", "/t/optim/adamw.py")], "time_us": 40},
    ], []],
}


class SnapshotJson(unittest.TestCase):
    def test_renders_the_device_with_the_most_memory_and_interns_stacks(self):
        out = snapshot_json.convert(SNAPSHOT, max_allocated=12288)
        self.assertEqual(out["schema"], "trainfit.snapshot/1")
        self.assertEqual(out["device"], 0)
        self.assertEqual(len(out["segments"]), 1)
        blocks = out["segments"][0]["blocks"]
        self.assertEqual([b["address"] for b in blocks], [0, 4096, 6144])  # from the segment's address
        self.assertEqual(out["stacks"][blocks[1]["stack"]], "_init_group (optim/adamw.py:1)")  # C++ frame dropped
        self.assertEqual(blocks[2]["stack"], -1)
        self.assertEqual(len(out["history"]), 5)
        self.assertEqual(out["history"][0][3], blocks[0]["stack"])  # the same stack, once
        self.assertEqual(out["allocator"], {"max_memory_allocated": 12288})

    def test_an_allocation_of_the_backward_keeps_the_frames_that_name_its_operator(self):
        # Autograd's threads have no Python frames: what allocated is in the C++ frames, short.
        frames = [frame("torch::unwind::unwind()", "??"),
                  frame("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(unsigned long, CUstream_st*)", "??"),
                  frame("at::_ops::_log_softmax_backward_data::redispatch(c10::DispatchKeySet, at::Tensor const&, long)", "??"),
                  frame("torch::autograd::generated::LogSoftmaxBackward0::apply(std::vector<at::Tensor>&&)", "??"),
                  frame("torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)", "??"),
                  frame("torch::autograd::Engine::thread_init(int, bool)", "??"),
                  frame("std::error_code::default_error_condition() const", "??")]
        snap = {"segments": [{"device": 0, "address": 0, "total_size": 64, "blocks": [
            {"size": 64, "state": "active_allocated", "frames": frames}]}], "device_traces": [[]]}
        out = snapshot_json.convert(snap)
        self.assertEqual(out["stacks"][out["segments"][0]["blocks"][0]["stack"]],
                         "at::_ops::_log_softmax_backward_data::redispatch (??:1) < "
                         "torch::autograd::generated::LogSoftmaxBackward0::apply (??:1) < "
                         "torch::autograd::Engine::thread_main (??:1) < torch::autograd::Engine::thread_init (??:1)")

    def test_trainfit_reads_the_rendering(self):
        cli = os.environ.get("TRAINFIT_CLI")
        if not cli:
            self.skipTest("TRAINFIT_CLI not set (ctest sets it)")
        with tempfile.TemporaryDirectory() as d:
            pkl, out = os.path.join(d, "peak.pickle"), os.path.join(d, "peak.json")
            with open(pkl, "wb") as f:
                pickle.dump(SNAPSHOT, f)
            subprocess.run([sys.executable, "-m", "trainfit_runner.snapshot_json", pkl, out, "--max-allocated", "12288"],
                           check=True, cwd=os.path.join(os.path.dirname(__file__), ".."))
            r = subprocess.run([cli, "trace", "--snapshot", out, "--format", "json"], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            snap = json.loads(r.stdout)["snapshot"]
            self.assertEqual(snap["peak_allocated_bytes"], 12288)
            self.assertEqual(snap["allocator_peak_allocated_bytes"], 12288)
            self.assertEqual(snap["breakdown"], {"weights": 4096, "activations": 8192, "cached_free": 65536 - 12288})


if __name__ == "__main__":
    unittest.main()
