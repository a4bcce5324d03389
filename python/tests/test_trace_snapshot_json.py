"""snapshot_json renders a snapshot (the dict torch.cuda.memory._snapshot() returns) as trainfit.snapshot/1,
and `trainfit trace --snapshot` reads what it wrote: the peak, with the stacks' categories. trainfit also
reads the pickle itself (every protocol _dump_snapshot may write, plain or gzipped), and gives the same
answer as from the rendering. No torch."""
import gzip
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


MIB = 1 << 20
BACKWARD = [frame("torch::unwind::unwind()", "??"),
            frame("at::_ops::mm::call(at::Tensor const&, at::Tensor const&)", "??"),
            frame("torch::autograd::generated::MmBackward0::apply(std::vector<at::Tensor>&&)", "??")]
FORWARD = [frame("forward", "/site/transformers/models/llama/modeling_llama.py", 300),
           frame("c10::cuda::alloc", "??"), frame("train", "C:\\job\\train.py", 12)]


def oom_snapshot(after_except):
    """A 100 MiB segment holding 40 MiB of optimizer state and 30 MiB of activations around a 30 MiB
    hole; a 2 MiB segment of the small pool; then a 50 MiB request fails. With after_except the dump
    was taken in an `except` after the activations were freed (PyTorch's OOM observer dumps before)."""
    base, small = 0x7F0000000000, 0x7E0000000000
    act_state = "inactive" if after_except else "active_allocated"
    trace = [
        {"action": "segment_alloc", "addr": base, "size": 100 * MIB, "frames": FORWARD, "time_us": 1000},
        {"action": "alloc", "addr": base, "size": 40 * MIB, "frames": [frame("step", "/t/optim/adamw.py", 9)], "time_us": 1010},
        {"action": "alloc", "addr": base + 40 * MIB, "size": 30 * MIB, "frames": FORWARD, "time_us": 1020},
        {"action": "alloc", "addr": base + 70 * MIB, "size": 30 * MIB, "frames": FORWARD, "time_us": 1030},
        {"action": "segment_alloc", "addr": small, "size": 2 * MIB, "frames": BACKWARD, "time_us": 1040},
        {"action": "alloc", "addr": small, "size": 512, "frames": BACKWARD, "time_us": 1050},
        {"action": "free_requested", "addr": base + 40 * MIB, "size": 30 * MIB, "frames": FORWARD, "time_us": 1060},
        {"action": "free_completed", "addr": base + 40 * MIB, "size": 30 * MIB, "frames": FORWARD, "time_us": 1060},
        {"action": "oom", "device_free": 10 * MIB, "size": 50 * MIB, "frames": FORWARD, "time_us": 2000, "stream": 0},
    ]
    if after_except:
        trace.append({"action": "free_completed", "addr": base + 70 * MIB, "size": 30 * MIB, "frames": [], "time_us": 2100})
    return {
        "segments": [
            {"device": 0, "address": base, "total_size": 100 * MIB, "segment_type": "large", "segment_pool_id": (0, 0),
             "blocks": [{"address": base, "size": 40 * MIB, "state": "active_allocated",
                         "frames": [frame("step", "/t/optim/adamw.py", 9)]},
                        {"address": base + 40 * MIB, "size": 30 * MIB, "state": "inactive", "frames": []},
                        {"address": base + 70 * MIB, "size": 30 * MIB, "state": act_state, "frames": FORWARD}]},
            {"device": 0, "address": small, "total_size": 2 * MIB, "segment_type": "small", "segment_pool_id": (0, 0),
             "blocks": [{"address": small, "size": 512, "state": "active_allocated", "frames": BACKWARD},
                        {"address": small + 512, "size": 2 * MIB - 512, "state": "inactive", "frames": []}]}],
        "device_traces": [trace],
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
                               "garbage_collection_threshold": 0.0, "expandable_segments": False},
        "external_annotations": [],
    }


