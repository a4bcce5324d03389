#pragma once
// Reading the JSON-lines files the tests make trainfit write (watch recordings, bench results).
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace trainfit::testing {

// Every non-empty line of `path`, parsed (a line that is not JSON fails the test with an exception).
inline std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

// How many of `lines` have "type" == `type` (a watch recording's samples, events, verdicts).
inline int count_of_type(const std::vector<nlohmann::json>& lines, const char* type) {
  int n = 0;
  for (const auto& l : lines) n += l["type"] == type;
  return n;
}

}  // namespace trainfit::testing
