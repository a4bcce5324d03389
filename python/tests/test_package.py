"""The trainfit package (python/trainfit/) against the command line it binds.

Run by ctest with TRAINFIT_PYTHON_MODULE_DIR (the build's python/trainfit folder, holding the
compiled module) and TRAINFIT_BINARY (the trainfit program of the same build): a plan from Python
must be what `trainfit plan --format json` prints for the same settings. No torch is needed.
"""
import json
import os
import subprocess
import sys
import tempfile
import types
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import trainfit  # noqa: E402
from trainfit import live  # noqa: E402

BINARY = os.environ.get("TRAINFIT_BINARY")


def cli(*args):
    done = subprocess.run([BINARY] + list(args), capture_output=True, text=True)
    if done.returncode not in (0, 2):
        raise AssertionError(done.stderr)
    return done.stdout


@unittest.skipUnless(BINARY, "TRAINFIT_BINARY names the trainfit program to compare with")
class PlanIsWhatTheCommandPrints(unittest.TestCase):
    def test_the_issue_line(self):
        p = trainfit.plan(model="qwen2.5-7b", gpu="rtx-4090", method="qlora")
        self.assertEqual(p.json, json.loads(cli("plan", "--model", "qwen2.5-7b", "--gpu", "rtx-4090",
                                                "--method", "qlora", "--format", "json")))
        self.assertIn(p.verdict, ("fits", "tight"))
        self.assertTrue(p.fits)
        self.assertGreater(p.peak_allocated_bytes, 5 << 30)
        self.assertGreater(p.step_seconds, 0)

    def test_settings_in_every_form(self):
        flags = ["--model", "llama3.1-8b", "--gpu", "a100-40gb", "--method", "lora", "--seq", "2048",
                 "--grad-ckpt", "--lora-targets", "q,v", "--batch", "4"]
        want = json.loads(cli("plan", *flags, "--format", "json"))
        p = trainfit.plan(model="llama3.1-8b", gpu="a100-40gb", method="lora", seq=2048, grad_ckpt=True,
                          lora_targets=["q", "v"], batch=4)
        self.assertEqual(p.json, want)
        # The setup a plan writes plans the same again: as a dict, as the plan, as a file.
        self.assertEqual(trainfit.plan(setup=p.setup).json, want)
        self.assertEqual(trainfit.plan(setup=p.json).json, want)
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(p.json, f)
        try:
            self.assertEqual(trainfit.plan(setup=f.name).json, want)
            # A keyword laid over the file's setup wins.
            self.assertEqual(trainfit.plan(setup=f.name, batch=1).json["setup"]["batch"], 1)
        finally:
            os.unlink(f.name)

    def test_a_recipe_by_its_path_or_its_text(self):
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "recipes", "trl-sft-qlora-7b.yaml")
        want = json.loads(cli("plan", "--recipe", path, "--gpu", "rtx-4090", "--batch", "1", "--format", "json"))
        self.assertEqual(trainfit.plan(recipe=path, gpu="rtx-4090", batch=1).json, want)
        with open(path) as f:
            self.assertEqual(trainfit.plan(recipe=f.read(), gpu="rtx-4090", batch=1).json, want)

    def test_renderings_are_the_commands(self):
        p = trainfit.plan(model="qwen2.5-1.5b", gpu="rtx-4090", method="full", seq=1024)
        args = ["plan", "--model", "qwen2.5-1.5b", "--gpu", "rtx-4090", "--method", "full", "--seq", "1024"]
        self.assertEqual(str(p), cli(*args))
        self.assertEqual(p.render("markdown"), cli(*args, "--format", "markdown"))
        page = p._repr_html_()
        self.assertTrue(page.startswith("<iframe"), page[:80])
        self.assertIn("qwen2.5-1.5b", page)

    def test_an_oom_plan_has_no_speed(self):
        p = trainfit.plan(model="qwen2.5-14b", gpu="rtx-4090", method="full")
        self.assertEqual(p.verdict, "oom")
        self.assertIsNone(p.step_seconds)
        self.assertIsNone(p.tokens_per_second)
        self.assertIn("oom", repr(p))
        self.assertTrue(p.summary.startswith("OOM: needs "), p.summary)
        self.assertIn("It does not run, so it has no step time.", p.summary)
        # A card known by its memory alone has no rates: no step time, not an error.
        by_memory = trainfit.plan(model="qwen2.5-0.5b", vram="24GiB")
        self.assertTrue(by_memory.fits)
        self.assertIsNone(by_memory.step_seconds)
        self.assertIsNone(by_memory.bottleneck)
        self.assertIn("fits", live.forecast_text(by_memory))

    def test_the_boundary(self):
        p = trainfit.plan(model="qwen2.5-7b", gpu="rtx-4090", method="qlora", grad_ckpt=True, largest="batch")
        want = json.loads(cli("plan", "--model", "qwen2.5-7b", "--gpu", "rtx-4090", "--method", "qlora",
                              "--grad-ckpt", "--largest", "batch", "--format", "json"))
        self.assertEqual(p.boundary, want["boundary"])
        self.assertGreater(p.boundary["largest_at_all"], 1)

    def test_a_local_config(self):
        folder = tempfile.mkdtemp()
        config = {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
                  "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
                  "max_position_embeddings": 8192, "tie_word_embeddings": True}
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(config, f)
        by_folder = trainfit.plan(model=folder, gpu="rtx-4090")
        by_dict = trainfit.plan(config_json=config, gpu="rtx-4090")
        self.assertEqual(by_folder.json, by_dict.json)
        self.assertGreater(by_folder.json["model"]["parameters"], 1_000_000_000)

    def test_advise(self):
        a = trainfit.advise(model="qwen2.5-7b", gpu=["rtx-4090", "a100-40gb"], method="lora", seq=1024)
        want = json.loads(cli("advise", "--model", "qwen2.5-7b", "--gpu", "rtx-4090,a100-40gb", "--method", "lora",
                              "--seq", "1024", "--format", "json"))
        for answer in (a.json, want):
            del answer["seconds"]  # how long the search took
        self.assertEqual(a.json, want)
        self.assertTrue(a.results)
        self.assertEqual(a.best, a.results[0])


