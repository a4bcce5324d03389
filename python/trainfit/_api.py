"""trainfit.plan and trainfit.advise: the library's answers as Python objects.

Every call is one request to the library's web API (docs/serve.md), answered in this process by the
compiled module (_trainfit): the keyword arguments are the settings' JSON keys (`trainfit schema`,
trainfit.schema()), so a plan here is byte for byte what `trainfit plan --format json` prints for
the same settings, and what the page shows.
"""
import html
import json
import os

__all__ = ["TrainfitError", "Plan", "Advice", "plan", "advise", "schema", "models", "gpus", "setup_of"]


class TrainfitError(ValueError):
    """A setup or request trainfit refuses, with trainfit's one-line reason."""


def _native():
    try:
        from . import _trainfit
    except ImportError:
        # A development tree: the module is built into BUILD/python/trainfit/, beside no .py files;
        # $TRAINFIT_PYTHON_MODULE_DIR names that folder (the tests set it).
        folder = os.environ.get("TRAINFIT_PYTHON_MODULE_DIR")
        if not folder:
            raise ImportError("trainfit's compiled module is missing: install the package "
                              "(pip install ./python, docs/python.md) or set TRAINFIT_PYTHON_MODULE_DIR "
                              "to the build's python/trainfit folder") from None
        import importlib.machinery
        import importlib.util
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(folder, "_trainfit" + suffix)
            if os.path.exists(path):
                spec = importlib.util.spec_from_file_location("trainfit._trainfit", path)
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                return module
        raise ImportError("no _trainfit module in %s" % folder) from None
    return _trainfit


def _request(path, body=None, method="POST"):
    status, content_type, raw = _native().request(method, path, [], b"" if body is None else
                                                  json.dumps(body).encode())
    text = raw.decode("utf-8", errors="replace")
    if status != 200:
        try:
            message = json.loads(text)["error"]
        except (ValueError, KeyError, TypeError):
            message = text.strip()
        raise TrainfitError(message)
    return content_type, text


def _read_json_file(path):
    with open(path) as f:
        return json.load(f)


def setup_of(setup=None, **settings):
    """The request body for a setup: `setup` is a dict of settings, a plan as trainfit writes it
    (its "setup" is taken), or the path of a JSON file holding either; `settings` (the schema's keys)
    are laid over it, and a None value leaves a setting at its default. A model that is a folder
    holding config.json, or a config.json path, is sent as that config (config_json); a recipe
    (TRL, LLaMA-Factory or axolotl) is sent as its text, whether given as a path or as text."""
    body = {}
    if setup is not None:
        if isinstance(setup, (str, os.PathLike)):
            setup = _read_json_file(setup)
        if not isinstance(setup, dict):
            raise TrainfitError("setup: a dict of settings, a plan's JSON, or the path of a JSON file")
        if isinstance(setup.get("setup"), dict) and "schema" in setup:
            setup = setup["setup"]
        body.update(setup)
    body.update({k: v for k, v in settings.items() if v is not None})
    for key in [k for k, v in body.items() if v is None]:
        del body[key]  # a written setup's null (no amp, no offload device) is the default
    model = body.get("model")
    if isinstance(model, (str, os.PathLike)) and os.path.exists(model):
        path = os.path.join(model, "config.json") if os.path.isdir(model) else model
        del body["model"]
        body["config_json"] = _read_json_file(path)
    recipe = body.get("recipe")  # a recipe file's path, or its text (`--recipe`)
    if isinstance(recipe, os.PathLike) or (isinstance(recipe, str) and "\n" not in recipe and os.path.isfile(recipe)):
        with open(recipe) as f:
            body["recipe"] = f.read()
    config = body.get("config_json")
    if isinstance(config, os.PathLike) or (isinstance(config, str) and not config.lstrip().startswith("{")):
        body["config_json"] = _read_json_file(config)
    return body


class _Result:
    _path = ""

    def __init__(self, data, body):
        self.json = data  # what the command prints with --format json
        self._body = body

    def __getitem__(self, key):
        return self.json[key]

    def render(self, format="table"):
        """The command's own rendering: table (the terminal's), markdown or html (the report)."""
        return _request(self._path, dict(self._body, format=format))[1]

    def __str__(self):
        return self.render("table")

    def _repr_html_(self):
        # The report is a whole document with its own script and style: framed, so that the
        # notebook's page and the report's cannot restyle each other.
        return ('<iframe style="width:100%;height:720px;border:0" srcdoc="{}"></iframe>'
                .format(html.escape(self.render("html"), quote=True)))


