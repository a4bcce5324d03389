"""The runner's objectives without a GPU: what each objective runs (sequences, models, the
reference), what the runner refuses, the tokens a step trains on, that the module and the runner
import without torch, and that every config of plans/objectives-h200.toml, as `trainfit bench`
hands it over, is one the runner runs.

Runs without torch: `python3 -m unittest discover -s python/tests -p 'test_objectives.py'`, with
TRAINFIT_CLI naming a built trainfit (ctest sets it) for the plan's configs.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from trainfit_runner import layouts, objectives, run, setup_schema  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CLI = os.environ.get("TRAINFIT_CLI", "trainfit")
CHECK_RUNNER = "%s %s" % (sys.executable, Path(__file__).with_name("check_runner.py"))


def config(**settings):
    return setup_schema.complete(dict({"model": "qwen2.5-1.5b", "seq": 1024, "batch": 2}, **settings))


class Plans(unittest.TestCase):
    def test_paired_objectives_run_chosen_and_rejected_together(self):
        for objective in ("dpo", "orpo", "reward"):
            p = objectives.plan_of(config(objective=objective, method="full"))
            self.assertEqual(p.trained_sequences, 4, objective)
        self.assertEqual(objectives.plan_of(config()).trained_sequences, 2)

    def test_references_follow_trl_defaults(self):
        self.assertEqual(objectives.plan_of(config(objective="dpo", method="full")).reference, "copy")
        self.assertEqual(objectives.plan_of(config(objective="dpo", method="lora")).reference, "adapter-off")
        self.assertEqual(objectives.plan_of(config(objective="grpo", generations=2)).reference, "none")
        self.assertEqual(objectives.plan_of(config(objective="orpo")).reference, "none")  # ORPO has none
        self.assertEqual(objectives.plan_of(config(objective="dpo", reference="precomputed")).reference_sequences, 0)

    def test_kto_adds_its_kl_batch(self):
        p = objectives.plan_of(config(objective="kto", method="full"))
        self.assertEqual((p.trained_sequences, p.kl_sequences, p.reference_sequences), (2, 2, 4))

    def test_ppo_has_a_value_and_a_reward_model_and_a_completion(self):
        p = objectives.plan_of(config(objective="ppo", method="lora"))
        self.assertTrue(p.value_model and p.reward_model)
        self.assertEqual((p.prompt_len, p.completion_len), (512, 512))  # completion_len defaults to seq / 2
        p = objectives.plan_of(config(objective="grpo", generations=2, completion_len=300))
        self.assertEqual((p.prompt_len, p.completion_len, p.generations), (724, 300, 2))

    def test_preference_data_is_all_completion_but_the_first_token(self):
        # The planner takes the metrics' masked copies at their largest: the runner's masks match.
        p = objectives.plan_of(config(objective="kto", method="full"))
        self.assertEqual((p.prompt_len, p.completion_len), (1, 1023))

    def test_a_half_sequence_rounds_as_trainfit_rounds_it(self):
        self.assertEqual(config(objective="ppo", seq=1025)["completion_len"], 513)

    def test_tokens_a_step_count_the_trained_sequences(self):
        cfg = config(objective="dpo", grad_accum=3)
        self.assertEqual(layouts.tokens_per_step(cfg, layouts.layout_of(cfg)), 2 * 2 * 1024 * 3)
        self.assertEqual(objectives.tokens_per_micro_batch(cfg), 4 * 1024)
        cfg = config(objective="kto", method="full")
        self.assertEqual(layouts.tokens_per_step(cfg, layouts.layout_of(cfg)), 2 * 1024)

    def test_what_the_runner_refuses(self):
        with self.assertRaisesRegex(objectives.ObjectiveError, "one GPU"):
            objectives.check(config(objective="dpo", gpus=2))
        with self.assertRaisesRegex(objectives.ObjectiveError, "toy"):
            objectives.check(dict(config(objective="dpo"), x_toy=True))
        objectives.check(config(gpus=2))  # sft is steps.py's own, on any layout

    def test_the_runner_imports_without_torch(self):
        self.assertTrue(callable(run.build_model))
        self.assertTrue(callable(objectives.ObjectiveStep))
        self.assertNotIn("torch", sys.modules)


class ShippedPlan(unittest.TestCase):
    def test_every_config_is_one_the_runner_runs(self):
        with tempfile.TemporaryDirectory() as d:
            subprocess.run([CLI, "bench", str(REPO / "plans" / "objectives-h200.toml"), "--runner", CHECK_RUNNER,
                            "--results", d, "--no-telemetry", "--gpu", "h200"],
                           check=True, capture_output=True, text=True)
            rows = [json.loads(line) for line in (Path(d) / "results.jsonl").read_text().splitlines()]
        seen = set()
        for row in rows:
            measured = row["measured"]
            self.assertEqual(measured["status"], "ok", "%s: %s" % (row["bench"]["label"], measured.get("error")))
            seen.add(measured["objective"]["objective"])
        self.assertEqual(seen, set(objectives.OBJECTIVES))  # every objective is measured
        self.assertGreaterEqual(len(rows), 12)
        self.assertLessEqual(len(rows), 16)


if __name__ == "__main__":
    unittest.main()
