// `trainfit trace --snapshot`: the peak reconstructed from the allocator's history, what was alive
// at it by the planner's categories, fragmentation, the largest stacks, and bad input.
#include <gtest/gtest.h>

#include <string>

#include "trainfit/error.hpp"
#include "trainfit/trace.hpp"

namespace {

using namespace trainfit::trace;

// Weights (400 B) are loaded, the forward pass saves two activations (300 + 200), the backward
// pass makes a gradient (100): the peak, 1000 B at 30 us. Then the activations are freed and the
// optimizer makes its state (150). The dump holds the weights, the gradient and the state.
const std::string kSnapshot = R"json({"schema": "trainfit.snapshot/1", "device": 0,
  "allocator": {"max_memory_allocated": 1000},
  "stacks": ["forward (models/qwen2.py:10) < train (job.py:5)",
             "_init_group (optim/adamw.py:100) < step (optim/adamw.py:200)",
             "__init__ (modules/linear.py:9) < build_model (trainfit_runner/run.py:3)",
             "torch::autograd::AccumulateGrad::apply < backward (torch/_tensor.py:5) < train (job.py:7)"],
  "segments": [
    {"address": 1000, "total_size": 1200, "blocks": [{"address": 1000, "size": 400, "state": "active_allocated", "stack": 2},
                                                     {"address": 1400, "size": 800, "state": "inactive", "stack": -1}]},
    {"address": 4000, "total_size": 1024, "blocks": [{"address": 4000, "size": 100, "state": "active_allocated", "stack": 3},
                                                     {"address": 4100, "size": 924, "state": "inactive", "stack": -1}]},
    {"address": 5000, "total_size": 512, "blocks": [{"address": 5000, "size": 150, "state": "active_allocated", "stack": 1},
                                                    {"address": 5150, "size": 362, "state": "inactive", "stack": -1}]}],
  "history": [["alloc", 1000, 400, 2, 100], ["alloc", 2000, 300, 0, 110], ["alloc", 3000, 200, 0, 120],
              ["alloc", 4000, 100, 3, 130], ["free_requested", 2000, 300, 3, 135], ["free_completed", 2000, 300, 3, 140],
              ["free_completed", 3000, 200, 3, 150], ["alloc", 5000, 150, 1, 160]]})json";

std::int64_t bytes_of(const SnapshotReport& r, const std::string& category) {
  for (const auto& t : r.breakdown)
    if (t.category == category) return t.bytes;
  return -1;
}

TEST(TraceSnapshot, ThePeakIsReconstructedFromTheHistory) {
  const SnapshotReport r = analyse_snapshot_text(kSnapshot, "snap");
  EXPECT_EQ(r.peak_allocated_bytes, 1000);
  ASSERT_TRUE(r.allocator_peak_allocated_bytes.has_value());
  EXPECT_EQ(*r.allocator_peak_allocated_bytes, 1000);
  EXPECT_EQ(r.reserved_at_peak_bytes, 2736);
  EXPECT_NEAR(r.peak_time_s, 30e-6, 1e-12);
  EXPECT_EQ(r.peak_moment, "torch::autograd::AccumulateGrad::apply < backward (torch/_tensor.py:5) < train (job.py:7)");
  EXPECT_EQ(r.history_events, 8u);
  EXPECT_TRUE(r.warnings.empty());
}

TEST(TraceSnapshot, WhatWasAliveAtThePeakIsGroupedByThePlannersCategories) {
  const SnapshotReport r = analyse_snapshot_text(kSnapshot, "snap");
  EXPECT_EQ(bytes_of(r, "activations"), 500);
  EXPECT_EQ(bytes_of(r, "weights"), 400);
  EXPECT_EQ(bytes_of(r, "gradients"), 100);
  EXPECT_EQ(bytes_of(r, "optimizer_states"), -1);  // made after the peak
  EXPECT_EQ(bytes_of(r, "cached_free"), 2736 - 1000);
  std::int64_t total = 0;
  for (const auto& t : r.breakdown) total += t.bytes;
  EXPECT_EQ(total, r.reserved_at_peak_bytes);
  ASSERT_EQ(r.top_stacks.size(), 3u);
  EXPECT_EQ(r.top_stacks[0].bytes, 500);
  EXPECT_EQ(r.top_stacks[0].blocks, 2u);
  EXPECT_EQ(r.top_stacks[0].category, "activations");
}

TEST(TraceSnapshot, FragmentationIsOfTheCachedFreeMemoryAtTheDump) {
  const SnapshotReport r = analyse_snapshot_text(kSnapshot, "snap");
  EXPECT_EQ(r.free_cached_bytes, 2736 - 650);
  EXPECT_EQ(r.largest_free_block_bytes, 924);
  EXPECT_NEAR(r.fragmentation, 1.0 - 924.0 / (800 + 924 + 362), 1e-12);
}

