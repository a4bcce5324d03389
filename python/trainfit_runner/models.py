"""The models the runner trains (docs/bench.md): where a model's config.json is (a path, a folder
holding it, or a built-in name), the transformers config read from it, and the model built from it
with random weights (shape, not values, decides memory and speed): full fine-tuning, LoRA (PEFT),
QLoRA (bitsandbytes when installed, else nf4.py), the reward objective's sequence classifier, and the
bases of the objectives' reference, value and reward models.

run.py builds the bench config's model here, host_probe.py the probe's tiny one, the measurement
scripts and python/trace_jobs theirs. The torch module is an argument, never imported at the top, so
that reading a config (layouts.py, the tests) needs no torch.
"""
import gc
import json
import re

from . import setup_schema
from .model_files import MODEL_DIRS, config_json_path, model_json  # noqa: F401 (the package's names for them)

# The multimodal configs: a vision tower and projector beside a text model.
MULTIMODAL = ("gemma3", "mistral3", "qwen2_5_vl", "qwen3_vl", "llama4")
# The vision towers' and projectors' module paths in transformers 5's multimodal models (Gemma 3's
# and Mistral 3's vision_tower, the Qwen VL models' visual, Llama 4's vision_model; the projectors).
TOWER_PATHS = re.compile(r".*(vision_tower|visual|vision_model|multi_modal_projector).*")


def language_model_config(d):
    """The config.json dict of the causal language model a multimodal config holds (the planner's
    vision_tower dropped): its text model, as the family the planner plans it as. Gemma 3's and
    Mistral 3's text_config (AutoModelForCausalLM then makes a Gemma3ForCausalLM or a
    MistralForCausalLM); Qwen2.5-VL's text fields (at the top level of its published configs, or in
    text_config) as Qwen2's layers and Qwen3-VL's as Qwen3's, without their 3-axis rotary scaling,
    which on text alone is the 1-axis one; Llama 4's text_config as Llama4ForCausalLM. Absent
    text_config fields take the text config class's defaults, as they do in transformers. A text
    model's config is returned as it is."""
    t = d.get("model_type")
    text = d.get("text_config")
    if t == "gemma3" and isinstance(text, dict):
        return dict(text, model_type="gemma3_text")
    if t == "mistral3" and isinstance(text, dict):  # its text_config names its own family
        return dict({"model_type": "mistral"}, **text)
    if t == "llama4" and isinstance(text, dict):
        return dict(text, model_type="llama4_text")
    if t in ("qwen2_5_vl", "qwen3_vl"):
        if not isinstance(text, dict):
            text = {k: v for k, v in d.items() if k not in ("vision_config", "architectures", "model_type")}
        text = {k: v for k, v in text.items() if k not in ("rope_scaling", "rope_parameters")}
        text.setdefault("tie_word_embeddings", d.get("tie_word_embeddings", False))
        return dict(text, model_type="qwen2" if t == "qwen2_5_vl" else "qwen3")
    return d


def load_hf_config(name, whole=False):
    """The transformers config of a built-in name (data/models/NAME.json) or a config.json path: of
    its text model (language_model_config), or with `whole` of the multimodal model it describes."""
    import transformers
    p = config_json_path(name)
    if p is None:
        raise FileNotFoundError("model %r: no such config.json, and no built-in model of that name in %s"
                                % (name, " or ".join(str(d) for d in MODEL_DIRS)))
    d = json.loads(p.read_text())
    if not (whole and d.get("model_type") in MULTIMODAL):
        d = language_model_config(d)
    d.pop("torch_dtype", None)
    d.pop("transformers_version", None)
    cls = transformers.CONFIG_MAPPING[d["model_type"]]
    cfg = cls.from_dict(d)
    cfg.use_cache = False
    return cfg


def build_toy(torch, cfg, device, dtype):
    """A tiny torch-only causal LM (x_toy): lets the runner's pipeline be tested without transformers."""
    nn = torch.nn
    h, v, layers = int(cfg.get("x_toy_hidden", 64)), int(cfg.get("x_toy_vocab", 256)), int(cfg.get("x_toy_layers", 2))

    class Out:
        def __init__(self, loss):
            self.loss = loss

    class Toy(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(v, h)
            self.layers = nn.ModuleList(nn.Sequential(nn.Linear(h, 4 * h), nn.SiLU(), nn.Linear(4 * h, h))
                                        for _ in range(layers))
            self.lm_head = nn.Linear(h, v, bias=False)

        def forward(self, input_ids, labels):
            x = self.embed(input_ids)
            for layer in self.layers:
                x = x + layer(x)
            logits = self.lm_head(x).float()
            return Out(torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, v), labels[:, 1:].reshape(-1)))

    m = Toy().to(device=device, dtype=dtype)
    m.vocab_size = v
    return m


def torch_dtype(torch, name):
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


