"""`pip install ./python` as a user runs it, into a fresh virtual environment, with no network:
the build backend reuses the configured build folder ($TRAINFIT_BUILD_DIR, the one ctest runs in),
and the installed package answers the README's line from outside the repository."""
import os
import subprocess
import sys
import tempfile
import unittest

PYTHON_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


@unittest.skipUnless(os.environ.get("TRAINFIT_BUILD_DIR"), "TRAINFIT_BUILD_DIR names a configured build folder")
class PipInstall(unittest.TestCase):
    def test_install_and_plan(self):
        with tempfile.TemporaryDirectory() as home:
            venv = os.path.join(home, "venv")
            subprocess.run([sys.executable, "-m", "venv", venv], check=True)
            python = os.path.join(venv, "bin", "python")
            env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
            env.pop("PYTHONPATH", None)
            done = subprocess.run([python, "-m", "pip", "install", "--quiet", os.path.abspath(PYTHON_DIR)], env=env,
                                  capture_output=True, text=True)
            self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
            line = ("import trainfit; print(trainfit.plan(model='qwen2.5-7b', gpu='rtx-4090', "
                    "method='qlora').verdict)")
            out = subprocess.run([python, "-c", line], cwd=home, env=env, capture_output=True, text=True)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertEqual(out.stdout.strip(), "fits")
            # The runner and probe come with it; the callback's module imports without transformers.
            where = subprocess.run([python, "-c", "import trainfit, trainfit.hf, trainfit_runner.probe as p; "
                                    "print(trainfit.__file__); print(p.__file__)"],
                                   cwd=home, env=env, capture_output=True, text=True)
            self.assertEqual(where.returncode, 0, where.stderr)
            for path in where.stdout.split():
                self.assertTrue(path.startswith(venv), path)


if __name__ == "__main__":
    unittest.main()