class Plan(_Result):
    """One setup's plan. `json` holds all of it (schema trainfit.plan/1, docs/model.md); the
    properties name what is asked most."""
    _path = "/api/plan"

    @property
    def verdict(self):
        """fits, tight (fits without the headroom the setup asks), oom, or spills (Windows)."""
        return self.json["verdict"]

    @property
    def fits(self):
        return self.verdict in ("fits", "tight")

    @property
    def run_state(self):
        """runs, runs under allocator pressure, or fails (docs/model.md, "The boundary")."""
        return self.json["run_state"]

    @property
    def summary(self):
        """The plan in a few sentences: the verdict, where the peak comes, and the step of a setup
        that runs (the page's and the report's summary; docs/model.md)."""
        return self.json["summary"]

    @property
    def peak_allocated_bytes(self):
        return self.json["memory"]["peak_allocated_bytes"]

    @property
    def device_used_bytes(self):
        return self.json["memory"]["device_used_bytes"]

    @property
    def capacity_bytes(self):
        return self.json["device"]["capacity_bytes"]

    @property
    def peak_phase(self):
        return self.json["memory"]["peak_phase"]

    @property
    def peak_moment(self):
        return self.json["memory"]["peak_moment"]

    @property
    def step_seconds(self):
        """The predicted optimizer step; None for a setup that cannot run, or a card known only by
        its memory (vram=), which has no rates to price a step from."""
        time = self.json.get("time")
        return None if self.verdict in ("oom", "spills") or not time else time["step_seconds"]

    @property
    def tokens_per_second(self):
        return None if self.step_seconds is None else self.json["time"]["tokens_per_second"]

    @property
    def bottleneck(self):
        time = self.json.get("time")
        return time["bottleneck"] if time else None

    @property
    def warnings(self):
        return list(self.json.get("warnings", []))

    @property
    def setup(self):
        """Every setting of the setup, defaults included: plan(setup=p.setup) plans it again."""
        return dict(self.json["setup"])

    @property
    def boundary(self):
        """With largest="batch" or "seq": the largest value that runs (docs/model.md)."""
        return self.json.get("boundary")

    def __repr__(self):
        s, gib = self.json["setup"], 1 << 30
        line = "Plan(%s %s on %s: %s, peak %.1f of %.1f GiB" % (
            s.get("model"), s.get("method"), self.json["device"]["id"], self.verdict,
            self.peak_allocated_bytes / gib, self.capacity_bytes / gib)
        if self.step_seconds is not None:
            line += ", %.3g s a step" % self.step_seconds
        return line + ")"


class Advice(_Result):
    """advise's answer (schema trainfit.advise/1, docs/advise.md): `results`, best first."""
    _path = "/api/advise"

    @property
    def results(self):
        return list(self.json.get("results", []))

    @property
    def best(self):
        results = self.results
        return results[0] if results else None

    def __repr__(self):
        best = self.best
        return "Advice(%d results%s)" % (len(self.results), ", best: " + " ".join(best["command"])
                                         if best and isinstance(best.get("command"), list) else "")


def plan(setup=None, *, largest=None, suggest=True, **settings):
    """Plan one setup: trainfit.plan(model="qwen2.5-7b", gpu="rtx-4090", method="qlora").

    Keyword arguments are the settings' JSON keys (trainfit.schema()); `setup` is a setup dict, a
    plan's JSON or a JSON file (setup_of); `largest` ("batch" or "seq") also searches the boundary
    (Plan.boundary). Raises TrainfitError with trainfit's reason for a setup it refuses."""
    body = setup_of(setup, **settings)
    if largest is not None:
        body["largest"] = largest
    if not suggest:
        body["no_suggest"] = True
    return Plan(json.loads(_request("/api/plan", body)[1]), body)


def advise(setup=None, *, goal=None, free=None, fix=None, gpus_max=None, top=None, tokens_per_step=None,
           tokens=None, epochs=None, dataset_tokens=None, **settings):
    """Search setups as `trainfit advise` does (docs/advise.md): gpu and method may be "any" or a
    list; the options are advise's flags by their JSON names."""
    options = dict(goal=goal, free=free, fix=fix, gpus_max=gpus_max, top=top, tokens_per_step=tokens_per_step,
                   tokens=tokens, epochs=epochs, dataset_tokens=dataset_tokens)
    for key in ("gpu", "method", "free", "fix"):
        value = settings.get(key) if key in settings else options.get(key)
        if isinstance(value, (list, tuple)):
            (settings if key in settings else options)[key] = ",".join(value)
    body = setup_of(setup, **settings)
    body.update({k: v for k, v in options.items() if v is not None})
    return Advice(json.loads(_request("/api/advise", body)[1]), body)


def schema():
    """The settings: every key plan() and advise() take, with type, choices and default."""
    return json.loads(_request("/api/schema", method="GET")[1])


def models():
    """The built-in models (`trainfit models`)."""
    return json.loads(_request("/api/models", method="GET")[1])


def gpus():
    """The card catalogue (`trainfit gpus`)."""
    return json.loads(_request("/api/gpus", method="GET")[1])
