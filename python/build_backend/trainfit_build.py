"""The package's build backend (PEP 517), with nothing to download: `pip install ./python` works
offline, on a machine with only Debian's packages.

A backend from the package index (setuptools, scikit-build-core) would be installed into pip's
isolated build environment from the index, which a machine without network cannot reach. This one
is the standard library alone: it builds the compiled module with the repository's own CMake preset
(the one scripts/test.sh builds, so a built tree is reused, not built again) and writes the wheel,
which is a zip file with three metadata files (PEP 427).

The wheel holds the `trainfit` package (python/trainfit/ and the module _trainfit) and
`trainfit_runner` (the runner and probe the callback measures with). The version is the CMake
project's (one place). The preset is "default"; `--config-settings preset=NAME` or
$TRAINFIT_PRESET picks another, and $TRAINFIT_BUILD_DIR names a build folder configured already.
"""
import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(HERE)
REPO = os.path.dirname(PYTHON_DIR)
NAME = "trainfit"
PACKAGES = ("trainfit", "trainfit_runner")
PACKAGE_DATA = (".py", ".json")  # the runner's setup schema and host-probe request are JSON


def _version():
    with open(os.path.join(REPO, "CMakeLists.txt")) as f:
        m = re.search(r"project\(\s*trainfit\s+VERSION\s+([0-9.]+)", f.read())
    if not m:
        raise RuntimeError("no project(trainfit VERSION ...) in %s/CMakeLists.txt" % REPO)
    return m.group(1)


def _tag():
    """cp311-cp311-linux_x86_64: this interpreter, as the module is built for it."""
    impl = "cp%d%d" % sys.version_info[:2]
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return "%s-%s-%s" % (impl, impl, platform)


def _metadata():
    readme = ""
    path = os.path.join(PYTHON_DIR, "README.md")
    if os.path.exists(path):
        with open(path) as f:
            readme = f.read()
    return ("Metadata-Version: 2.1\nName: %s\nVersion: %s\n"
            "Summary: Will a training run fit in GPU memory, how fast, and what holds it back\n"
            "Requires-Python: >=3.9\nLicense: Apache-2.0\n"
            "Description-Content-Type: text/markdown\n\n%s") % (NAME, _version(), readme)


def _dist_info():
    return "%s-%s.dist-info" % (NAME, _version())


def _build_module(config_settings):
    """Builds _trainfit with the preset and returns its path."""
    preset = (config_settings or {}).get("preset") or os.environ.get("TRAINFIT_PRESET") or "default"
    if not os.path.exists(os.path.join(REPO, "CMakePresets.json")):
        raise RuntimeError("pip install ./python builds from a clone of the trainfit repository "
                           "(its CMakePresets.json is missing above %s)" % PYTHON_DIR)
    # $TRAINFIT_BUILD_DIR: a folder configured already, whatever its preset (the tests' own).
    build = os.environ.get("TRAINFIT_BUILD_DIR") or os.path.join(REPO, "build", preset)
    # A configured tree is built as it is (scripts/test.sh's, reused: its module is already built);
    # configuring it again would change what its tests run with.
    cmds = [] if os.path.exists(os.path.join(build, "CMakeCache.txt")) else [["cmake", "--preset", preset]]
    cmds.append(["cmake", "--build", build, "--target", "trainfit_python"])
    for cmd in cmds:
        # The build's output goes to stderr, which pip shows with -v and on a failure.
        done = subprocess.run(cmd, cwd=REPO, stdout=sys.stderr, stderr=sys.stderr)
        if done.returncode != 0:
            raise RuntimeError("%s failed (exit %d): scripts/install-deps.sh installs what the build needs"
                               % (" ".join(cmd), done.returncode))
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    path = os.path.join(build, "python", "trainfit", "_trainfit" + suffix)
    if not os.path.exists(path):
        raise RuntimeError("the build made no %s: %s was configured for another Python than %s (configure it "
                           "with -DPython3_EXECUTABLE=%s)" % (path, build, sys.executable, sys.executable))
    return path


def _record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (arcname, digest, len(data))


def _package_files():
    for package in PACKAGES:
        root = os.path.join(PYTHON_DIR, package)
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith(PACKAGE_DATA):
                    path = os.path.join(folder, name)
                    yield path, os.path.relpath(path, PYTHON_DIR).replace(os.sep, "/")


def _write_wheel(wheel_directory, module_path):
    name = "%s-%s-%s.whl" % (NAME, _version(), _tag())
    info = _dist_info()
    record = []
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as whl:

        def add(arcname, data):
            whl.writestr(zipfile.ZipInfo(arcname, date_time=(2026, 1, 1, 0, 0, 0)), data, zipfile.ZIP_DEFLATED)
            record.append(_record_line(arcname, data))

        for path, arcname in _package_files():
            with open(path, "rb") as f:
                add(arcname, f.read())
        with open(module_path, "rb") as f:
            add("trainfit/" + os.path.basename(module_path), f.read())
        add(info + "/METADATA", _metadata().encode())
        add(info + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: trainfit_build\nRoot-Is-Purelib: false\nTag: %s\n"
                              % _tag()).encode())
        add(info + "/top_level.txt", ("\n".join(PACKAGES) + "\n").encode())
        record.append(info + "/RECORD,,")
        whl.writestr(info + "/RECORD", "\n".join(record) + "\n")
    return name


# -- PEP 517 hooks


def get_requires_for_build_wheel(config_settings=None):
    return []  # the standard library; CMake and the compiler are the system's


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    info = os.path.join(metadata_directory, _dist_info())
    os.makedirs(info, exist_ok=True)
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write(_metadata())
    return _dist_info()


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    if shutil.which("cmake") is None:
        raise RuntimeError("cmake is not installed: scripts/install-deps.sh installs what the build needs")
    return _write_wheel(wheel_directory, _build_module(config_settings))
