// `trainfit trace --snapshot` on real out-of-memory pickles (issue 35): the boundary scans of
// data/bench/h200-boundary-2026-12-05/ (torch 2.11 on an H200) and h100-boundary-2026-12-06/ (the
// same on an H100, held-out setups among them) left the allocator's snapshot at the OOM of failing
// trials (python/boundary_jobs/scan.py). PyTorch's own error message,
// in trials.jsonl, names the request ("Tried to allocate") and the allocated and reserved-unallocated
// totals at that moment; trainfit reads only the pickle. The issue's bars: the request within 0.5%,
// allocated and reserved within 1.5%, fragmentation named exactly when the cached free memory
// exceeded the request.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "trainfit/trace.hpp"

namespace {

namespace fs = std::filesystem;

const fs::path kScans[] = {fs::path(TRAINFIT_SOURCE_DIR) / "data/bench/h200-boundary-2026-12-05",
                           fs::path(TRAINFIT_SOURCE_DIR) / "data/bench/h100-boundary-2026-12-06"};

// "1.74 GiB" -> bytes, as PyTorch's format_size writes them (two decimals).
double message_bytes(const std::string& number, const std::string& unit) {
  const std::map<std::string, double> units = {
      {"bytes", 1.0}, {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}};
  return std::stod(number) * units.at(unit);
}

struct Message {
  double requested = 0;
  double allocated = 0;
  double reserved_unallocated = 0;
};

Message parse_message(const std::string& error) {
  static const std::regex tried(R"(Tried to allocate ([\d.]+) (\w+))");
  static const std::regex held(
      R"(Of the allocated memory ([\d.]+) (\w+) is allocated by PyTorch, and ([\d.]+) (\w+) is reserved)");
  std::smatch t;
  std::smatch h;
  EXPECT_TRUE(std::regex_search(error, t, tried)) << error;
  EXPECT_TRUE(std::regex_search(error, h, held)) << error;
  if (t.empty() || h.empty()) return {};
  return {message_bytes(t[1], t[2]), message_bytes(h[1], h[2]), message_bytes(h[3], h[4])};
}

// The message rounds to two decimals of its unit: a 0.005 GiB rounding is 0.02% of 20 GiB, but
// the bar is what is compared, so the rounding is allowed on top of it.
void expect_within(double ours, double theirs, double fraction, double rounding, const std::string& what) {
  EXPECT_LE(std::abs(ours - theirs), fraction * theirs + rounding) << what << ": trainfit " << ours << ", PyTorch "
                                                                   << theirs;
}

double rounding_of(double bytes) { return bytes >= 1073741824.0 ? 0.005 * 1073741824.0 : 0.005 * 1048576.0; }

// The scan's trials that left a pickle, each read by trace --snapshot once for every test.
struct OomTrial {
  nlohmann::json row;
  fs::path pickle;
  trainfit::trace::SnapshotReport report;
};

const std::vector<OomTrial>& oom_trials() {
  static const std::vector<OomTrial> trials = [] {
    std::vector<OomTrial> out;
    for (const fs::path& scan : kScans) {
      std::ifstream in(scan / "trials.jsonl");
      std::string line;
      while (std::getline(in, line)) {
        auto row = nlohmann::json::parse(line);
        // A trial that ran kept its history too (--snapshot-every); only the errors' are checked in.
        if (!row.contains("snapshot") || row["status"] != "oom") continue;
        fs::path pickle = scan / "snapshots" / (row["snapshot"].get<std::string>() + ".gz");
        auto report = trainfit::trace::analyse_snapshot(pickle.string());
        out.push_back({std::move(row), std::move(pickle), std::move(report)});
      }
    }
    return out;
  }();
  return trials;
}

TEST(OomSnapshots, TheFiguresAtTheErrorAreThoseOfPyTorchsMessage) {
  int checked = 0;
  int fragmented = 0;
  for (const auto& [row, pickle, report] : oom_trials()) {
    ASSERT_TRUE(report.oom.has_value()) << pickle;
    const auto& oom = *report.oom;
    const Message m = parse_message(row["error"].get<std::string>());
    const std::string what = pickle.filename().string();
    const double reserved = m.allocated + m.reserved_unallocated;
    expect_within(static_cast<double>(oom.segment_request_bytes), m.requested, 0.005, rounding_of(m.requested),
                  what + " request");
    expect_within(static_cast<double>(oom.allocated_bytes), m.allocated, 0.015, rounding_of(m.allocated),
                  what + " allocated");
    expect_within(static_cast<double>(oom.reserved_bytes), reserved, 0.015, rounding_of(reserved),
                  what + " reserved");
    // Fragmentation by its definition: the cached free memory would have held the request.
    EXPECT_EQ(oom.fragmentation, oom.cached_free_bytes >= oom.requested_bytes) << what;
    EXPECT_LT(oom.largest_free_block_bytes, oom.requested_bytes) << what << ": a free block held the request";
    fragmented += oom.fragmentation ? 1 : 0;
    ++checked;
  }
  EXPECT_GE(checked, 5);
  // The scan's pickles hold both kinds: an error in pieces and one where the cache was too small.
  EXPECT_GE(fragmented, 1);
  EXPECT_LT(fragmented, checked);
}

// The caching allocator's rules (memory/caching_allocator.hpp), replaying each pickle's history,
// agree with the GPU: under the limit the trial ran at (allocator_limit_mib in trials.jsonl) the
// request is not served, and under a limit raised by the segment it asked for, it is.
TEST(OomSnapshots, TheAllocatorReplayFailsWhereTheGpuFailed) {
  int checked = 0;
  int cut_short = 0;
  for (const auto& [row, pickle, report] : oom_trials()) {
    ASSERT_TRUE(report.oom.has_value()) << pickle;
    const auto& oom = *report.oom;
    const std::string what = pickle.filename().string();
    // A history that does not reach back to the first allocation (the recorder's max_entries ran
    // out: the Qwen2.5 7B QLoRA seq 8448 trial failed in its third step) cannot be replayed.
    if (!oom.limit_needed_bytes.has_value()) {
      ++cut_short;
      continue;
    }
    const double limit = row["allocator_limit_mib"].get<double>() * 1048576.0;
    const auto needed = static_cast<double>(*oom.limit_needed_bytes);
    EXPECT_GT(needed, limit) << what << ": the replay serves the request under the limit the GPU refused it at";
    EXPECT_LE(needed, limit + static_cast<double>(oom.segment_request_bytes)) << what;
    EXPECT_GE(*oom.limit_needed_bytes, oom.unstranded_need_bytes) << what;
    ++checked;
  }
  EXPECT_GE(checked, 14);
  EXPECT_LE(cut_short, 1);
}

}  // namespace
