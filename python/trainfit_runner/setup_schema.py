"""The vocabulary of a training setup, as trainfit defines it (one definition for C++ and Python).

trainfit's settings table (src/setup/settings.cpp) is the only list of settings, their defaults and
their allowed values; `trainfit schema` prints it as a JSON Schema. This module reads that schema:

- from the file $TRAINFIT_SETUP_SCHEMA names (`trainfit bench` writes its own binary's schema into
  the results directory and points its runners at it, so a runner speaks the orchestrator's
  vocabulary even when it is older or newer than this package);
- else from setup_schema.json beside this module: `trainfit schema` written at the time of this
  package (a test fails when it is not current).

A bench config holds, besides settings, the runner's own fields (RUNNER_FIELDS: how many steps,
where, an emulated card) and runner-specific fields whose names start with x_.
"""
import json
import math
import os
from pathlib import Path

from . import model_files

# How the runner runs a config (not settings of the setup), with their defaults.
RUNNER_FIELDS = {"device": "cuda", "steps": 4, "warmup": 1, "vram_bytes": None, "overflow": "oom"}

_cached = {}


def schema():
    """The schema (a dict), read once per file."""
    path = os.environ.get("TRAINFIT_SETUP_SCHEMA") or str(Path(__file__).with_name("setup_schema.json"))
    if path not in _cached:
        with open(path) as f:
            _cached[path] = json.load(f)
    return _cached[path]


def module_names(model_type):
    """What the family of config.json's model_type calls each role's module in a decoder layer
    ({"attention_query": "q_proj", ...}): trainfit's table of families, exported in the schema.
    A family trainfit does not know is named as Llama."""
    names = schema()["x-module-names"]
    return names.get(model_type, names["llama"])


def _text(value):
    """A value as the schema's conditions compare it (a setting's canonical text)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _holds(condition, cfg):
    value = cfg.get(condition["setting"])
    if "at_least" in condition:
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < condition["at_least"]:
            return False
    if "one_of" in condition and _text(value) not in condition["one_of"]:
        return False
    if "none_of" in condition and _text(value) in condition["none_of"]:
        return False
    return True


def applies(key, cfg):
    """Whether a setting means anything for this config (LoRA settings under full fine-tuning do not)."""
    prop = schema()["properties"][key]
    return "x-applies-when" not in prop or _holds(prop["x-applies-when"], cfg)


def _model_type(name):
    """The model_type of the config.json a model name or path gives, or None when it does not read."""
    if not name:
        return None
    d = model_files.model_json(name)
    return d.get("model_type") if isinstance(d, dict) else None


def complete(cfg, runner_fields=True):
    """The config with every setting given, in the schema's order: a missing one takes its default,
    or its derived default (weights nf4 under qlora; LoRA alpha twice the rank). With runner_fields,
    the runner's own fields (steps, device...) are accepted and get their defaults too. Raises
    ValueError naming a key that is none of these nor an x_ field, or a value outside a setting's
    choices."""
    s = schema()
    props = s["properties"]
    for key in cfg:
        if key not in props and not (runner_fields and key in RUNNER_FIELDS) and not key.startswith("x_"):
            raise ValueError("unknown config field %r (see `trainfit schema`; fields of your own start with x_)" % key)
    out = dict(cfg)
    for key in s["x-order"]:
        prop = props[key]
        if key in out and (out[key] is not None or None in prop.get("enum", [])):
            continue
        value = prop.get("default")
        derived = prop.get("x-derived-default")
        if derived and "model_types" in derived:
            # A default of the model (lora_dropout 0 on a mixture of experts): its config's model_type.
            if _model_type(out.get("model")) in derived["model_types"]:
                value = derived["value"]
        elif derived and "times" in derived:
            value = derived["factor"] * out[derived["times"]]
            if prop.get("type") == "integer":  # microbatches = pp, not 2.0
                # Halves rounded away from zero, as trainfit (std::llround) rounds them: a
                # completion of seq 1025 / 2 is 513 (Python's round() would give 512).
                value = int(math.floor(value + 0.5)) if value >= 0 else -int(math.floor(-value + 0.5))
        elif derived and "cases" in derived:
            # The first case that holds (the reference: none under grpo, copy under full, ...).
            for case in derived["cases"]:
                if _holds(case["when"], out):
                    value = case["value"]
                    break
        elif derived and ("when" not in derived or _holds(derived["when"], out)):
            value = derived["value"]
        out[key] = value
    for key, prop in props.items():
        if "enum" in prop and out[key] not in prop["enum"]:
            raise ValueError("config field %r: %r is not one of %s" % (key, out[key], prop["enum"]))
    if runner_fields:
        for key, value in RUNNER_FIELDS.items():
            out.setdefault(key, value)
    return out


def lora_targets(cfg):
    """The LoRA target modules as PEFT takes them: "all-linear", or a list of module names (a list,
    or one comma-separated string; shorthands such as q or gate expanded)."""
    targets = cfg.get("lora_targets", "all-linear")
    if isinstance(targets, str):
        targets = [t.strip() for t in targets.split(",") if t.strip()]
    if targets in (["all-linear"], ["all"], ["all_linear"]):
        return "all-linear"
    shorthands = schema()["properties"]["lora_targets"].get("x-shorthands", {})
    return [shorthands.get(t, t) for t in targets]
