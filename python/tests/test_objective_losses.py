"""The runner's objective steps on the CPU, with torch but without transformers: each objective's
micro-batches (python/trainfit_runner/objectives.py) run forward and backward through a small
stand-in for a Hugging Face model (the outputs, `logits_to_keep`, `output_hidden_states`, PEFT's
`disable_adapter` and a sequence classifier's score head that the steps use), and the losses at
initialisation are the values TRL's formulas give: DPO's -log sigmoid(0) = log 2 when the policy
is its reference, KTO's 1 - sigmoid(0) = 0.5, GRPO's and PPO's clipped ratios of 1.

Skipped where torch is not installed (the GPU machine has it: run there, or with a CPU torch:
`python3 -m unittest discover -s python/tests -p 'test_objective_losses.py'`).
"""
import contextlib
import math
import sys
import types
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from trainfit_runner import objectives, setup_schema  # noqa: E402

try:
    import torch
except ImportError:  # pragma: no cover - the CPU machines of CI have no torch
    torch = None

VOCAB, HIDDEN = 64, 16


def make_models():
    nn = torch.nn

    class Backbone(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(VOCAB, HIDDEN)
            self.layers = nn.ModuleList(nn.Linear(HIDDEN, HIDDEN) for _ in range(2))
            # A LoRA-like adapter: zero at initialisation (PEFT's B is zero), off under disable_adapter.
            self.adapter = nn.Parameter(torch.zeros(HIDDEN, HIDDEN))
            self.adapter_on = True

        def forward(self, input_ids, output_hidden_states=False, return_dict=True, **_):
            x = self.embed(input_ids)
            hidden = [x]
            for layer in self.layers:
                x = x + torch.tanh(layer(x))
                if self.adapter_on:
                    x = x + x @ self.adapter
                hidden.append(x)
            return types.SimpleNamespace(last_hidden_state=x, hidden_states=tuple(hidden) if output_hidden_states else None)

    class CausalLM(nn.Module):
        base_model_prefix = "model"

        def __init__(self):
            super().__init__()
            self.model = Backbone()
            self.lm_head = nn.Linear(HIDDEN, VOCAB, bias=False)

        def forward(self, input_ids, logits_to_keep=0, output_hidden_states=False, **kw):
            out = self.model(input_ids, output_hidden_states=output_hidden_states)
            h = out.last_hidden_state
            if logits_to_keep:
                h = h[:, -logits_to_keep:, :]
            return types.SimpleNamespace(logits=self.lm_head(h), hidden_states=out.hidden_states)

        @contextlib.contextmanager
        def disable_adapter(self):
            self.model.adapter_on = False
            try:
                yield
            finally:
                self.model.adapter_on = True

    class Classifier(nn.Module):
        base_model_prefix = "model"

        def __init__(self):
            super().__init__()
            self.model = Backbone()
            self.score = nn.Linear(HIDDEN, 1, bias=False)

        def forward(self, input_ids, **kw):
            # transformers' sequence classifiers score every position and keep the last token's.
            logits = self.score(self.model(input_ids).last_hidden_state)
            return types.SimpleNamespace(logits=logits[:, -1, :])

    return CausalLM, Classifier


def _in(dtype, cls):
    def build():
        return cls().to(dtype)
    return build


@unittest.skipIf(torch is None, "torch is not installed")
class ObjectiveSteps(unittest.TestCase):
    def run_step(self, objective, dtype=None, **settings):
        torch.manual_seed(0)
        CausalLM, Classifier = make_models()
        if dtype is not None:  # half precision: selective_log_softmax's per-row path
            CausalLM = _in(dtype, CausalLM)
            Classifier = _in(dtype, Classifier)
        cfg = setup_schema.complete(dict({"model": "qwen2.5-0.5b", "objective": objective, "seq": 16, "batch": 2,
                                          "grad_accum": 2, "device": "cpu"}, **settings))
        plan = objectives.plan_of(cfg)
        model = Classifier() if plan.score_head else CausalLM()
        extras = {}
        if plan.reference == "copy":
            extras["reference"] = CausalLM()
            extras["reference"].load_state_dict(model.state_dict())  # TRL's copy starts as the policy
        if plan.value_model:
            extras["value"], extras["reward"] = Classifier(), Classifier()
        gen = torch.Generator().manual_seed(1)
        step = objectives.ObjectiveStep(torch, cfg, torch.device("cpu"), VOCAB, model, extras, gen)
        step.before_step()
        losses = []
        for micro in range(cfg["grad_accum"]):
            loss = step.loss(micro)
            losses.append(loss.item())
            loss.backward()
            step.after_backward(micro == cfg["grad_accum"] - 1)
        step.after_step()
        trained = [p for p in model.parameters() if p.grad is not None]
        self.assertTrue(trained, "%s: no gradient reached the policy" % objective)
        for loss in losses:
            self.assertTrue(math.isfinite(loss), "%s: loss %r" % (objective, loss))
        return losses, step, extras

    def test_dpo_starts_at_log_two_against_its_reference(self):
        for reference in ("copy", "adapter-off"):
            losses, step, _ = self.run_step("dpo", method="full" if reference == "copy" else "lora",
                                            reference=reference)
            self.assertEqual(step.ids.shape[0], 4)  # chosen and rejected concatenated
            for loss in losses:
                self.assertAlmostEqual(loss, math.log(2.0), places=5)
        losses, _, _ = self.run_step("dpo", method="full", reference="precomputed")  # random reference log-probs

    def test_half_precision_logits_take_the_per_row_path(self):
        for loss in self.run_step("dpo", dtype=torch.bfloat16, method="lora", reference="adapter-off")[0]:
            self.assertAlmostEqual(loss, math.log(2.0), places=2)
        self.run_step("grpo", dtype=torch.bfloat16, method="lora", generations=2, completion_len=8)
        self.run_step("ppo", dtype=torch.bfloat16, method="full", completion_len=8)

    def test_kto_starts_at_one_half(self):
        for loss in self.run_step("kto", method="lora", reference="adapter-off")[0]:
            self.assertAlmostEqual(loss, 0.5, places=5)
        self.run_step("kto", method="full", reference="precomputed")

    def test_orpo_and_reward(self):
        self.run_step("orpo", method="full")
        losses, step, _ = self.run_step("reward", method="full")
        self.assertEqual(step.ids.shape[0], 4)

    def test_grpo_clipped_ratio_is_one_at_first(self):
        losses, step, _ = self.run_step("grpo", method="lora", generations=2, completion_len=8, reference="adapter-off")
        # A ratio of 1: the loss is -advantages summed over tokens, normalised by the step's tokens;
        # group-normalised advantages sum to zero over each group of completions.
        self.assertAlmostEqual(sum(losses), 0.0, places=4)
        self.assertIsNotNone(step.ref_per_token_logps[0])
        self.run_step("grpo", method="full", generations=4, completion_len=8)

    def test_ppo_trains_the_value_model_too(self):
        _, step, extras = self.run_step("ppo", method="lora", completion_len=8)
        self.assertTrue(any(p.grad is not None for p in extras["value"].parameters()))
        self.assertTrue(all(p.grad is None for p in extras["reward"].parameters()))
        self.assertIsNone(step._kept)  # the kept logits are released after the metrics


if __name__ == "__main__":
    unittest.main()
