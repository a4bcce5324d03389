"""python/trace_jobs/compare.py: `trainfit trace` against the independent Python reading on traces of
any origin. On two recordings of data/trace/ the readings agree (exit 0); held to a tolerance no
reading can meet, it says so and exits 1; a file both readings reject is said to be, and is no
difference. No torch."""
import gzip
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
COMPARE = os.path.join(ROOT, "python", "trace_jobs", "compare.py")
RECORDINGS = [os.path.join(ROOT, "data", "trace", job, "trace.json.gz") for job in ("host", "loader")]


def run(*args):
    return subprocess.run([sys.executable, COMPARE, "--trainfit", os.environ["TRAINFIT_CLI"], *args],
                          capture_output=True, text=True)


@unittest.skipUnless(os.environ.get("TRAINFIT_CLI"), "needs TRAINFIT_CLI, the trainfit binary")
class Compare(unittest.TestCase):
    def test_the_recordings_agree_step_by_step(self):
        out = run(*RECORDINGS)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertIn("2 of 2 files agree", out.stdout)
        self.assertIn("host", out.stdout)
        self.assertIn("verdict launch-overhead", out.stdout)
        self.assertIn("verdict input-pipeline", out.stdout)

    def test_a_difference_is_named_and_fails(self):
        out = run("--tolerance", "-1", RECORDINGS[0])
        self.assertEqual(out.returncode, 1, out.stdout)
        self.assertIn("DIFFERS", out.stdout)
        with tempfile.TemporaryDirectory() as tmp:
            # Not a trace for either reading: said, and not counted as a difference.
            bad = os.path.join(tmp, "bad.json.gz")
            with gzip.open(bad, "wt") as f:
                f.write('{"traceEvents": 5}')
            out = run(bad)
            self.assertEqual(out.returncode, 0, out.stdout)
            self.assertIn("both reject it", out.stdout)


if __name__ == "__main__":
    unittest.main()