TEST(TraceSnapshot, CategoriesComeFromTheStacks) {
  EXPECT_EQ(snapshot_category(""), "untracked");
  EXPECT_EQ(snapshot_category("_single_tensor_adamw (optim/adamw.py:1)"), "optimizer_states");
  EXPECT_EQ(snapshot_category("cross_entropy (nn/functional.py:3) < forward (qwen2.py:9)"), "logits_and_loss");
  EXPECT_EQ(snapshot_category("forward (qwen2.py:9)"), "activations");
  EXPECT_EQ(snapshot_category("getCurrentCUDABlasHandle < cublasLtMatmul"), "cublas_workspace");
  EXPECT_EQ(snapshot_category("update_layer (peft/tuners/lora/layer.py:1)"), "adapters");
  EXPECT_EQ(snapshot_category("somewhere (job.py:1)"), "transient");
  // The backward pass's C++ frames (autograd's threads have no Python ones).
  EXPECT_EQ(snapshot_category("torch::autograd::generated::LogSoftmaxBackward0::apply (??:0)"), "logits_and_loss");
  EXPECT_EQ(snapshot_category("at::native::mm (??:0) < torch::autograd::generated::MmBackward0::apply (??:0)"),
            "backward_buffers");
  EXPECT_EQ(snapshot_category("torch::autograd::AccumulateGrad::apply (??:0)"), "gradients");
}

// The event that reached the peak has no frames (the allocator's segment for it, say): the moment
// is the nearest allocation before it that has them, not an empty line.
TEST(TraceSnapshot, APeakReachedByAnEventWithoutFramesTakesTheMomentBeforeIt) {
  const SnapshotReport r = analyse_snapshot_text(
      R"json({"schema": "trainfit.snapshot/1", "stacks": ["forward (qwen2.py:9)"],
          "segments": [{"address": 0, "total_size": 64, "blocks": [{"address": 0, "size": 64, "state": "inactive", "stack": -1}]}],
          "history": [["alloc", 0, 16, 0, 10], ["alloc", 16, 48, -1, 20], ["free_completed", 0, 16, -1, 30],
                      ["free_completed", 16, 48, -1, 40]]})json",
      "snap");
  EXPECT_EQ(r.peak_allocated_bytes, 64);
  EXPECT_EQ(r.peak_moment, "forward (qwen2.py:9)");
}

TEST(TraceSnapshot, BadSnapshotsAreInputErrors) {
  for (const std::string& bad :
       {std::string("not json"), std::string("{}"), std::string(R"({"schema": "other/1"})"),
        std::string(R"({"schema": "trainfit.snapshot/1", "stacks": [], "history": [["alloc", 1, 8, 5, 0]]})"),
        std::string(R"({"schema": "trainfit.snapshot/1", "history": [["alloc", 1, -8]]})"),
        std::string(R"({"schema": "trainfit.snapshot/1", "history": [["alloc"]]})"),
        std::string(R"({"schema": "trainfit.snapshot/1", "segments": [{"blocks": [{"size": "big"}]}]})")})
    EXPECT_THROW(analyse_snapshot_text(bad, "bad"), trainfit::InputError) << bad;
  EXPECT_THROW(analyse_snapshot("/nonexistent/snap.json"), trainfit::InputError);
}

TEST(TraceSnapshot, WithoutHistoryThePeakIsTheDumpAndSaysSo) {
  const SnapshotReport r = analyse_snapshot_text(
      R"({"schema": "trainfit.snapshot/1", "segments": [{"address": 0, "total_size": 64, "blocks": [{"address": 0, "size": 48, "state": "active_allocated", "stack": -1}]}]})",
      "dump");
  EXPECT_EQ(r.peak_allocated_bytes, 48);
  EXPECT_EQ(bytes_of(r, "untracked"), 48);
  ASSERT_FALSE(r.warnings.empty());
}

