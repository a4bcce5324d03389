"""Where a model's config.json is: a path to it, a folder holding it, or a built-in name (the
repository's data/models/, or models/ beside python/ in an install), and the dict it holds. Shared by
models.py (which builds the model) and setup_schema.py (a default that depends on the model's
family), with no torch and no transformers."""
import json
from pathlib import Path

# The built-in models' config.json files: data/models/ of the repository this package is in
# (python/trainfit_runner/), or models/ beside python/ in an install (<prefix>/share/trainfit/:
# python/trainfit_runner/ and models/; docs/bench.md). resolve(): the build tree links python/.
ROOT = Path(__file__).resolve().parents[2]
MODEL_DIRS = (ROOT / "data" / "models", ROOT / "models")


def builtin_config_path(name):
    """The config.json of a built-in model (MODEL_DIRS/NAME.json), or None."""
    for d in MODEL_DIRS:
        p = d / (name + ".json")
        if p.is_file():
            return p
    return None


def config_json_path(name):
    """The config.json of a model: a path to it or to a folder holding it, or a built-in name; or None."""
    p = Path(name)
    if p.is_dir():
        p = p / "config.json"
    return p if p.is_file() else builtin_config_path(name)


def model_json(name):
    """The model's config.json as a dict (for the layout checks), or None when it cannot be read here."""
    p = config_json_path(name)
    try:
        return json.loads(p.read_text()) if p is not None else None
    except (OSError, ValueError):
        return None
