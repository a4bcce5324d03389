"""The Python side reads the vocabulary trainfit defines, and resolves a config as trainfit does.

Runs without torch: `python3 -m unittest discover -s python/tests -p 'test_setup*.py'`, with
TRAINFIT_CLI naming a built trainfit (ctest sets it).
"""
import json
import os
import subprocess
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from trainfit_runner import setup_schema  # noqa: E402

CLI = os.environ.get("TRAINFIT_CLI", "trainfit")


def trainfit(*args):
    return subprocess.run([CLI, *args], check=True, capture_output=True, text=True).stdout


class SchemaFile(unittest.TestCase):
    def test_the_packaged_schema_is_what_trainfit_prints(self):
        packaged = json.loads(Path(setup_schema.__file__).with_name("setup_schema.json").read_text())
        self.assertEqual(packaged, json.loads(trainfit("schema")),
                         "python/trainfit_runner/setup_schema.json is stale: "
                         "trainfit schema > python/trainfit_runner/setup_schema.json")


class Resolution(unittest.TestCase):
    CONFIGS = [
        {"model": "qwen2.5-7b"},
        {"model": "qwen2.5-7b", "method": "qlora", "rank": 8, "lora_targets": "q,v"},
        {"model": "llama3.1-8b", "method": "qlora", "weights": "int8", "double_quant": False, "kbit_prepare": True},
        {"model": "qwen2.5-0.5b", "method": "full", "weights": "fp32", "amp": "bf16", "gpus": 2, "parallel": "fsdp"},
        {"model": "mistral-7b", "rank": 32, "lora_alpha": 8, "lora_dropout": 0, "adapter_dtype": "bf16", "seq": 2048},
        # The objectives: the reference's default follows the objective, then the method; the
        # completion is half the sequence, rounded as trainfit rounds it.
        {"model": "qwen2.5-1.5b", "method": "full", "objective": "dpo"},
        {"model": "qwen2.5-1.5b", "method": "lora", "objective": "kto", "batch": 2},
        {"model": "qwen2.5-0.5b", "method": "full", "objective": "grpo", "generations": 2, "batch": 2, "seq": 1025},
        {"model": "qwen2.5-0.5b", "objective": "ppo", "seq": 999},
    ]

    def test_defaults_are_trainfits(self):
        """Each config completed here equals the setup `trainfit plan` resolves from the same flags."""
        props = setup_schema.schema()["properties"]
        for cfg in self.CONFIGS:
            args = []
            for key, value in cfg.items():
                flag = props[key]["x-flag"]
                if isinstance(value, bool):
                    args.append(flag if value else "--no-" + flag[2:])
                else:
                    args += [flag, str(value)]
            planned = json.loads(trainfit("plan", *args, "--gpu", "h200", "--no-suggest", "--format", "json"))["setup"]
            completed = setup_schema.complete(dict(cfg, gpu="h200"), runner_fields=False)
            for key, value in planned.items():
                mine = completed[key]
                if key == "lora_targets":
                    mine = setup_schema.lora_targets(completed)
                    mine = [mine] if isinstance(mine, str) else mine
                self.assertEqual(mine, value, "%s of %s" % (key, cfg))
            for key in completed:
                if setup_schema.applies(key, completed) and completed[key] not in (None, ""):
                    self.assertIn(key, planned, "%s applies to %s here, not in trainfit" % (key, cfg))

    def test_unknown_fields_and_values_are_refused(self):
        with self.assertRaises(ValueError):
            setup_schema.complete({"model": "qwen2.5-7b", "grad_ckp": True})
        with self.assertRaises(ValueError):
            setup_schema.complete({"model": "qwen2.5-7b", "optimizer": "lion"})
        completed = setup_schema.complete({"model": "qwen2.5-7b", "x_note": 1})
        self.assertEqual(completed["x_note"], 1)
        self.assertEqual(completed["steps"], setup_schema.RUNNER_FIELDS["steps"])
        with self.assertRaises(ValueError):
            setup_schema.complete({"model": "qwen2.5-7b", "steps": 3}, runner_fields=False)

    def test_a_bench_written_schema_wins(self):
        """$TRAINFIT_SETUP_SCHEMA (what `trainfit bench` sets) is the vocabulary the runner reads."""
        import tempfile
        doc = json.loads(trainfit("schema"))
        doc["properties"]["rank"]["default"] = 4
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(doc, f)
        os.environ["TRAINFIT_SETUP_SCHEMA"] = f.name
        try:
            self.assertEqual(setup_schema.complete({"model": "m"})["rank"], 4)
            self.assertEqual(setup_schema.complete({"model": "m"})["lora_alpha"], 8)
        finally:
            del os.environ["TRAINFIT_SETUP_SCHEMA"]
            os.unlink(f.name)
        self.assertEqual(setup_schema.complete({"model": "m"})["rank"], 16)


if __name__ == "__main__":
    unittest.main()
