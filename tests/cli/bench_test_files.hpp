#pragma once
// Files the `trainfit bench` CLI tests share: a fresh directory per test process, a plan written
// into it, and the rows of a results directory (every line must parse).
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace trainfit::testing {

// The process id keeps parallel ctest processes out of each other's directories.
inline std::filesystem::path fresh_bench_dir(const std::string& name) {
  const std::filesystem::path d =
      std::filesystem::path(::testing::TempDir()) / ("bench-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

inline std::string write_bench_plan(const std::filesystem::path& dir, const std::string& body) {
  const std::filesystem::path p = dir / "plan.toml";
  std::ofstream(p) << body;
  return p.string();
}

inline std::vector<nlohmann::json> results_rows(const std::filesystem::path& results) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(results / "results.jsonl");
  std::string line;
  while (std::getline(in, line)) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

}  // namespace trainfit::testing
