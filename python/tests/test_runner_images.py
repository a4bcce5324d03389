"""The runner's image inputs: which setups it feeds and which it refuses (no torch needed)."""
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from trainfit_runner import images  # noqa: E402


class Check(unittest.TestCase):
    def cfg(self, **kw):
        base = {"images": 1, "seq": 1024, "vision_tower": "loaded"}
        base.update(kw)
        return base

    def test_a_text_only_step_needs_nothing(self):
        images.check(self.cfg(images=0), {"model_type": "qwen2"})

    def test_gemma3_and_the_qwen_vl_models_are_fed(self):
        images.check(self.cfg(), {"model_type": "gemma3", "mm_tokens_per_image": 256})
        images.check(self.cfg(images=2, image_tokens=256), {"model_type": "qwen2_5_vl"})
        images.check(self.cfg(images=2, image_tokens=256), {"model_type": "qwen3_vl"})
        images.check(self.cfg(vision_tower="frozen"), {"model_type": "gemma3"})
        images.check(self.cfg(image_tokens=256), {"model_type": "mistral3"})

    def test_what_it_cannot_feed_is_refused_by_name(self):
        cases = [
            (self.cfg(), {"model_type": "qwen2"}, "qwen2"),
            (self.cfg(), {"model_type": "llama4"}, "llama4"),
            (self.cfg(vision_tower="dropped"), {"model_type": "gemma3"}, "dropped"),
            (self.cfg(objective="dpo"), {"model_type": "gemma3"}, "sft steps only"),
            (self.cfg(image_tokens=100), {"model_type": "gemma3"}, "256 tokens"),
            (self.cfg(image_tokens=200), {"model_type": "qwen2_5_vl"}, "no square"),
            (self.cfg(image_tokens=200), {"model_type": "qwen3_vl"}, "no square"),
            (self.cfg(image_tokens=200), {"model_type": "mistral3"}, "Mistral 3 image out as a square grid"),
            (self.cfg(images=4, seq=1024), {"model_type": "gemma3"}, "do not fit"),
        ]
        for cfg, config_json, words in cases:
            with self.assertRaises(images.ImageError) as e:
                images.check(cfg, config_json)
            self.assertIn(words, str(e.exception))

    def test_default_tokens_follow_the_tower(self):
        self.assertEqual(images.image_tokens({}, "gemma3"), 256)
        self.assertEqual(images.image_tokens({}, "llama4"), 144)
        self.assertEqual(images.image_tokens({"image_tokens": 64}, "qwen2_5_vl"), 64)


if __name__ == "__main__":
    unittest.main()
