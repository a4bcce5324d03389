// Where bench finds its runner package: beside the program (an install's layout, or the build's
// link to python/), unless $TRAINFIT_PYTHON_DIR says otherwise.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "trainfit/bench.hpp"

namespace trainfit::bench {
namespace {

namespace fs = std::filesystem;

// <root>/bin/trainfit, and (with_package) <root>/share/trainfit/python/trainfit_runner/__init__.py.
fs::path fake_install(const std::string& name, bool with_package) {
  fs::path root = fs::path(::testing::TempDir()) / (name + "-" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "bin");
  std::ofstream(root / "bin" / "trainfit") << "";
  fs::create_directories(root / "share" / "trainfit" / "python" / "trainfit_runner");
  if (with_package) std::ofstream(root / "share" / "trainfit" / "python" / "trainfit_runner" / "__init__.py") << "";
  return root;
}

TEST(BenchRunnerLocation, TheInstallsPackageBesideTheProgram) {
  const fs::path root = fake_install("runner-install", true);
  const auto dir = runner_python_dir(root / "bin" / "trainfit", nullptr);
  ASSERT_TRUE(dir.has_value());
  EXPECT_EQ(*dir, (root / "share" / "trainfit" / "python").lexically_normal());
  EXPECT_EQ(runner_python_dir(root / "bin" / "trainfit", ""), dir);  // an empty override is none
}

TEST(BenchRunnerLocation, NoneWhenThePackageIsNotThere) {
  const fs::path root = fake_install("runner-none", false);  // the folder, but no trainfit_runner/__init__.py
  EXPECT_FALSE(runner_python_dir(root / "bin" / "trainfit", nullptr).has_value());
  EXPECT_FALSE(runner_python_dir(root / "elsewhere" / "trainfit", nullptr).has_value());
  EXPECT_FALSE(runner_python_dir(fs::path(), nullptr).has_value());  // /proc/self/exe unreadable
}

TEST(BenchRunnerLocation, TheEnvironmentOverrides) {
  const fs::path root = fake_install("runner-override", true);
  EXPECT_EQ(runner_python_dir(root / "bin" / "trainfit", "/my/runner"), fs::path("/my/runner"));
  EXPECT_EQ(runner_python_dir(fs::path(), "/my/runner"), fs::path("/my/runner"));  // taken as given
}

}  // namespace
}  // namespace trainfit::bench