class TrainfitReadsThePickle(unittest.TestCase):
    def setUp(self):
        self.cli = os.environ.get("TRAINFIT_CLI")
        if not self.cli:
            self.skipTest("TRAINFIT_CLI not set (ctest sets it)")
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def read(self, path):
        r = subprocess.run([self.cli, "trace", "--snapshot", path, "--format", "json"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        snap = json.loads(r.stdout)["snapshot"]
        del snap["source"]
        return snap

    def test_the_pickle_gives_what_its_rendering_gives(self):
        for name, snapshot in (("peak", SNAPSHOT), ("oom", oom_snapshot(False)), ("oom-after", oom_snapshot(True))):
            rendering = os.path.join(self.dir.name, name + ".json")
            snapshot_json.write(snapshot, rendering)
            expected = self.read(rendering)
            for protocol in (2, 3, 4, 5):
                path = os.path.join(self.dir.name, "%s-%d.pickle" % (name, protocol))
                with open(path, "wb") as f:
                    pickle.dump(snapshot, f, protocol=protocol)
                got = self.read(path)
                if expected["oom"]:  # the rendering keeps no device_free
                    self.assertEqual(got["oom"].pop("device_free_bytes"), 10 * MIB)
                    expected["oom"].pop("device_free_bytes", None)
                self.assertEqual(got, expected, "%s, protocol %d" % (name, protocol))
            with gzip.open(os.path.join(self.dir.name, name + ".pickle.gz"), "wb") as f:
                pickle.dump(snapshot, f)
            got = self.read(os.path.join(self.dir.name, name + ".pickle.gz"))
            if got["oom"]:
                got["oom"].pop("device_free_bytes")
            self.assertEqual(got, expected, name + ", gzipped")

    def test_the_out_of_memory_moment(self):
        for after_except in (False, True):
            path = os.path.join(self.dir.name, "oom.pickle")
            with open(path, "wb") as f:
                pickle.dump(oom_snapshot(after_except), f)
            oom = self.read(path)["oom"]
            self.assertEqual(oom["requested_bytes"], 50 * MIB)
            self.assertEqual(oom["segment_request_bytes"], 50 * MIB)  # a multiple of 2 MiB already
            # 40 MiB of state and 30 of activations, and 512 B of the small pool; the hole the freed
            # activations left is 30 MiB, less than the request: not fragmentation.
            self.assertEqual(oom["allocated_bytes"], 70 * MIB + 512)
            self.assertEqual(oom["reserved_bytes"], 102 * MIB)
            self.assertEqual(oom["cached_free_bytes"], 32 * MIB - 512)
            self.assertEqual(oom["largest_free_block_bytes"], 30 * MIB)
            self.assertFalse(oom["fragmentation"])
            self.assertEqual(oom["breakdown"]["activations"], 30 * MIB)
            self.assertEqual(oom["breakdown"]["optimizer_states"], 40 * MIB)
            self.assertAlmostEqual(oom["time_s"], 0.001)
            self.assertTrue(oom["moment"].startswith("forward (llama/modeling_llama.py:300) < train (job\\train.py:12)")
                            or oom["moment"].startswith("forward (llama/modeling_llama.py:300) < train (job/train.py:12)"),
                            oom["moment"])

    def test_frames_that_are_not_utf8_or_steer_the_terminal_are_made_printable(self):
        # A lone surrogate pickles as bytes that are not UTF-8 (fuzz_snapshot_pickle's first find:
        # --format json went down on them); an escape sequence would recolour the terminal.
        snap = oom_snapshot(False)
        snap["device_traces"][0][-1]["frames"] = [frame("forward\udc80\x1b[31m", "/m/model.py", 5)]
        path = os.path.join(self.dir.name, "odd.pickle")
        with open(path, "wb") as f:
            pickle.dump(snap, f)
        oom = self.read(path)["oom"]
        self.assertEqual(oom["moment"], "forward\\xed\\xb2\\x80\\x1b[31m (m/model.py:5)")

    def test_a_pickle_that_would_run_code_is_refused(self):
        class Evil:
            def __reduce__(self):
                return (os.system, ("echo pwned",))
        path = os.path.join(self.dir.name, "evil.pickle")
        with open(path, "wb") as f:
            pickle.dump({"segments": [Evil()]}, f)
        r = subprocess.run([self.cli, "trace", "--snapshot", path], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("STACK_GLOBAL", r.stderr)
        self.assertNotIn("pwned", r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main()
