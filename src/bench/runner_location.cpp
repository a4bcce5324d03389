// Where `bench` finds its Python runner package: relative to the running program, so that the
// same binary works in the build tree, from an install under any prefix, and after the install
// is moved (nothing about the source tree or the install prefix is compiled in).
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <system_error>

#include "trainfit/bench.hpp"

// The install's data folder as seen from its bin folder ("../share/trainfit"), from
// GNUInstallDirs (src/CMakeLists.txt).
#ifndef TRAINFIT_SHARE_FROM_BIN
#error "TRAINFIT_SHARE_FROM_BIN must name the data folder relative to the bin folder"
#endif

namespace trainfit::bench {

namespace fs = std::filesystem;

std::optional<fs::path> runner_python_dir(const fs::path& program, const char* override_dir) {
  if (override_dir != nullptr && *override_dir != '\0') return fs::path(override_dir);
  if (program.empty()) return std::nullopt;
  const fs::path dir = (program.parent_path() / TRAINFIT_SHARE_FROM_BIN / "python").lexically_normal();
  std::error_code ec;  // an unreadable folder is the same as none
  if (fs::is_regular_file(dir / "trainfit_runner" / "__init__.py", ec)) return dir;
  return std::nullopt;
}

std::optional<fs::path> runner_python_dir() {
  std::error_code ec;
  // The program itself, symbolic links resolved: a link to an installed binary (from a folder
  // on PATH, say) still finds the install's share/ folder.
  const fs::path program = fs::read_symlink("/proc/self/exe", ec);
  return runner_python_dir(ec ? fs::path() : program, std::getenv("TRAINFIT_PYTHON_DIR"));
}

}  // namespace trainfit::bench
