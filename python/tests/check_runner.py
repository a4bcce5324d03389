"""A bench runner that runs nothing: it reads the config `trainfit bench` wrote, as the real runner
does (setup_schema.complete, layouts.check, objectives.check), and writes a row saying whether the
runner would run it and how (measured.layout, measured.objective), or why not. test_scale_plans.py
and test_objectives.py run the shipped plans through it, so that every config those plans hand the
runner on a GPU machine is known to be accepted by it.

    trainfit bench PLAN.toml --runner "python3 python/tests/check_runner.py" --results DIR
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from trainfit_runner import layouts, models, objectives, rows, setup_schema  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--config-file", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    cfg = setup_schema.complete(json.loads(Path(args.config_file).read_text()))
    measured = {"status": "ok", "peak_allocated_mib": 1.0, "step_seconds_median": 1.0}
    try:
        measured["layout"] = layouts.describe(cfg, layouts.check(cfg, models.model_json(cfg["model"])))
        measured["objective"] = objectives.describe(objectives.check(cfg))
    except (layouts.LayoutError, objectives.ObjectiveError) as e:
        measured = {"status": "error", "error": "%s: %s" % (type(e).__name__, e)}
    rows.write_row(args.out, {"config": cfg, "stack": {}, "measured": measured})
    return 0


if __name__ == "__main__":
    sys.exit(main())