def build_model(torch, cfg, device, res, kind=None):
    """The trained model: a causal LM, or under objective reward a sequence classifier (TRL's
    RewardTrainer: AutoModelForSequenceClassification, num_labels 1). With `kind` ("causal" or
    "classifier"), only the base as it is stored (quantised under QLoRA), without adapters or
    checkpointing: what the objectives' reference, value and reward models are built as."""
    base_only = kind is not None
    if kind is None:
        kind = "classifier" if cfg.get("objective") == "reward" else "causal"
    method, weights = cfg["method"], cfg["weights"]
    if method == "qlora":
        # The base is built in the compute dtype, then its decoder linears are quantised; what stays
        # unquantised (embedding, norms, output layer) keeps that dtype, as transformers loads it.
        compute = torch_dtype(torch, cfg["compute_dtype"])
        dtype = compute
    else:
        compute = dtype = torch_dtype(torch, weights)
    if cfg.get("x_toy"):
        model = build_toy(torch, cfg, device, dtype)
        vocab = model.vocab_size
    else:
        import transformers
        # A multimodal config with vision_tower loaded (or frozen: loaded, its parameters frozen below)
        # builds the whole ...ForConditionalGeneration, as AutoModelForCausalLM and the trainers do.
        whole = cfg.get("vision_tower", "loaded") in ("loaded", "frozen") and (model_json(cfg["model"]) or {}).get(
            "model_type") in MULTIMODAL
        hf = load_hf_config(cfg["model"], whole=whole)
        attn = {"sdpa": "sdpa", "eager": "eager", "flash": "flash_attention_2"}[cfg["attn"]]
        if kind == "classifier":
            # One score per sequence, read at its last token: the padding id (vocab - 1, which the
            # objectives' random ids never use) marks none, so every sequence is scored at its end.
            hf.num_labels = 1
            hf.pad_token_id = hf.vocab_size - 1
            cls = transformers.AutoModelForSequenceClassification
        else:
            cls = transformers.AutoModelForImageTextToText if whole else transformers.AutoModelForCausalLM
        with torch.device(device):
            model = cls.from_config(hf, dtype=dtype, attn_implementation=attn)
        vocab = hf.get_text_config().vocab_size
        res["attn_implementation_actual"] = getattr(model.config, "_attn_implementation", None)
        res["model_class"] = type(model).__name__
    if weights in ("nf4", "fp4", "int8"):
        res["quant_backend"] = quantize(torch, model, weights, compute, cfg)
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()  # the bf16 blocks of the build go back to the driver
        if cfg["kbit_prepare"] and not base_only:
            # PEFT's preparation: every parameter frozen, the unquantised ones cast to fp32.
            # Checkpointing stays this runner's own (below), non-reentrant, as the planner models it.
            from peft import prepare_model_for_kbit_training
            model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    if base_only:
        return model, vocab
    # vision_tower frozen (LLaMA-Factory's freeze_vision_tower and freeze_multi_modal_projector):
    # the tower's and projector's parameters require no gradient and get no adapter.
    frozen_tower = cfg.get("vision_tower") == "frozen" and hasattr(model, "get_image_features")
    if frozen_tower:
        for name, p in model.named_parameters():
            if TOWER_PATHS.search(name):
                p.requires_grad_(False)
    inner = model
    if method in ("lora", "qlora"):
        from peft import LoraConfig, get_peft_model
        # A sequence classifier's score head trains whole beside the adapters (PEFT's SEQ_CLS task
        # adds it to modules_to_save, as TRL's RewardTrainer recommends).
        lc = LoraConfig(r=cfg["rank"], lora_alpha=cfg["lora_alpha"], lora_dropout=cfg["lora_dropout"],
                        target_modules=setup_schema.lora_targets(cfg),
                        exclude_modules=TOWER_PATHS.pattern if frozen_tower else None,
                        task_type="SEQ_CLS" if kind == "classifier" else "CAUSAL_LM")
        with torch.device(device):
            model = get_peft_model(model, lc)
        # PEFT keeps adapters in fp32 (autocast_adapter_dtype); another adapter dtype is a cast.
        adapter = torch_dtype(torch, cfg["adapter_dtype"])
        if adapter != torch.float32:
            for name, p in model.named_parameters():
                if "lora_" in name:
                    p.data = p.data.to(adapter)
    if cfg["grad_ckpt"]:
        # After the PEFT wrap, on the transformers model, non-reentrant: the stack the planner models.
        inner.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    return model, vocab


def quantize(torch, model, weights, compute, cfg):
    """Replaces the decoder's linear layers by 4-bit (or 8-bit) ones; returns the backend used."""
    backend = cfg.get("x_quant_backend", "auto")
    try:
        import bitsandbytes as bnb  # noqa: F401
        have_bnb = True
    except Exception:
        have_bnb = False
    if backend == "bnb" or (backend == "auto" and have_bnb):
        import bitsandbytes as bnb
        nn = torch.nn
        for _, parent in list(model.named_modules()):
            for name, child in list(parent.named_children()):
                if type(child) is not nn.Linear or name == "lm_head":
                    continue
                dev = child.weight.device
                if weights == "int8":
                    new = bnb.nn.Linear8bitLt(child.in_features, child.out_features, bias=child.bias is not None,
                                              has_fp16_weights=False, device="meta")
                    new.weight = bnb.nn.Int8Params(child.weight.data.cpu(), requires_grad=False,
                                                   has_fp16_weights=False)
                else:
                    new = bnb.nn.Linear4bit(child.in_features, child.out_features, bias=child.bias is not None,
                                            compute_dtype=compute, compress_statistics=cfg["double_quant"],
                                            quant_type=weights, device="meta")
                    new.weight = bnb.nn.Params4bit(child.weight.data.cpu(), requires_grad=False,
                                                   compress_statistics=cfg["double_quant"], quant_type=weights)
                if child.bias is not None:
                    new.bias = nn.Parameter(child.bias.data.to(compute), requires_grad=False)
                setattr(parent, name, new.to(dev))  # bitsandbytes quantises on the move to the GPU
                del child
        model.is_loaded_in_4bit = weights != "int8"
        model.is_loaded_in_8bit = weights == "int8"
        return "bitsandbytes " + bnb.__version__
    if weights != "nf4":
        raise RuntimeError("%s weights need bitsandbytes, which is not installed" % weights)
    from . import nf4
    n = nf4.quantize_model_(model, double_quant=cfg["double_quant"], compute_dtype=compute)
    model.is_loaded_in_4bit = True  # what PEFT's k-bit preparation looks for
    return "trainfit nf4 (%d layers)" % n