class RefusalsAreTrainfitErrors(unittest.TestCase):
    def test_a_bad_setting_names_itself(self):
        with self.assertRaises(trainfit.TrainfitError) as e:
            trainfit.plan(model="qwen2.5-7b", rank=0, method="lora")
        self.assertIn("rank", str(e.exception))
        self.assertIsInstance(e.exception, ValueError)

    def test_an_unknown_setting_is_refused(self):
        with self.assertRaises(trainfit.TrainfitError) as e:
            trainfit.plan(model="qwen2.5-7b", colour="red")
        self.assertIn("colour", str(e.exception))

    def test_an_unknown_model(self):
        with self.assertRaises(trainfit.TrainfitError) as e:
            trainfit.plan(model="qwen9-1t")
        self.assertIn("qwen9-1t", str(e.exception))

    def test_nothing_fits(self):
        with self.assertRaises(trainfit.TrainfitError):
            trainfit.advise(model="qwen2.5-72b", gpu="rtx-3060-12gb", method="full", fix="gpus", seq=32768)

    def test_catalogues(self):
        self.assertIn("rtx-4090", [g["id"] for g in trainfit.gpus()])
        self.assertIn("qwen2.5-7b", json.dumps(trainfit.models()))
        self.assertIn("rank", trainfit.schema()["properties"])
        self.assertRegex(trainfit.__version__, r"^\d+\.\d+\.\d+$")


