"""The runner builds the model the planner plans: the config it hands transformers, without torch.

`python3 -m unittest discover -s python/tests -p 'test_setup*.py'`; TRAINFIT_CLI names a built trainfit.
"""
import json
import os
import subprocess
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from trainfit_runner.models import MULTIMODAL, language_model_config  # noqa: E402

MODELS = Path(__file__).resolve().parents[2] / "data" / "models"
CLI = os.environ.get("TRAINFIT_CLI", "trainfit")


class LanguageModelConfig(unittest.TestCase):
    def test_a_multimodal_gemma3_config_builds_its_text_model(self):
        config = json.loads((MODELS / "gemma3-4b.json").read_text())
        text = language_model_config(config)
        self.assertEqual(text["model_type"], "gemma3_text")  # AutoModelForCausalLM: Gemma3ForCausalLM
        self.assertEqual(text["hidden_size"], config["text_config"]["hidden_size"])
        self.assertNotIn("vision_config", text)

    def test_a_multimodal_mistral3_config_builds_the_text_family_it_names(self):
        config = json.loads((MODELS / "mistral-small3.1.json").read_text())
        text = language_model_config(config)
        self.assertEqual(text["model_type"], "mistral")  # AutoModelForCausalLM: MistralForCausalLM
        self.assertEqual(text["hidden_size"], 5120)
        self.assertNotIn("vision_config", text)
        del config["text_config"]["model_type"]  # absent: Mistral3Config's text default
        self.assertEqual(language_model_config(config)["model_type"], "mistral")

    def test_every_other_builtin_is_built_from_its_config_as_it_is(self):
        for path in sorted(MODELS.glob("*.json")):
            config = json.loads(path.read_text())
            if config["model_type"] in MULTIMODAL:
                continue
            self.assertIs(language_model_config(config), config, path.name)

    def test_the_planner_plans_the_model_type_the_runner_builds(self):
        # trainfit's JSON names the family it planned; the runner must build that family.
        for path in sorted(MODELS.glob("*.json")):
            built = language_model_config(json.loads(path.read_text()))["model_type"]
            planned = json.loads(subprocess.run([CLI, "plan", "--model", path.stem, "--vram", "1000GiB", "--format",
                                                 "json"], check=True, capture_output=True, text=True).stdout)
            self.assertEqual(planned["model"]["model_type"], built, path.name)


if __name__ == "__main__":
    unittest.main()
