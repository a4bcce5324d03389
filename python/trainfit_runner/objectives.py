"""Training objectives as TRL computes them, for the bench runner (docs/model.md, "Objectives").

TRL is not installed on the GPU machine, so each objective's step is written here after TRL's own
code (huggingface/trl at f2cd577, 1.10.0.dev0), operation for operation where the operations
decide memory and time: which sequences run through which model, with or without autograd, which
logits-sized tensors exist and how long they live (the per-row log-softmax of
`selective_log_softmax`, the metrics' copies of the logits). Models are built from config with
random weights and fed random token ids of the configured length: no network, no TRL.

    sft     the existing step: transformers' causal-LM loss (steps.py)
    dpo     DPOTrainer._compute_loss: chosen and rejected concatenated into 2B sequences, the
            reference forward under no_grad, the sigmoid loss with beta 0.1, then TRL's metrics
    orpo    ORPOTrainer (trl/experimental/orpo): concatenated_forward, NLL on the chosen
            sequences, odds_ratio_loss; no reference
    kto     KTOTrainer._compute_loss: the KL batch (mismatched completions) through the policy
            and the reference under no_grad, the policy forward, KTO's loss with its KL term
    reward  RewardTrainer.compute_loss: AutoModelForSequenceClassification (a score head of
            hidden x 1), -logsigmoid(chosen - rejected) over 2B sequences
    ppo     PPOTrainer's optimisation micro-batch (trl/experimental/ppo): PolicyAndValueWrapper
            (value model and policy, output_hidden_states), the clipped policy loss and the
            clipped value loss from random rewards; the rollout (generation, the reference and
            reward scoring) is not run: its results are random tensors made once
    grpo    GRPOTrainer._compute_loss: the per-token log-probabilities of the completion only
            (logits_to_keep), the clipped token-level objective ("dapo", TRL's default) with
            advantages normalised in groups of `generations` from random rewards; the reference
            (when there is one) runs in the scoring phase, once a step; generation is not run

The pure part (which sequences, which models: plan_of, check) needs no torch and is tested
without it (python/tests/test_objectives.py).
"""
from dataclasses import dataclass

OBJECTIVES = ("sft", "dpo", "orpo", "kto", "reward", "ppo", "grpo")
# Objectives whose micro-batch of `batch` examples runs chosen and rejected sequences together.
PAIRED = ("dpo", "orpo", "reward")
# TRL's defaults for what no setting of trainfit's changes memory or time.
DPO_BETA = 0.1         # DPOConfig.beta
KTO_BETA = 0.1         # KTOConfig.beta
ORPO_BETA = 0.1        # ORPOConfig.beta
GRPO_BETA = 0.04       # the KL coefficient when a reference is used (GRPOConfig.beta defaults to 0: no reference)
GRPO_EPSILON = 0.2     # GRPOConfig.epsilon (low and high)
PPO_CLIPRANGE = 0.2    # PPOConfig.cliprange
PPO_CLIPRANGE_VALUE = 0.2
PPO_VF_COEF = 0.1
TEMPERATURE = 1.0      # GRPOConfig.temperature; PPO divides by temperature + 1e-7
ENTROPY_CHUNK = 128    # trl.trainer.utils.entropy_from_logits' chunk_size


class ObjectiveError(ValueError):
    """An objective setup this runner cannot run; the message says why (it becomes the row's error)."""


@dataclass(frozen=True)
class ObjectivePlan:
    objective: str
    trained_sequences: int    # sequences a micro-batch runs through the policy with autograd
    kl_sequences: int         # KTO: mismatched completions through the policy and the reference, no grad
    reference: str            # copy, adapter-off, precomputed or none
    reference_sequences: int  # sequences the reference forwards (no grad) per micro-batch
    prompt_len: int           # tokens of each sequence before its completion
    completion_len: int
    generations: int          # GRPO's completions per prompt (grouping of the advantages)
    value_model: bool         # PPO: a trained sequence-classification model beside the policy
    reward_model: bool        # PPO: a frozen sequence-classification model (scores the rollout)
    score_head: bool          # the trained model is a sequence classifier (reward modelling)