// A 100 MiB segment with two 20 MiB holes between blocks in use, and a 2 MiB segment of the small
// pool with 1.5 MiB free: a 30 MiB request fails though 41.5 MiB are cached free. The holes are
// what the allocator could not use: fragmentation, named, with the largest block of the large pool
// (the small pool's free space cannot serve a request over 1 MiB).
TEST(TraceSnapshot, AnOutOfMemoryErrorInPiecesIsNamedFragmentation) {
  const SnapshotReport r = analyse_snapshot_text(
      R"json({"schema": "trainfit.snapshot/1", "stacks": ["forward (m.py:1)", "step (optim/adamw.py:2)"],
          "segments": [{"address": 0, "total_size": 104857600, "blocks": [
              {"address": 0, "size": 20971520, "state": "active_allocated", "stack": 1},
              {"address": 20971520, "size": 20971520, "state": "inactive", "stack": -1},
              {"address": 41943040, "size": 20971520, "state": "active_allocated", "stack": 0},
              {"address": 62914560, "size": 20971520, "state": "inactive", "stack": -1},
              {"address": 83886080, "size": 20971520, "state": "active_allocated", "stack": 0}]},
            {"address": 209715200, "total_size": 2097152, "blocks": [
              {"address": 209715200, "size": 524288, "state": "active_allocated", "stack": 0},
              {"address": 210239488, "size": 1572864, "state": "inactive", "stack": -1}]}],
          "history": [["alloc", 0, 20971520, 1, 10], ["alloc", 20971520, 20971520, 0, 20],
                      ["alloc", 41943040, 20971520, 0, 30], ["alloc", 62914560, 20971520, 0, 40],
                      ["alloc", 83886080, 20971520, 0, 50], ["alloc", 209715200, 524288, 0, 55],
                      ["free_completed", 20971520, 20971520, 0, 60], ["free_completed", 62914560, 20971520, 0, 70],
                      ["oom", 0, 31457280, 0, 1000010]]})json",
      "frag");
  ASSERT_TRUE(r.oom.has_value());
  EXPECT_EQ(r.oom->requested_bytes, 31457280);
  EXPECT_EQ(r.oom->segment_request_bytes, 31457280);
  EXPECT_EQ(r.oom->allocated_bytes, 3 * 20971520 + 524288);
  EXPECT_EQ(r.oom->reserved_bytes, 104857600 + 2097152);
  EXPECT_EQ(r.oom->cached_free_bytes, 2 * 20971520 + 1572864);
  EXPECT_EQ(r.oom->largest_free_block_bytes, 20971520);
  EXPECT_TRUE(r.oom->fragmentation);
  EXPECT_FALSE(r.oom->device_free_bytes.has_value());  // the JSON rendering keeps none
  EXPECT_DOUBLE_EQ(r.oom->time_s, 1.0);
  EXPECT_EQ(r.oom->moment, "forward (m.py:1)");
  const std::string text = render_snapshot(r, nullptr, trainfit::Format::table);
  EXPECT_NE(text.find("fragmentation: the allocator held 41.5 MiB free"), std::string::npos) << text;
}

// Dumped in an `except` after the step's tensors were freed: the state at the error is rebuilt by
// undoing what came after it, block by block, segment by segment.
TEST(TraceSnapshot, TheStateAtTheErrorUndoesWhatCameAfterIt) {
  const SnapshotReport r = analyse_snapshot_text(
      R"json({"schema": "trainfit.snapshot/1", "stacks": ["forward (m.py:1)"],
          "segments": [{"address": 0, "total_size": 41943040, "blocks": [
              {"address": 0, "size": 41943040, "state": "inactive", "stack": -1}]}],
          "history": [["segment_alloc", 0, 41943040, 0, 0], ["alloc", 0, 20971520, 0, 10],
                      ["alloc", 20971520, 10485760, 0, 20], ["oom", 0, 31457280, 0, 30],
                      ["free_completed", 0, 20971520, -1, 40], ["free_completed", 20971520, 10485760, -1, 50],
                      ["segment_alloc", 104857600, 20971520, -1, 60], ["segment_free", 104857600, 20971520, -1, 70]]})json",
      "after");
  ASSERT_TRUE(r.oom.has_value());
  EXPECT_EQ(r.oom->allocated_bytes, 31457280);
  EXPECT_EQ(r.oom->segment_request_bytes, 31457280);
  EXPECT_EQ(r.oom->reserved_bytes, 41943040);
  EXPECT_EQ(r.oom->largest_free_block_bytes, 10485760);
  EXPECT_FALSE(r.oom->fragmentation);  // 10 MiB free, 30 MiB asked
  EXPECT_EQ(r.oom->breakdown.front().category, "activations");
  EXPECT_EQ(r.oom->breakdown.front().bytes, 31457280);
}

// The segment PyTorch's message names ("Tried to allocate"): the allocator's own sizes.
TEST(TraceSnapshot, TheSegmentAskedForIsTheAllocatorsSize) {
  const auto segment_for = [](std::int64_t request) {
    const SnapshotReport r = analyse_snapshot_text(
        R"({"schema": "trainfit.snapshot/1", "history": [["oom", 0, )" + std::to_string(request) + R"(, -1, 0]]})",
        "seg");
    return r.oom->segment_request_bytes;
  };
  EXPECT_EQ(segment_for(512), 2 << 20);                    // the small pool's 2 MiB
  EXPECT_EQ(segment_for(1 << 20), 2 << 20);
  EXPECT_EQ(segment_for((1 << 20) + 512), 20 << 20);       // a large block under 10 MiB: 20 MiB
  EXPECT_EQ(segment_for((10 << 20) + 512), 12 << 20);      // else rounded up to 2 MiB
}

}  // namespace
