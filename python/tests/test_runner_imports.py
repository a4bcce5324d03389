"""The runner's package is an entry point and libraries that do not import it back: no module of
python/trainfit_runner/ but __main__.py imports run.py, and the imports among its modules (at the
top or inside a function) form no circle. Read from the source, so that it needs no torch.

    python3 -m unittest discover -s python/tests -p 'test_runner_imports.py'
"""
import ast
import unittest
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "trainfit_runner"
PACKAGE_NAME = PACKAGE.name
# What `python -m trainfit_runner` runs (__main__.py) and the module it runs (run.py).
ENTRY_POINTS = {"__main__", "run"}


def package_modules():
    return {p.stem: p for p in sorted(PACKAGE.glob("*.py"))}


def imported_modules(path, modules):
    """The modules of the package that the file at `path` imports, anywhere in it: `from . import
    x`, `from .x import y`, `import trainfit_runner.x`, `from trainfit_runner import x`, ..."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == PACKAGE_NAME and len(parts) > 1:
                    found.add(parts[1])
        elif isinstance(node, ast.ImportFrom):
            if node.level > 1:
                continue  # above the package
            parts = (node.module or "").split(".") if node.module else []
            if node.level == 0:
                if not parts or parts[0] != PACKAGE_NAME:
                    continue
                parts = parts[1:]
            if parts:
                found.add(parts[0])
            else:  # from . import x, y: each name that is a module of the package
                found.update(alias.name for alias in node.names if alias.name in modules)
    return found & set(modules)


def import_graph():
    modules = package_modules()
    return {name: imported_modules(path, modules) - {name} for name, path in modules.items()}


def find_cycle(graph):
    """A list of modules that import each other in a circle (the first one again at the end), or None."""
    state = {}  # absent: not seen; 1: on the current path; 2: done
    path = []

    def visit(name):
        state[name] = 1
        path.append(name)
        for other in sorted(graph[name]):
            if state.get(other) == 1:
                return path[path.index(other):] + [other]
            if other not in state:
                cycle = visit(other)
                if cycle:
                    return cycle
        path.pop()
        state[name] = 2
        return None

    for name in sorted(graph):
        if name not in state:
            cycle = visit(name)
            if cycle:
                return cycle
    return None


class RunnerImports(unittest.TestCase):
    def test_the_reader_sees_every_form_of_import(self):
        # The test below is only as good as the reader: each form the package's code uses counts.
        modules = {"run": None, "models": None, "steps": None}
        cases = {"from . import run": {"run"}, "from . import run as runner": {"run"},
                 "from .run import main": {"run"}, "from . import models, steps": {"models", "steps"},
                 "import trainfit_runner.run": {"run"}, "from trainfit_runner import run": {"run"},
                 "from trainfit_runner.run import main": {"run"},
                 "def f():\n    from .run import write_row\n": {"run"},
                 "import json\nfrom pathlib import Path\nfrom . import setup_schema": set(),
                 "from .. import run": set()}
        for text, expected in cases.items():
            with self.subTest(text=text):
                self.assertEqual(imported_modules(_Source(text), modules), expected)

    def test_only_the_entry_point_imports_run(self):
        graph = import_graph()
        self.assertIn("run", graph)
        self.assertIn("__main__", graph)
        importers = sorted(name for name, imports in graph.items() if "run" in imports and name not in ENTRY_POINTS)
        self.assertEqual(importers, [], "run.py is the entry point; these modules import it back: %s" % importers)
        self.assertIn("run", graph["__main__"])

    def test_the_package_imports_in_no_circle(self):
        cycle = find_cycle(import_graph())
        self.assertIsNone(cycle, "modules that import each other: %s" % " -> ".join(cycle or ()))


class _Source:
    """What imported_modules reads of a Path, for a text that is in no file (the reader's own test)."""

    def __init__(self, text):
        self.text = text

    def read_text(self):
        return self.text

    def __str__(self):
        return "<case>"


if __name__ == "__main__":
    unittest.main()
