"""trainfit: will a training run fit in GPU memory, how fast will it go, and what holds it back.

    import trainfit
    p = trainfit.plan(model="qwen2.5-7b", gpu="rtx-4090", method="qlora")
    p.verdict, p.peak_allocated_bytes, p.step_seconds

plan() and advise() take the settings of `trainfit schema` as keyword arguments and answer what
`trainfit plan` / `trainfit advise --format json` print (docs/python.md). In a notebook a Plan
shows as trainfit's HTML report. trainfit.hf.Callback() forecasts and measures a Hugging Face or
TRL Trainer's run; trainfit.Forecast does the same around a plain PyTorch loop.
"""
from ._api import Advice, Plan, TrainfitError, advise, gpus, models, plan, schema, setup_of
from .live import Forecast, WillNotFit, settings_of_run


def __getattr__(name):
    if name == "__version__":
        from ._api import _native
        return _native().version
    if name == "hf":  # trainfit.hf without an import of its own, as the docs write it
        import importlib
        return importlib.import_module(".hf", __name__)
    raise AttributeError(name)


__all__ = ["Advice", "Forecast", "Plan", "TrainfitError", "WillNotFit", "advise", "gpus", "models", "plan",
           "schema", "settings_of_run", "setup_of"]
