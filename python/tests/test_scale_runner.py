"""The runner's multi-GPU layouts without a GPU: what it refuses and why, the layout arithmetic
(degrees, mesh, pipeline split, tokens a step), how rank 0 merges the ranks' figures, and the
allocator-history analysis behind python/scale_jobs/ddp_busiest_rank.py.

Runs without torch: `python3 -m unittest discover -s python/tests -p 'test_scale*.py'`.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scale_jobs"))
from trainfit_runner import layouts, memtrace, models, run, setup_schema, steps  # noqa: E402
import busiest_summary  # noqa: E402

MODELS = Path(__file__).resolve().parents[2] / "data" / "models"


def config(**settings):
    return setup_schema.complete(dict({"model": "qwen2.5-0.5b", "method": "full", "gpus": 2}, **settings))


def model_json(name):
    return json.loads((MODELS / (name + ".json")).read_text())


class Refusals(unittest.TestCase):
    def refused(self, cfg, model="qwen2.5-0.5b"):
        with self.assertRaises(layouts.LayoutError) as caught:
            layouts.check(cfg, model_json(model))
        return str(caught.exception)

    def test_deepspeed_stages_are_refused_with_the_reason(self):
        for stage in ("zero2", "zero3"):
            message = self.refused(config(parallel=stage))
            self.assertIn("DeepSpeed is not installed", message)
            self.assertIn(stage, message)

    def test_tensor_parallel_needs_heads_it_divides(self):
        # Qwen2.5-3B has 2 key-value heads: 4 ways do not divide them.
        message = self.refused(config(model="qwen2.5-3b", gpus=4, tp=4), "qwen2.5-3b")
        self.assertIn("num_key_value_heads 2", message)
        layouts.check(config(model="llama3.2-3b", gpus=4, tp=4), model_json("llama3.2-3b"))

    def test_tensor_parallel_limits(self):
        self.assertIn("lora under tensor parallelism", self.refused(config(tp=2, method="lora")))
        self.assertIn("FSDP2", self.refused(config(gpus=4, tp=2, parallel="ddp")))
        self.assertIn("mixture-of-experts", self.refused(config(model="qwen3-30b-a3b", tp=2), "qwen3-30b-a3b"))
        self.assertIn("together", self.refused(config(gpus=4, tp=2, pp=2)))

    def test_pipeline_limits(self):
        self.assertIn("micro-batches", self.refused(config(pp=2, microbatches=1)))
        self.assertIn("grad_accum", self.refused(config(pp=2, grad_accum=2)))
        tiny = dict(model_json("qwen2.5-0.5b"), num_hidden_layers=1)
        with self.assertRaisesRegex(layouts.LayoutError, "more stages than the model's 1 layers"):
            layouts.check(config(pp=2), tiny)

    def test_offload_only_through_fsdp2(self):
        self.assertIn("CPUOffloadPolicy", self.refused(config(parallel="zero1", offload="optimizer")))
        layouts.check(config(parallel="fsdp", offload="optimizer,params"), None)
        self.assertIn("CPU memory", self.refused(config(parallel="fsdp", offload="optimizer,params",
                                                        offload_device="nvme")))

    def test_what_runs_is_accepted(self):
        for cfg in (config(), config(parallel="fsdp", weights="fp32", fsdp_param_dtype="bf16", fsdp_reduce_dtype="fp32"),
                    config(parallel="fsdp-grad-op"), config(parallel="hsdp", nodes=2), config(parallel="zero1"),
                    config(tp=2), config(pp=2, microbatches=4), config(grad_accum=4), config(gpus=1, tp=1)):
            layouts.check(cfg, model_json("qwen2.5-0.5b"))

    def test_the_runner_writes_a_refused_row_without_starting_torchrun(self):
        with tempfile.TemporaryDirectory() as d:
            out = Path(d) / "row.json"
            code = run.main(["--config", json.dumps({"model": "qwen2.5-1.5b", "gpus": 2, "parallel": "zero3"}),
                             "--out", str(out)])
            self.assertEqual(code, 0)
            row = json.loads(out.read_text())
        self.assertEqual(row["measured"]["status"], "error")
        self.assertIn("DeepSpeed is not installed", row["measured"]["error"])
        self.assertEqual(row["config"]["parallel"], "zero3")


    def test_the_model_is_found_by_name_file_or_folder(self):
        self.assertEqual(models.config_json_path("llama3.2-3b"), MODELS / "llama3.2-3b.json")
        with tempfile.TemporaryDirectory() as d:
            (Path(d) / "config.json").write_text('{"num_hidden_layers": 1}')
            self.assertEqual(models.model_json(d), {"num_hidden_layers": 1})
        self.assertIsNone(models.config_json_path("no-such-model"))
        self.assertIsNone(models.model_json("no-such-model"))


class Arithmetic(unittest.TestCase):
    def test_degrees_and_mesh(self):
        lay = layouts.layout_of(config(gpus=8, tp=2, parallel="fsdp"))
        self.assertEqual((lay.dp, lay.tp, lay.pp), (4, 2, 1))
        self.assertEqual(layouts.mesh_shape(lay), ((4, 2), ("dp", "tp")))
        lay = layouts.layout_of(config(gpus=4, parallel="hsdp", nodes=2))
        self.assertEqual(layouts.mesh_shape(lay), ((2, 2), ("replicate", "shard")))
        self.assertIsNone(layouts.mesh_shape(layouts.layout_of(config(parallel="fsdp"))))
        self.assertEqual(layouts.layout_of(config(pp=2)).microbatches, 2)  # the default: pp
        self.assertIsInstance(config(pp=2)["microbatches"], int)  # an integer setting stays one

    def test_pipeline_split_is_contiguous_and_balanced(self):
        self.assertEqual(layouts.pipeline_split(24, 2), [(0, 12), (12, 24)])
        self.assertEqual(layouts.pipeline_split(28, 3), [(0, 10), (10, 19), (19, 28)])
        parts = layouts.pipeline_split(36, 4)
        self.assertEqual(parts[0][0], 0)
        self.assertEqual(parts[-1][1], 36)
        self.assertTrue(all(a[1] == b[0] for a, b in zip(parts, parts[1:])))
        with self.assertRaises(layouts.LayoutError):
            layouts.pipeline_split(1, 2)

    def test_tokens_per_step_counts_replicas_not_model_parallel_ranks(self):
        def tokens(**kw):
            cfg = config(seq=1024, batch=2, **kw)
            return layouts.tokens_per_step(cfg, layouts.layout_of(cfg))
        self.assertEqual(tokens(), 2 * 2048)  # two DDP replicas
        self.assertEqual(tokens(grad_accum=4), 2 * 4 * 2048)
        self.assertEqual(tokens(tp=2), 2048)  # one replica, split across two GPUs
        self.assertEqual(tokens(pp=2, microbatches=4), 4 * 2048)
        self.assertEqual(tokens(gpus=1), 2048)

    def test_the_row_names_the_api(self):
        cfg = config(parallel="fsdp", weights="fp32", fsdp_param_dtype="bf16", fsdp_reduce_dtype="fp32",
                     offload="optimizer,params")
        api = layouts.describe(cfg, layouts.layout_of(cfg))["api"]
        self.assertIn("MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)", api)
        self.assertIn("CPUOffloadPolicy", api)
        cfg = config(grad_accum=4)
        self.assertIn("no_sync on the first 3", layouts.describe(cfg, layouts.layout_of(cfg))["api"])


class Ranks(unittest.TestCase):
    def test_the_busiest_rank_decides(self):
        res = {"status": "ok", "peak_allocated_mib": 100.0, "peak_phase": "backward"}
        run.merge_ranks(res, [
            {"rank": 0, "status": "ok", "peak_allocated_mib": 100.0, "peak_phase": "backward", "step_seconds_median": 0.5,
             "host_rss_peak_mib": 900.0},
            {"rank": 1, "status": "ok", "peak_allocated_mib": 130.0, "peak_phase": "pipeline", "step_seconds_median": 0.6,
             "host_rss_peak_mib": 800.0}])
        self.assertEqual((res["peak_allocated_mib"], res["peak_phase"], res["busiest_rank"]), (130.0, "pipeline", 1))
        self.assertEqual(res["step_seconds_median"], 0.6)
        self.assertEqual(res["host_rss_peak_mib"], 900.0)
        self.assertEqual(res["status"], "ok")

    def test_an_oom_on_any_rank_is_the_rows_status(self):
        res = {"status": "ok"}
        run.merge_ranks(res, [{"rank": 0, "status": "error"}, {"rank": 1, "status": "oom"}])
        self.assertEqual(res["status"], "oom")

    def test_host_memory_from_proc_status(self):
        text = "Name:\tpython3\nVmHWM:\t 2097152 kB\nVmRSS:\t 1048576 kB\nThreads:\t4\n"
        self.assertEqual(steps.parse_proc_status(text), {"host_rss_mib": 1024.0, "host_rss_peak_mib": 2048.0})
        self.assertEqual(steps.parse_proc_status("VmRSS: garbage\n"), {})


def event(action, addr, size, *files):
    return {"action": action, "addr": addr, "size": size,
            "frames": [{"filename": f, "line": 1, "name": "fn"} for f in files]}


class AllocatorHistory(unittest.TestCase):
    MIB = 1 << 20
    EVENTS = [
        event("alloc", 1, 100 * MIB, "model.py"),
        event("alloc", 2, 50 * MIB, "torch/nn/modules/module.py", "ddp.py"),
        event("free_requested", 1, 100 * MIB),
        event("free_completed", 1, 100 * MIB),
        event("alloc", 3, 80 * MIB, "adam.py"),
        event("alloc", 4, 30 * MIB, "adam.py"),  # the peak: 50 + 80 + 30 = 160 MiB
        event("free_requested", 4, 30 * MIB),
        event("segment_alloc", 9, 999 * MIB),  # segments are reserved memory, not allocated
    ]

    def test_replay_finds_the_peak_as_max_memory_allocated_counts_it(self):
        peak, index, final = memtrace.replay(self.EVENTS)
        self.assertEqual((peak, index, final), (160 * self.MIB, 5, 130 * self.MIB))

    def test_the_report_lists_what_was_alive_at_the_peak(self):
        report = memtrace.peak_report(self.EVENTS)
        self.assertEqual(report["peak_mib"], 160.0)
        self.assertEqual(report["alive_blocks"], 3)
        self.assertEqual([b["mib"] for b in report["largest"]], [80.0, 50.0, 30.0])
        # The module-call wrapper frame is trimmed: the block is attributed to ddp.py.
        self.assertEqual(report["largest"][1]["python"], ["ddp.py:1 fn"])
        self.assertEqual(report["by_site"][0], {"site": "adam.py:1 fn", "mib": 110.0, "blocks": 2})

    def test_site_differences_name_what_one_rank_holds_more(self):
        a = memtrace.peak_report(self.EVENTS)
        # b's peak comes later (50 + 80 + 40 MiB), after adam.py's 30 MiB block was freed.
        b = memtrace.peak_report(self.EVENTS + [event("alloc", 5, 40 * self.MIB, "broadcast.py")])
        self.assertEqual(b["peak_mib"], 170.0)
        self.assertEqual(memtrace.site_differences(a, b), [{"site": "broadcast.py:1 fn", "mib": 40.0},
                                                           {"site": "adam.py:1 fn", "mib": -30.0}])


class Smoke(unittest.TestCase):
    def test_every_smoke_case_runs_but_the_deepspeed_one(self):
        """python/scale_jobs/smoke.sh DRY_RUN=1: each case's layout as the runner sees it."""
        script = Path(__file__).resolve().parents[1] / "scale_jobs" / "smoke.sh"
        with tempfile.TemporaryDirectory() as d:
            out = subprocess.run(["bash", str(script), d], env=dict(os.environ, DRY_RUN="1"), check=True,
                                 capture_output=True, text=True).stdout
        cases = dict(line.split(" ", 1) for line in out.splitlines())
        self.assertEqual(len(cases), 14)
        refused = {name for name, text in cases.items() if "refused" in json.loads(text)}
        self.assertEqual(refused, {"zero2-refused"})
        self.assertIn("MixedPrecisionPolicy", cases["fsdp-mixed-precision"])
        self.assertIn('"tp": 2', cases["tp2"])
        self.assertIn("4 micro-batches", cases["pp2-m4-lora"])
        self.assertEqual(json.loads(cases["ddp"])["method"], "full")


class BusiestSummary(unittest.TestCase):
    def test_a_line_per_variant_with_the_difference_in_parameter_copies(self):
        text = busiest_summary.summary([{
            "variant": "qwen2.5-1.5b.baseline", "status": "ok", "peak_allocated_mib": [20000.0, 22951.0],
            "peak_difference_mib": 2951.0, "params_bf16_mib": 2951.0, "peaks_part_at": "after DDP construction",
            "site_differences": [{"site": "distributed.py:1 _sync_module_states", "mib": 2951.0}]}])
        self.assertIn("| qwen2.5-1.5b.baseline | ok | 20000.0 / 22951.0 | +2951.0 | 1.00 | after DDP construction |",
                      text)
        self.assertIn("+2951 MiB distributed.py:1 _sync_module_states", text)


if __name__ == "__main__":
    unittest.main()