def plan_of(cfg):
    """What one micro-batch of this completed config runs (setup_schema.complete)."""
    objective = cfg.get("objective") or "sft"
    if objective not in OBJECTIVES:
        raise ObjectiveError("unknown objective %r; expected one of %s" % (objective, ", ".join(OBJECTIVES)))
    batch, seq = int(cfg["batch"]), int(cfg["seq"])
    reference = cfg.get("reference") if objective in ("dpo", "kto", "ppo", "grpo") else "none"
    reference = reference or "none"
    trained = 2 * batch if objective in PAIRED else batch
    kl = batch if objective == "kto" else 0
    ref_seqs = 0
    if reference in ("copy", "adapter-off") and objective in ("dpo", "kto", "grpo"):
        ref_seqs = trained + kl
    if objective in ("ppo", "grpo"):
        completion = int(cfg.get("completion_len") or seq // 2)
    else:
        # Preference data: a one-token prompt, every other position a completion token. The masks
        # decide only the size of TRL's masked copies of the logits in its metrics (KTO's can be at
        # the peak), which the planner takes at their largest: every position a completion token.
        completion = seq - 1
    return ObjectivePlan(objective=objective, trained_sequences=trained, kl_sequences=kl, reference=reference,
                         reference_sequences=ref_seqs, prompt_len=seq - completion, completion_len=completion,
                         generations=int(cfg.get("generations") or 0) if objective == "grpo" else 0,
                         value_model=objective == "ppo", reward_model=objective == "ppo",
                         score_head=objective == "reward")


def check(cfg):
    """Refuses what this runner does not run (trainfit plan refuses what TRL does not)."""
    p = plan_of(cfg)
    if cfg.get("packing") and (cfg.get("pp", 1) > 1 or cfg.get("images", 0) > 0):
        raise ObjectiveError("packing with a pipeline or with images is not this runner's step")
    if cfg.get("activation_offloading"):
        # TRL's OffloadActivations runs inside TRL's trainers: python/recipe_jobs/trl_sft.py measures it.
        raise ObjectiveError("activation offloading is TRL's (activation_offloading), not this runner's step")
    if p.objective == "sft":
        # The runner's SFT step is transformers' loss over the whole logits; TRL's SFTTrainer (its
        # chunked loss, its per-step metrics) runs as itself: python/recipe_jobs/trl_sft.py.
        if cfg.get("kernels") == "liger" or cfg.get("loss") == "fused":
            raise ObjectiveError("Liger's kernels and its fused loss are not this runner's step: run TRL's own "
                                 "trainer with use_liger_kernel (python/recipe_jobs/trl_sft.py)")
        if cfg.get("loss") == "chunked" or cfg.get("trainer") == "trl":
            raise ObjectiveError("SFT under trainer trl (TRL's SFTTrainer, its chunked loss) is not this runner's "
                                 "step: run TRL's own trainer (python/recipe_jobs/trl_sft.py)")
        return p
    if p.objective == "grpo" and cfg.get("generation") == "generate":
        # The runner times GRPO's optimisation step; generate() runs in TRL's own trainer.
        raise ObjectiveError("GRPO with generation generate (TRL's GRPOTrainer calling generate()) is not this "
                             "runner's step: run TRL's own trainer (python/recipe_jobs/trl_objectives.py), or "
                             "plan --generation none")
    if int(cfg.get("gpus") or 1) > 1:
        raise ObjectiveError("objective %s runs on one GPU in this runner (the planner plans it under ddp)" % p.objective)
    if cfg.get("x_toy"):
        raise ObjectiveError("objective %s needs a transformers model, not the toy model" % p.objective)
    return p


def tokens_per_micro_batch(cfg):
    """Tokens a micro-batch trains the policy on (forward and backward): what tokens_per_second counts."""
    return plan_of(cfg).trained_sequences * int(cfg["seq"])


# ---------------------------------------------------------------------------------------------
# TRL's helpers (trl/trainer/utils.py), as written there.

def selective_log_softmax(torch, logits, index):
    """trl.trainer.utils.selective_log_softmax: log_softmax then gather, one sequence at a time in
    half precision (each row's log-softmax output is what autograd keeps)."""
    squeeze = index.ndim == logits.ndim - 1
    if squeeze:
        index = index.unsqueeze(-1)
    if logits.dtype in (torch.float32, torch.float64):
        selected_logits = torch.gather(logits, dim=-1, index=index)
        logsumexp_values = torch.stack([torch.logsumexp(lg, dim=-1) for lg in logits])
        per_token_logps = selected_logits - logsumexp_values.unsqueeze(-1)
    else:
        per_token_logps = []
        for row_logits, row_labels in zip(logits, index):
            row_logps = torch.nn.functional.log_softmax(row_logits, dim=-1)
            per_token_logps.append(row_logps.gather(dim=-1, index=row_labels))
        per_token_logps = torch.stack(per_token_logps)
    if squeeze:
        per_token_logps = per_token_logps.squeeze(-1)
    return per_token_logps


def entropy_from_logits(torch, logits, chunk_size=ENTROPY_CHUNK):
    """trl.trainer.utils.entropy_from_logits: flattened (a copy when the logits are a strided view),
    then in chunks of 128 rows."""
    original_shape = logits.shape[:-1]
    flat_logits = logits.reshape(-1, logits.shape[-1])
    entropies = []
    for chunk in flat_logits.split(chunk_size, dim=0):
        logps = torch.nn.functional.log_softmax(chunk, dim=-1)
        entropies.append(-(torch.exp(logps) * logps).sum(-1))
    return torch.cat(entropies, dim=0).reshape(original_shape)


def log1mexp(torch, x):
    """ORPO's numerically stable log(1 - exp(x))."""
    t = -0.6931471805599453
    return torch.where(x < t, torch.log1p(-torch.exp(x)), torch.log(-torch.expm1(x)))


def masked_mean(values, mask):
    return (values * mask).sum() / mask.sum()


def masked_whiten(torch, values, mask, shift_mean=True):
    mean = masked_mean(values, mask)
    var = masked_mean((values - mean) ** 2, mask)
    whitened = (values - mean) * torch.rsqrt(var + 1e-8)
    return whitened if shift_mean else whitened + mean


# ---------------------------------------------------------------------------------------------
# The step

class ObjectiveStep:
    """One objective's micro-batches over random data. `loss(micro)` returns the loss of
    micro-batch `micro` (every logits-sized local freed on return, as TRL's compute_loss frees
    them, except where TRL keeps them: PPO); `before_step()` runs what TRL runs once a step before
    the micro-batches (GRPO's reference scoring); `after_backward(micro, last)` and `after_step()`
    what it runs after them (PPO's metrics over the logits)."""

    def __init__(self, torch, cfg, device, vocab, model, extras, gen):
        self.torch, self.cfg, self.device, self.vocab = torch, cfg, device, vocab
        self.plan = plan_of(cfg)
        self.model = model            # the trained model (PEFT-wrapped under LoRA)
        self.reference = extras.get("reference")   # a frozen copy, or None
        self.value = extras.get("value")
        self.reward = extras.get("reward")
        self.accum = int(cfg["grad_accum"])
        B, S = int(cfg["batch"]), int(cfg["seq"])
        p = self.plan
        # Token ids below vocab - 1: the last id is the padding token the sequence classifiers
        # look for (none appears, so each sequence is scored at its last token).
        high = max(2, vocab - 1)

        def ids(rows, cols):
            return torch.randint(0, high, (rows, cols), generator=gen).to(device)

        self.ids = ids(p.trained_sequences, S)
        mask = torch.ones_like(self.ids)
        mask[:, :p.prompt_len] = 0
        self.completion_mask = mask
        if p.objective == "kto":
            # KTO's KL completions: each prompt with the next example's completion (mismatched pairs).
            kl = self.ids.clone()
            kl[:, p.prompt_len:] = torch.roll(self.ids[:, p.prompt_len:], 1, dims=0)
            self.kl_ids = kl
            self.labels = torch.tensor([i % 2 == 0 for i in range(B)], device=device)  # desirable, undesirable, ...
        if p.reference == "precomputed":
            # precompute_ref_log_probs: the reference's log-probabilities come with the batch.
            self.ref_logps = torch.randn(p.trained_sequences, device=device) - 50.0
            self.ref_kl_logps = torch.randn(B, device=device) - 50.0 if p.objective == "kto" else None
        if p.objective == "grpo":
            self.prompt_ids = self.ids[:, :p.prompt_len]
            self.completion_ids = self.ids[:, p.prompt_len:]
            self.grpo_mask = torch.ones_like(self.completion_ids)
            self.advantages = self._grpo_advantages(gen)
            self.ref_per_token_logps = [None] * self.accum
        if p.objective == "ppo":
            self._ppo_rollout(gen)
        self._kept = None  # PPO: what TRL keeps alive past the backward (output, logits)

    # -- the reference forward ------------------------------------------------------------------

    def _reference_forward(self, **inputs):
        """The reference model's outputs under no_grad: the frozen copy, or the policy with its
        adapter disabled (PEFT's disable_adapter, TRL's use_adapter(model, None))."""
        torch = self.torch
        with torch.no_grad():
            if self.reference is not None:
                return self.reference(**inputs)
            with self.model.disable_adapter():
                return self.model(**inputs)

    # -- DPO: DPOTrainer._compute_loss ----------------------------------------------------------

    def _dpo(self):
        torch, F = self.torch, self.torch.nn.functional
        input_ids = self.ids
        outputs = self.model(input_ids=input_ids, use_cache=False)
        shift_logits = outputs.logits[..., :-1, :]
        shift_labels = input_ids[..., 1:]
        shift_completion_mask = self.completion_mask[..., 1:]
        per_token_logps = selective_log_softmax(torch, shift_logits, shift_labels)
        per_token_logps[shift_completion_mask == 0] = 0.0
        logps = per_token_logps.sum(dim=1)
        chosen_logps, rejected_logps = logps.chunk(2, dim=0)
        if self.plan.reference == "precomputed":
            ref_chosen_logps, ref_rejected_logps = self.ref_logps.chunk(2, dim=0)
        else:
            ref_outputs = self._reference_forward(input_ids=input_ids, use_cache=False)
            ref_shift_logits = ref_outputs.logits[..., :-1, :]
            ref_per_token_logps = selective_log_softmax(torch, ref_shift_logits, shift_labels)
            ref_per_token_logps[shift_completion_mask == 0] = 0.0
            ref_logps = ref_per_token_logps.sum(dim=1)
            ref_chosen_logps, ref_rejected_logps = ref_logps.chunk(2, dim=0)
        chosen_logratios = chosen_logps - ref_chosen_logps
        rejected_logratios = rejected_logps - ref_rejected_logps
        delta_score = chosen_logratios - rejected_logratios
        loss = (-F.logsigmoid(DPO_BETA * delta_score)).mean()
        # TRL's metrics: the entropy (a flattened copy of the logits, then chunks), the chosen and
        # rejected logits' means (masked copies), the chosen tokens' accuracy.
        per_token_entropy = entropy_from_logits(torch, shift_logits.detach())
        entropy_sum = (per_token_entropy * shift_completion_mask).sum()
        chosen_logits, rejected_logits = shift_logits.detach().chunk(2, dim=0)
        chosen_mask, rejected_mask = shift_completion_mask.chunk(2, dim=0)
        total_chosen_logits = chosen_logits[chosen_mask.bool()].mean(-1).sum()
        total_rejected_logits = rejected_logits[rejected_mask.bool()].mean(-1).sum()
        predictions = chosen_logits.argmax(dim=-1)
        chosen_labels = shift_labels[: len(shift_labels) // 2]
        correct = ((predictions == chosen_labels) & chosen_mask.bool()).sum()
        for metric in (entropy_sum, total_chosen_logits, total_rejected_logits, correct,
                       (DPO_BETA * chosen_logratios.detach()).mean(), chosen_logps.mean()):
            metric.item()
        return loss

    # -- ORPO: ORPOTrainer.concatenated_forward and odds_ratio_loss -----------------------------

    def _orpo(self):
        torch, F = self.torch, self.torch.nn.functional
        input_ids = self.ids
        n_chosen = input_ids.shape[0] // 2
        outputs = self.model(input_ids, use_cache=False)
        all_logits = outputs.logits
        # concatenated_labels: the prompt is -100; the NLL runs over the whole chosen sequences.
        concatenated_labels = input_ids.masked_fill(self.completion_mask == 0, -100)
        labels = input_ids.clone()

        def cross_entropy_loss(logits, labels):
            logits = logits[..., :-1, :].contiguous()
            labels = labels[..., 1:].contiguous()
            logits = logits.view(-1, logits.shape[-1])
            return torch.nn.CrossEntropyLoss()(logits, labels.view(-1))

        chosen_nll_loss = cross_entropy_loss(all_logits[:n_chosen], labels[:n_chosen])
        # get_batch_logps(average_log_prob=True)
        lp_labels = concatenated_labels[:, 1:].clone()
        loss_mask = lp_labels != -100
        lp_labels = torch.where(lp_labels == -100, 0, lp_labels)
        per_token_logps = selective_log_softmax(torch, all_logits[:, :-1, :], lp_labels)
        all_logps = (per_token_logps * loss_mask).sum(-1) / loss_mask.sum(-1)
        chosen_logps = all_logps[:n_chosen].float()
        rejected_logps = all_logps[n_chosen:].float()
        log_odds = (chosen_logps - rejected_logps) - (log1mexp(torch, chosen_logps) - log1mexp(torch, rejected_logps))
        ratio = F.logsigmoid(log_odds)
        losses = ORPO_BETA * ratio
        loss = chosen_nll_loss - losses.mean()
        for metric in (all_logits[:n_chosen, :-1, :].detach().mean(), all_logits[n_chosen:, :-1, :].detach().mean(),
                       chosen_nll_loss.detach(), ratio.mean()):
            metric.item()
        return loss

    # -- KTO: KTOTrainer._compute_kl_logps and _compute_loss ------------------------------------

    def _kl_logps(self, forward):
        torch = self.torch
        with torch.no_grad():
            kl_logits = forward(input_ids=self.kl_ids).logits
        per_token = selective_log_softmax(torch, kl_logits[:, :-1, :], self.kl_ids[:, 1:])
        per_token[self.completion_mask[:, 1:] == 0] = 0.0
        return per_token.sum(-1)

    def _kto(self):
        torch = self.torch
        input_ids = self.ids
        kl_logps = self._kl_logps(self.model)
        outputs = self.model(input_ids=input_ids)
        shift_logits = outputs.logits[:, :-1, :]
        per_token_logps = selective_log_softmax(torch, shift_logits, input_ids[:, 1:])
        per_token_logps[self.completion_mask[:, 1:] == 0] = 0.0
        completion_logps = per_token_logps.sum(-1)
        chosen_idx = torch.nonzero(self.labels, as_tuple=False).view(-1)
        rejected_idx = torch.nonzero(~self.labels, as_tuple=False).view(-1)
        chosen_logps = completion_logps.index_select(0, chosen_idx)
        rejected_logps = completion_logps.index_select(0, rejected_idx)
        if self.plan.reference == "precomputed":
            ref_chosen_logps = self.ref_logps.index_select(0, chosen_idx)
            ref_rejected_logps = self.ref_logps.index_select(0, rejected_idx)
            ref_kl_logps = self.ref_kl_logps
        else:
            ref_kl_logps = self._kl_logps(lambda **kw: self._reference_forward(**kw))
            ref_outputs = self._reference_forward(input_ids=input_ids)
            ref_per_token_logps = selective_log_softmax(torch, ref_outputs.logits[:, :-1, :], input_ids[:, 1:])
            ref_per_token_logps[self.completion_mask[:, 1:] == 0] = 0.0
            ref_completion_logps = ref_per_token_logps.sum(-1)
            ref_chosen_logps = ref_completion_logps.index_select(0, chosen_idx)
            ref_rejected_logps = ref_completion_logps.index_select(0, rejected_idx)
        kl = (kl_logps - ref_kl_logps).mean().detach().clamp(min=0)
        chosen_losses = 1 - torch.sigmoid(KTO_BETA * (chosen_logps - ref_chosen_logps - kl))
        rejected_losses = 1 - torch.sigmoid(KTO_BETA * (kl - (rejected_logps - ref_rejected_logps)))
        loss = torch.cat((chosen_losses, rejected_losses), 0).nanmean()
        # TRL's metrics: the entropy, then the chosen and rejected logits (index_select copies,
        # both alive until the loss returns) and their masked means.
        mask = self.completion_mask[:, 1:]
        entropy_sum = (entropy_from_logits(torch, shift_logits.detach()) * mask).sum()
        chosen_logits = shift_logits.detach().index_select(0, chosen_idx)
        rejected_logits = shift_logits.detach().index_select(0, rejected_idx)
        chosen_mask = mask.index_select(0, chosen_idx)
        rejected_mask = mask.index_select(0, rejected_idx)
        total_chosen_logits = chosen_logits[chosen_mask.bool()].mean(-1).sum()
        total_rejected_logits = rejected_logits[rejected_mask.bool()].mean(-1).sum()
        for metric in (kl, entropy_sum, total_chosen_logits, total_rejected_logits, chosen_logps.nansum()):
            metric.item()
        return loss

    # -- Reward modelling: RewardTrainer.compute_loss -------------------------------------------

    def _reward(self):
        torch = self.torch
        outputs = self.model(input_ids=self.ids, use_cache=False)
        rewards_chosen, rewards_rejected = torch.chunk(outputs.logits.squeeze(-1), chunks=2)
        loss = -torch.nn.functional.logsigmoid(rewards_chosen - rewards_rejected).mean()
        with torch.no_grad():
            for metric in (outputs.logits.min(), outputs.logits.mean(), outputs.logits.max(),
                           (rewards_chosen > rewards_rejected).float().mean(), (rewards_chosen - rewards_rejected).mean()):
                metric.item()
        return loss

    # -- GRPO: GRPOTrainer._get_per_token_logps_and_entropies and _compute_loss -----------------

    def _grpo_advantages(self, gen):
        """Random rewards for the generation batch (batch x grad_accum completions), normalised
        in groups of `generations` as TRL's scale_rewards="group" does."""
        torch = self.torch
        G = self.plan.generations
        rows = self.ids.shape[0] * self.accum
        rewards = torch.rand(rows, generator=gen).to(self.device)
        grouped = rewards.view(-1, G)
        mean = grouped.mean(dim=1).repeat_interleave(G, dim=0)
        std = grouped.std(dim=1).repeat_interleave(G, dim=0)
        return ((rewards - mean) / (std + 1e-4)).view(self.accum, -1)

    def _grpo_logps(self, model, compute_entropy):
        torch = self.torch
        input_ids = torch.cat([self.prompt_ids, self.completion_ids], dim=1)
        logits_to_keep = self.completion_ids.size(1)
        outputs = model(input_ids=input_ids, logits_to_keep=logits_to_keep + 1, use_cache=False)
        logits = outputs.logits[:, :-1, :]
        logits = logits[:, -logits_to_keep:, :]
        logits.div_(TEMPERATURE)
        logps = selective_log_softmax(torch, logits, input_ids[:, -logits_to_keep:])
        entropies = None
        if compute_entropy:
            with torch.no_grad():
                entropies = entropy_from_logits(torch, logits)
        return torch.cat([logps], dim=0), entropies

    def before_step(self):
        """GRPO with a reference (beta > 0): the reference's per-token log-probabilities of the
        step's completions, in chunks of `batch`, under no_grad (_generate_and_score_completions)."""
        if self.plan.objective != "grpo" or self.plan.reference == "none":
            return
        torch = self.torch
        for micro in range(self.accum):
            with torch.no_grad():
                if self.reference is not None:
                    logps, _ = self._grpo_logps(self.reference, False)
                else:
                    with self.model.disable_adapter():
                        logps, _ = self._grpo_logps(self.model, False)
            self.ref_per_token_logps[micro] = logps

    def _grpo(self, micro):
        torch = self.torch
        per_token_logps, entropies = self._grpo_logps(self.model, True)
        mask = self.grpo_mask
        advantages = self.advantages[micro].unsqueeze(1)
        old_per_token_logps = per_token_logps.detach()
        log_ratio = per_token_logps - old_per_token_logps
        coef_1 = torch.exp(log_ratio)
        coef_2 = torch.clamp(coef_1, 1 - GRPO_EPSILON, 1 + GRPO_EPSILON)
        per_token_loss = -torch.min(coef_1 * advantages, coef_2 * advantages)
        ref = self.ref_per_token_logps[micro]
        if ref is not None:
            per_token_kl = torch.exp(ref - per_token_logps) - (ref - per_token_logps) - 1
            per_token_loss = per_token_loss + GRPO_BETA * per_token_kl
        # loss_type "dapo": normalised by the active tokens of the whole accumulated batch.
        normalizer = (mask.sum() * self.accum).clamp(min=1.0)
        loss = (per_token_loss * mask).sum() / normalizer
        ((entropies * mask).sum() / mask.sum()).item()
        return loss

    # -- PPO: PPOTrainer.train's optimisation micro-batch ---------------------------------------

    def _ppo_rollout(self, gen):
        """What the rollout would hand the optimisation phase (not run: generation, the
        reference and reward scoring are excluded): the old log-probabilities, values, returns
        and whitened advantages of the responses, from random scores."""
        torch = self.torch
        rows, C = self.ids.shape[0], self.plan.completion_len
        self.responses = self.ids[:, -C:]
        self.old_logprobs = (torch.randn(rows, C, generator=gen) - 10.0).to(self.device)
        values = torch.randn(rows, C, generator=gen).to(self.device)
        scores = torch.randn(rows, generator=gen).to(self.device)
        rewards = torch.zeros(rows, C, device=self.device)
        rewards[:, -1] += scores
        gamma, lam = 1.0, 0.95
        lastgaelam = 0
        reversed_adv = []
        for t in reversed(range(C)):
            nextvalues = values[:, t + 1] if t < C - 1 else 0.0
            delta = rewards[:, t] + gamma * nextvalues - values[:, t]
            lastgaelam = delta + gamma * lam * lastgaelam
            reversed_adv.append(lastgaelam)
        advantages = torch.stack(reversed_adv[::-1], dim=1)
        self.returns = advantages + values
        self.old_values = values
        self.ppo_advantages = masked_whiten(torch, advantages, torch.ones_like(advantages))

    def _ppo(self):
        torch = self.torch
        context_length = self.plan.prompt_len
        query_responses = self.ids
        # PolicyAndValueWrapper.forward: the value model's backbone and score head, then the policy,
        # both with output_hidden_states=True (TRL's forward()).
        critic = getattr(self.value, self.value.base_model_prefix)
        critic_output = critic(input_ids=query_responses, output_hidden_states=True, return_dict=True)
        vpred_temp = self.value.score(critic_output.hidden_states[-1])
        del critic_output
        output = self.model(input_ids=query_responses, output_hidden_states=True, return_dict=True)
        logits = output.logits[:, context_length - 1: -1]
        logits /= TEMPERATURE + 1e-7
        new_logprobs = selective_log_softmax(torch, logits, self.responses)
        vpred = vpred_temp[:, context_length - 1: -1].squeeze(-1)
        vpredclipped = torch.clamp(vpred, self.old_values - PPO_CLIPRANGE_VALUE, self.old_values + PPO_CLIPRANGE_VALUE)
        vf_losses1 = torch.square(vpred - self.returns)
        vf_losses2 = torch.square(vpredclipped - self.returns)
        vf_loss = 0.5 * torch.max(vf_losses1, vf_losses2).mean()
        logprobs_diff = new_logprobs - self.old_logprobs
        ratio = torch.exp(logprobs_diff)
        pg_losses = -self.ppo_advantages * ratio
        pg_losses2 = -self.ppo_advantages * torch.clamp(ratio, 1.0 - PPO_CLIPRANGE, 1.0 + PPO_CLIPRANGE)
        pg_loss = torch.max(pg_losses, pg_losses2).mean()
        loss = pg_loss + PPO_VF_COEF * vf_loss
        # TRL keeps the policy's output (logits, hidden states) alive through the backward and the
        # optimizer step: its metrics read the logits afterwards.
        self._kept = (output, logits, logprobs_diff)
        return loss

    def _ppo_metrics(self):
        torch = self.torch
        output, logits, logprobs_diff = self._kept
        with torch.no_grad():
            prob_dist = torch.nn.functional.softmax(logits, dim=-1)
            entropy = torch.logsumexp(logits, dim=-1) - torch.sum(prob_dist * logits, dim=-1)
            entropy.mean().item()
            (0.5 * (logprobs_diff ** 2).mean()).item()
        self._kept = None
        del output, logits, prob_dist, entropy

    # -- what steps.py calls --------------------------------------------------------------------

    def loss(self, micro):
        o = self.plan.objective
        if o == "dpo":
            return self._dpo()
        if o == "orpo":
            return self._orpo()
        if o == "kto":
            return self._kto()
        if o == "reward":
            return self._reward()
        if o == "grpo":
            return self._grpo(micro)
        if o == "ppo":
            return self._ppo()
        raise ObjectiveError("objective %s has no loss here (sft is steps.py's own)" % o)

    def after_backward(self, last):
        """PPO: TRL steps the optimizer inside each micro-batch (accelerate makes it a no-op but
        on the last) and then reads the logits for its metrics; on the last micro-batch steps.py
        calls after_step() once the optimizer has stepped."""
        if self.plan.objective == "ppo" and not last:
            self._ppo_metrics()

    def after_step(self):
        if self.plan.objective == "ppo" and self._kept is not None:
            self._ppo_metrics()


# ---------------------------------------------------------------------------------------------
# The models an objective needs

def build_extras(torch, cfg, device, build_base):
    """The models beside the trained one: the reference copy (DPO, KTO, PPO, GRPO with
    `reference` copy: the base as the policy's is stored, frozen), PPO's value model (a sequence
    classifier of the policy's architecture, every weight trained: TRL's PPOTrainer applies PEFT to
    the policy only) and reward model (the same, frozen). `build_base(kind)` builds a base model of
    kind "causal" or "classifier" as models.py builds the policy's base."""
    plan = plan_of(cfg)
    extras = {}
    if plan.reference == "copy":
        ref = build_base("causal")
        ref.eval()
        for p in ref.parameters():
            p.requires_grad_(False)
        extras["reference"] = ref
    if plan.value_model:
        value = build_base("classifier")
        value.train()
        extras["value"] = value
    if plan.reward_model:
        reward = build_base("classifier")
        reward.eval()
        for p in reward.parameters():
            p.requires_grad_(False)
        extras["reward"] = reward
    return extras


def describe(plan):
    """What the row says the objective ran (measured.objective)."""
    return {"objective": plan.objective, "trained_sequences": plan.trained_sequences,
            "kl_sequences": plan.kl_sequences, "reference": plan.reference,
            "reference_sequences": plan.reference_sequences, "prompt_len": plan.prompt_len,
            "completion_len": plan.completion_len, "generations": plan.generations,
            "excluded": "generation and rollout scoring" if plan.objective in ("ppo", "grpo") else None}