class ReadingTheLiveRun(unittest.TestCase):
    def test_device_names_find_their_card(self):
        cases = [("NVIDIA H200", 150754820096, {"gpu": "h200"}),
                 ("NVIDIA GeForce RTX 4090", 25757220864, {"gpu": "rtx-4090"}),
                 ("NVIDIA H100 80GB HBM3", 85520809984, {"gpu": "h100-sxm"}),
                 ("NVIDIA H100 PCIe", 85520809984, {"gpu": "h100-pcie"}),
                 ("NVIDIA A100-SXM4-40GB", 42505273344, {"gpu": "a100-40gb"}),
                 # The memory decides between cards of one name; none within 15%: the memory alone.
                 ("NVIDIA A100-SXM4-80GB", 85198045184, {"gpu": "a100-80gb"}),
                 ("NVIDIA GeForce RTX 4090", 50000000000, {"vram": 50000000000}),
                 ("Some Future GPU X1", 1 << 36, {"vram": 1 << 36})]
        for name, total, want in cases:
            self.assertEqual(live.card_of(name, total), want, name)

    def test_trl_arguments(self):
        SFTConfig = type("SFTConfig", (), {})
        args = SFTConfig()
        args.__dict__.update(per_device_train_batch_size=4, gradient_accumulation_steps=8, gradient_checkpointing=True,
                             optim=types.SimpleNamespace(value="paged_adamw_8bit"), bf16=True, fp16=False,
                             max_length=2048, world_size=1)
        settings, notes = live.settings_of_args(args, method="full", weights="fp32")
        self.assertEqual(settings, {"batch": 4, "grad_accum": 8, "grad_ckpt": True, "optimizer": "adamw-8bit",
                                    "amp": "bf16", "objective": "sft", "seq": 2048})
        self.assertEqual(notes, [])
        args.optim = "adamw_torch"  # torch's AdamW without fused=True
        self.assertEqual(live.settings_of_args(args)[0]["optimizer"], "adamw-foreach")
        # TRL's own options that the plan does not hold yet are said, not hidden.
        args.loss_type, args.packing, args.activation_offloading = "chunked_nll", True, True
        settings, notes = live.settings_of_args(args)
        self.assertEqual(settings["loss"], "chunked")
        self.assertTrue(settings["packing"])  # SFTConfig's packing (bfd): the micro-batch flattened
        self.assertTrue(settings["activation_offloading"])  # TRL's OffloadActivations, planned
        args.packing_strategy = "wrapped"  # rows kept: the unpacked plan's
        self.assertNotIn("packing", live.settings_of_args(args)[0])
        args.activation_offloading = False
        # use_liger_kernel: Liger's kernels, and its fused loss whatever loss_type says.
        args.loss_type, args.use_liger_kernel = "nll", True
        settings = live.settings_of_args(args)[0]
        self.assertEqual((settings["kernels"], settings["loss"]), ("liger", "fused"))
        args.loss_type, args.packing, args.use_liger_kernel = "dft", False, False
        self.assertTrue(any(n.startswith("loss_type dft") for n in live.settings_of_args(args)[1]))
        args.loss_type = "nll"
        args.optim = "lomo"
        settings, notes = live.settings_of_args(args, method="lora", weights="bf16")
        self.assertNotIn("optimizer", settings)
        self.assertNotIn("amp", settings)  # autocast only over fp32 master weights
        self.assertEqual(notes, ["optimizer lomo is planned as AdamW"])

    def test_grpo_configs_generation(self):
        GRPOConfig = type("GRPOConfig", (), {})
        args = GRPOConfig()
        args.__dict__.update(per_device_train_batch_size=8, gradient_accumulation_steps=2, gradient_checkpointing=True,
                             optim="adamw_torch_fused", bf16=True, fp16=False, num_generations=4,
                             max_completion_length=256, steps_per_generation=2, num_iterations=1, use_vllm=False)
        settings, notes = live.settings_of_args(args, method="lora", weights="bf16")
        self.assertEqual(settings["objective"], "grpo")
        self.assertEqual((settings["generations"], settings["completion_len"], settings["steps_per_generation"],
                          settings["iterations"], settings["generation"]), (4, 256, 2, 1, "generate"))
        args.use_vllm, args.vllm_mode = True, "server"
        self.assertEqual(live.settings_of_args(args)[0]["generation"], "none")
        args.vllm_mode = "colocate"
        self.assertTrue(any("colocated vLLM" in n for n in live.settings_of_args(args)[1]))

    def test_a_plain_trainer_without_seq_says_so(self):
        TrainingArguments = type("TrainingArguments", (), {})
        args = TrainingArguments()
        args.__dict__.update(per_device_train_batch_size=2, gradient_accumulation_steps=1,
                             gradient_checkpointing=False, optim="adamw_torch", bf16=False, fp16=False)
        settings, notes = live.settings_of_run("qwen2.5-0.5b", args, gpu="rtx-4090")
        self.assertEqual(settings["model"], "qwen2.5-0.5b")
        self.assertNotIn("objective", settings)
        self.assertTrue(any("seq=" in n for n in notes), notes)
        settings, notes = live.settings_of_run("qwen2.5-0.5b", args, gpu="rtx-4090", seq=1024)
        self.assertEqual(notes, [])
        # Without a card given, the device is read: none here (no GPU, or no PyTorch) is no error.
        settings, notes = live.settings_of_run("qwen2.5-0.5b", seq=512)
        self.assertEqual(settings["model"], "qwen2.5-0.5b")

    def test_the_forecast_text(self):
        p = trainfit.plan(model="qwen2.5-7b", gpu="rtx-4090", method="qlora")
        text = live.forecast_text(p, ["a note"])
        self.assertIn("qwen2.5-7b qlora on rtx-4090: fits", text)
        self.assertIn("s a step predicted", text)
        self.assertIn("warning: a note", text)
        measured = {"peak_allocated_bytes": p.peak_allocated_bytes * 1.1, "step_seconds_median": p.step_seconds / 2}
        self.assertIn("(-9.1%)", live.comparison_text(p, measured))
        self.assertIn("(+100.0%)", live.comparison_text(p, measured))


if __name__ == "__main__":
    unittest.main()
