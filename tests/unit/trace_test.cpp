// `trainfit trace` on Kineto traces: the streaming splitter, the reader's numbers and categories,
// the figures of synthetic timelines whose answer is known, the verdicts, and bad input.
#include "trainfit/trace.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "support/synthetic_trace.hpp"
#include "trace/json_stream.hpp"
#include "trace/trace_data.hpp"
#include "trainfit/error.hpp"

namespace {

using namespace trainfit::trace;
using trainfit::Bottleneck;
using trainfit::testing::synthetic_trace_text;
using trainfit::testing::SyntheticKernel;
using trainfit::testing::SyntheticStepFigures;
using trainfit::testing::SyntheticTrace;

std::filesystem::path scratch(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("trainfit_trace_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir / name;
}

void write_file(const std::filesystem::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

void write_gzip(const std::filesystem::path& p, const std::string& text) {
  gzFile f = gzopen(p.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, text.data(), static_cast<unsigned>(text.size())), static_cast<int>(text.size()));
  gzclose(f);
}

TEST(TraceNumbers, MicrosecondsBecomeExactNanoseconds) {
  std::int64_t ns = 0;
  ASSERT_TRUE(detail::microseconds_to_ns("1700000000123456.789", ns));
  EXPECT_EQ(ns, 1700000000123456789);
  ASSERT_TRUE(detail::microseconds_to_ns("12", ns));
  EXPECT_EQ(ns, 12000);
  ASSERT_TRUE(detail::microseconds_to_ns("0.5 ", ns));
  EXPECT_EQ(ns, 500);
  ASSERT_TRUE(detail::microseconds_to_ns("1.5e3", ns));
  EXPECT_EQ(ns, 1500000);
  EXPECT_FALSE(detail::microseconds_to_ns("\"12\"", ns));
  EXPECT_FALSE(detail::microseconds_to_ns("1e300", ns));
  // Eight digits are read at a time, past the token's end where the text allows: every length of
  // the whole and the fraction, and what follows the token, against the digits one by one.
  std::mt19937 rng(3);
  for (int k = 0; k < 20000; ++k) {
    const int whole = 1 + static_cast<int>(rng() % 16), fraction = static_cast<int>(rng() % 7);
    std::string token = rng() % 8 == 0 ? "-" : "";
    std::int64_t us = 0, frac = 0;
    for (int d = 0; d < whole; ++d) {
      const int digit = whole == 16 && d == 0 ? 1 : static_cast<int>(rng() % 10);  // 16 digits: before 2262
      token += static_cast<char>('0' + digit);
      us = us * 10 + digit;
    }
    if (fraction > 0 || rng() % 4 == 0) token += '.';
    for (int d = 0; d < fraction; ++d) {
      const int digit = static_cast<int>(rng() % 10);
      token += static_cast<char>('0' + digit);
      if (d < 3) frac += digit * (d == 0 ? 100 : d == 1 ? 10 : 1);
    }
    const std::string text = token + std::string(", 12345678\"").substr(0, rng() % 12);
    std::int64_t got = 0;
    ASSERT_TRUE(
        detail::microseconds_to_ns(std::string_view(text).substr(0, token.size()), got, text.size() - token.size()))
        << text;
    EXPECT_EQ(got, (token[0] == '-' ? -1 : 1) * (us * 1000 + frac)) << text;
  }
  EXPECT_FALSE(detail::microseconds_to_ns(std::string_view("12a4567890").substr(0, 3), ns, 7));
  ASSERT_TRUE(detail::microseconds_to_ns(std::string_view("1234567890").substr(0, 3), ns, 7));
  EXPECT_EQ(ns, 123000);  // the digits after the token are not the token's
  // In a trace: durations exact beside epoch timestamps with decimals.
  const RankTrace r = analyse_trace_text(
      R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "ts": 1700000000123456.789, "dur": 10.5},
                          {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "ts": 1700000000123500, "dur": 2}]})",
      "numbers");
  EXPECT_NEAR(r.total.gpu_busy_s, 12.5e-6, 1e-15);
  EXPECT_NEAR(r.total.wall_s, static_cast<double>(1700000000123502000 - 1700000000123456789) * 1e-9, 1e-15);
}

// The steps are the ProfilerStep#N annotations and nothing else, however the host's names fall in
// the cache of names met lately: a step's name that fell in the slot of another name once made that
// name's later calls steps (HTA's test trace of 2023, negative_queue_length_values_check/rank0, read
// 21 steps for its 5, 16 of them `aten::exp_`). A thousand names fill most of the cache's slots, so
// that most of the forty steps' names fall where one of them is.
TEST(TraceAnalysis, OnlyStepAnnotationsAreSteps) {
  std::string text = R"({"traceEvents": [)";
  std::int64_t ts = 1000;
  for (int step = 0; step < 40; ++step) {
    text += fmt::format(R"({}{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{}", "pid": 1, "tid": 1, )"
                        R"("ts": {}, "dur": 5000}})",
                        step == 0 ? "" : ",\n", step, ts);
    for (int k = 0; k < 1000; ++k)
      text += fmt::format(R"(,{{"ph": "X", "cat": "cpu_op", "name": "aten::op_{}", "pid": 1, "tid": 1, "ts": {}, )"
                          R"("dur": 1}})",
                          k, ts + 1 + k * 4);
    ts += 5000;
  }
  text += "]}";
  const RankTrace r = analyse_trace_text(text, "names");
  ASSERT_EQ(r.steps.size(), 40u);
  for (std::size_t k = 0; k < r.steps.size(); ++k) EXPECT_EQ(r.steps[k].name, fmt::format("ProfilerStep#{}", k));
}

TEST(TraceCategories, KernelNamesMapToTheTimeModelsTerms) {
  EXPECT_EQ(classify_activity("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "kernel"),
            KernelCategory::matmul);
  EXPECT_EQ(classify_activity("nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_TNT", "kernel"), KernelCategory::matmul);
  EXPECT_EQ(classify_activity("pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128>>", "kernel"),
            KernelCategory::attention);
  EXPECT_EQ(classify_activity("cudnn_generated_fort_native_sdpa_sm90_knob_7", "kernel"), KernelCategory::attention);
  EXPECT_EQ(classify_activity("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "kernel"), KernelCategory::communication);
  // A copy's kernel names its C++ lambda: not the LAMB optimizer (a LoRA step's casts were called optimizer).
  EXPECT_EQ(classify_activity("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda("
                              "at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda(float)#1}>",
                              "kernel"),
            KernelCategory::elementwise);
  EXPECT_EQ(classify_activity("void multi_tensor_apply_kernel<LAMBStage1Functor<float>>", "kernel"),
            KernelCategory::optimizer);
  EXPECT_EQ(classify_activity("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor>",
                              "kernel"),
            KernelCategory::optimizer);
  EXPECT_EQ(classify_activity("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>",
                              "kernel"),
            KernelCategory::elementwise);
  // cuDNN's convolutions (names from the V100 and A100 traces of Holistic Trace Analysis's tests)
  // are matrix multiplies; its batch norms and layout transforms, and casts ("convert"), are not.
  for (const char* conv : {"void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int, int, int)",
                           "void cudnn::detail::wgrad_alg0_engine<float, 128, 5, 5, 3, 3, 3, false, 512>(int)",
                           "cudnn_infer_volta_scudnn_128x64_relu_medium_nn_v1", "volta_scudnn_128x64_relu_small_nn_v1",
                           "volta_fp16_s884cudnn_fp16_256x128_ldg8_relu_f2f_exp_small_nhwc2nchw_tn_v1",
                           "turing_h1688cudnn_256x64_sliced1x2_ldg8_relu_exp_small_nhwc_tn_v1",
                           "void cudnn::detail::convolve_common_engine_float_NHWC<float, float, 3, 5>(int)",
                           "void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>(int)"})
    EXPECT_EQ(classify_activity(conv, "kernel"), KernelCategory::matmul) << conv;
  // ROCm's Tensile GEMMs (an MI250's trace); FBGEMM's embedding kernels, whose namespace says "gemm"
  // (a DLRM's), are not GEMMs, and its fused backward with Adagrad is the optimizer.
  EXPECT_EQ(classify_activity("Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_LDSB0", "kernel"),
            KernelCategory::matmul);
  EXPECT_EQ(
      classify_activity("void fbgemm_gpu::permute_2D_data_kernel<false, int, int, decltype(nullptr)>(int)", "kernel"),
      KernelCategory::elementwise);
  EXPECT_EQ(classify_activity("void split_embedding_codegen_forward_unweighted_kernel<c10::Half, float, "
                              "fbgemm_gpu::PlacementType>(int)",
                              "kernel"),
            KernelCategory::elementwise);
  EXPECT_EQ(classify_activity("void split_embedding_backward_codegen_rowwise_adagrad_unweighted_kernel_cta_per_row_1<"
                              "c10::Half, fbgemm_gpu::PlacementType>(int)",
                              "kernel"),
            KernelCategory::optimizer);
  EXPECT_EQ(
      classify_activity("void fbgemm_gpu::f8f8bf16_rowwise_kernel<cutlass::gemm::GemmShape<128, 128, 64>>", "kernel"),
      KernelCategory::matmul);  // a GEMM of FBGEMM's is CUTLASS's
  for (const char* other : {"void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 128, true, 1>(float)",
                            "void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true>(int)",
                            "void at::native::unrolled_elementwise_kernel<convert_fp32_to_bf16>(int)"})
    EXPECT_EQ(classify_activity(other, "kernel"), KernelCategory::elementwise) << other;
  EXPECT_EQ(classify_activity("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy"), KernelCategory::copy_h2d);
  EXPECT_EQ(classify_activity("Memcpy DtoH (Device -> Pinned)", "gpu_memcpy"), KernelCategory::copy_d2h);
  EXPECT_EQ(classify_activity("Memset (Device)", "gpu_memset"), KernelCategory::copy_d2d);
}

// Every way of cutting the text into chunks gives the same events, strings with quotes, braces
// and escapes inside included.
TEST(TraceSplitter, EventsAreTheSameWhereverTheChunksEnd) {
  const std::string text =
      R"({"a": {"x": [1, "}"]}, "traceEvents": [{"name": "q\"{[", "ph": "X"}, {"n": "\\"}, {"v": {"w": [{}]}}], "b": 7,)"
      R"( "deviceProperties": [{"id": 0, "name": "H\u0032"}]})";
  std::vector<std::string> whole_events, whole_members;
  {
    detail::TraceSplitter s([&](std::string_view e, const detail::EventShape&) { whole_events.emplace_back(e); },
                            [&](std::string_view k, std::string_view v) {
                              whole_members.push_back(std::string(k) + "=" + std::string(v));
                            });
    s.feed(text);
    EXPECT_TRUE(s.complete());
  }
  ASSERT_EQ(whole_events.size(), 3u);
  EXPECT_EQ(whole_events[0], R"({"name": "q\"{[", "ph": "X"})");
  EXPECT_EQ(whole_events[2], R"({"v": {"w": [{}]}})");
  ASSERT_EQ(whole_members.size(), 3u);
  EXPECT_EQ(whole_members[0], R"(a={"x": [1, "}"]})");
  EXPECT_EQ(whole_members[1], "b=7");
  for (std::size_t chunk = 1; chunk < 12; ++chunk) {
    std::vector<std::string> events, members;
    detail::TraceSplitter s(
        [&](std::string_view e, const detail::EventShape&) { events.emplace_back(e); },
        [&](std::string_view k, std::string_view v) { members.push_back(std::string(k) + "=" + std::string(v)); });
    for (std::size_t at = 0; at < text.size(); at += chunk) s.feed(std::string_view(text).substr(at, chunk));
    EXPECT_TRUE(s.complete());
    EXPECT_EQ(events, whole_events) << chunk;
    EXPECT_EQ(members, whole_members) << chunk;
  }
}

// The splitter classifies 64 bytes at a time and carries the string state from block to block and
// chunk to chunk: events full of what that can get wrong (runs of backslashes of every length,
// escaped quotes, brackets inside strings, strings across a block's or a chunk's edge), cut into
// chunks of random sizes, come out exactly as they went in.
TEST(TraceSplitter, BlocksAndChunksNeverCutAStringWrong) {
  std::mt19937 rng(12);
  const auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  const auto string_of = [&] {
    std::string s = "\"";
    const int length = pick(90);
    for (int k = 0; k < length; ++k) {
      switch (pick(8)) {
        case 0:
          s.append(static_cast<std::size_t>(2 * pick(4)), '\\');  // escaped backslashes, then maybe a quote
          if (pick(2) == 0) s += "\\\"";
          break;
        case 1:
          s += "{[";
          break;
        case 2:
          s += "]}";
          break;
        case 3:
          s += "\\\"";
          break;
        case 4:
          s += "\\u00e9";
          break;
        default:
          s += static_cast<char>('a' + pick(26));
      }
    }
    return s + "\"";
  };
  std::vector<std::string> want;
  std::string text = R"({"schemaVersion": 1, "traceEvents": [)";
  for (int e = 0; e < 400; ++e) {
    std::string event = "{\"name\": " + string_of() + ", \"args\": {";
    const int args = pick(5);
    for (int a = 0; a < args; ++a)
      event += (a ? ", " : "") + string_of() + ": " + (pick(2) ? string_of() : "[1, {\"x\": " + string_of() + "}]");
    event += "}}";
    text += e ? ",\n  " : "\n  ";
    text.append(static_cast<std::size_t>(pick(70)), ' ');  // events start anywhere in a block
    text += event;
    want.push_back(event);
  }
  text += "\n], \"after\": " + string_of() + "}";
  const detail::BlockScan widest = detail::block_scan();
  for (int round = 0; round < 50; ++round) {
    // Every width this CPU has, each on chunks of every size range.
    const auto scan = static_cast<detail::BlockScan>(round % 5);
    if (!detail::use_block_scan(scan)) continue;
    std::vector<std::string> got, members;
    detail::TraceSplitter s([&](std::string_view e, const detail::EventShape&) { got.emplace_back(e); },
                            [&](std::string_view k, std::string_view) { members.emplace_back(k); });
    for (std::size_t at = 0; at < text.size();) {
      const std::size_t chunk = round < 5 ? text.size() : 1 + static_cast<std::size_t>(pick(round < 25 ? 200 : 5000));
      s.feed(std::string_view(text).substr(at, chunk));
      at += chunk;
    }
    EXPECT_TRUE(s.complete()) << round;
    ASSERT_EQ(got.size(), want.size()) << round;
    for (std::size_t k = 0; k < want.size(); ++k) ASSERT_EQ(got[k], want[k]) << round << " " << k;
    EXPECT_EQ(members, std::vector<std::string>({"schemaVersion", "after"})) << round;
  }
  EXPECT_TRUE(detail::use_block_scan(widest));
}

// Text that is not JSON (a backslash outside a string, unbalanced quotes and brackets) splits the
// same at every width and wherever the chunks end: as the byte-by-byte reading (the scalar width)
// splits it, or fails at the same byte.
TEST(TraceSplitter, TextThatIsNotJsonSplitsTheSameAtEveryWidth) {
  std::mt19937 rng(5);
  const detail::BlockScan widest = detail::block_scan();
  const std::string_view alphabet = "{}[]\"\"\"\\\\,,  :ab\n\xc3\xa9\x01";
  const auto split = [](const std::string& text, std::size_t chunk) {
    std::string out;
    detail::TraceSplitter s(
        [&](std::string_view e, const detail::EventShape& shape) {
          out += "E" + std::string(e) + (shape.plain ? "|p" : "|n") + std::to_string(shape.last_nested_open) + "," +
                 std::to_string(shape.last_nested_close) + "\n";
        },
        [&](std::string_view k, std::string_view v) { out += "M" + std::string(k) + "=" + std::string(v) + "\n"; });
    try {
      for (std::size_t at = 0; at < text.size(); at += chunk) s.feed(std::string_view(text).substr(at, chunk));
      out += s.complete() ? "complete" : "open";
    } catch (const trainfit::InputError& e) {
      out += e.what();
    }
    return out;
  };
  for (int round = 0; round < 300; ++round) {
    std::string text = R"({"a": 1, "traceEvents": [{"x": "y"}, )";
    const int length = 50 + static_cast<int>(rng() % 600);
    for (int k = 0; k < length; ++k) text += alphabet[rng() % alphabet.size()];
    ASSERT_TRUE(detail::use_block_scan(detail::BlockScan::scalar));
    const std::string want = split(text, text.size());
    for (int w = 0; w < 5; ++w) {
      if (!detail::use_block_scan(static_cast<detail::BlockScan>(w))) continue;
      for (const std::size_t chunk : {text.size(), std::size_t{1} + rng() % 100}) {
        // Which blocks a neighbour's non-ASCII byte marks depends on where the blocks fall: compare
        // the pieces and positions, and plainness only where the whole text is fed at once.
        std::string got = split(text, chunk), expected = want;
        if (chunk != text.size() || w == 0) {
          for (std::string* t : {&got, &expected})
            for (std::size_t at = t->find("|p"); at != std::string::npos; at = t->find("|p", at)) (*t)[at + 1] = 'n';
        }
        ASSERT_EQ(got, expected) << "width " << w << ", chunks of " << chunk << ":\n" << text;
      }
    }
  }
  EXPECT_TRUE(detail::use_block_scan(widest));
}

TEST(TraceSplitter, RefusesWhatCannotBeATrace) {
  for (const std::string_view bad : {"hello", R"({"traceEvents": [1, 2]})", R"({"traceEvents" 1})", R"({5: 1})"}) {
    detail::TraceSplitter s([](std::string_view, const detail::EventShape&) {},
                            [](std::string_view, std::string_view) {});
    EXPECT_THROW(s.feed(bad), trainfit::InputError) << bad;
  }
}

void expect_figures(const RankTrace& r, const std::vector<SyntheticStepFigures>& want) {
  ASSERT_EQ(r.steps.size(), want.size());
  for (std::size_t k = 0; k < want.size(); ++k) {
    EXPECT_NEAR(r.steps[k].wall_s, want[k].wall_s, 1e-9) << k;
    EXPECT_NEAR(r.steps[k].gpu_busy_s, want[k].gpu_busy_s, 1e-9) << k;
    EXPECT_NEAR(r.steps[k].idle_s, want[k].wall_s - want[k].gpu_busy_s, 1e-9) << k;
    EXPECT_NEAR(r.steps[k].input_wait_s, want[k].input_wait_s, 1e-9) << k;
    EXPECT_NEAR(r.steps[k].communication_s, want[k].communication_s, 1e-9) << k;
    EXPECT_NEAR(r.steps[k].idle_s, r.steps[k].input_wait_s + r.steps[k].sync_wait_s + r.steps[k].host_wait_s, 1e-9);
  }
}

TEST(TraceAnalysis, ComputeBoundStepsHaveTheTimelinesFigures) {
  SyntheticTrace t;
  t.kernels = {{"sm90_xmma_gemm_bf16bf16_bf16f32", "kernel", 300},
               {"void at::native::vectorized_elementwise_kernel<4>", "kernel", 40}};
  std::vector<SyntheticStepFigures> want;
  const RankTrace r = analyse_trace_text(synthetic_trace_text(t, &want), "compute");
  expect_figures(r, want);
  EXPECT_EQ(r.steps[0].name, "ProfilerStep#1");
  EXPECT_EQ(r.rank, 0);
  EXPECT_EQ(r.device, 0);
  EXPECT_EQ(r.device_name, "NVIDIA H200");
  EXPECT_EQ(r.steps[0].kernels, 20u);
  EXPECT_NEAR(r.steps[0].categories[0], 10 * 300e-6, 1e-9);  // matmul
  EXPECT_NEAR(r.steps[0].categories[2], 10 * 40e-6, 1e-9);   // elementwise
  EXPECT_EQ(r.total.verdict, Bottleneck::compute) << r.total.evidence;
  ASSERT_FALSE(r.kernels_top.empty());
  EXPECT_EQ(r.kernels_top[0].name, "sm90_xmma_gemm_bf16bf16_bf16f32");
  EXPECT_EQ(r.kernels_top[0].count, 30u);
  EXPECT_TRUE(r.warnings.empty()) << r.warnings.front();
}

// The run's verdict, with its evidence, for steps of these kernels.
std::pair<std::optional<Bottleneck>, std::string> verdict_of(std::vector<SyntheticKernel> kernels) {
  SyntheticTrace t;
  t.kernels = std::move(kernels);
  const RankTrace r = analyse_trace_text(synthetic_trace_text(t), "verdict");
  return {r.total.verdict, r.total.evidence};
}

TEST(TraceAnalysis, ElementwiseStepsAreMemoryBandwidthBound) {
  const auto [verdict, evidence] =
      verdict_of({{"void at::native::reduce_kernel<512, 1>", "kernel", 200}, {"gemv2T_kernel", "kernel", 30}});
  EXPECT_EQ(verdict, Bottleneck::memory_bandwidth) << evidence;
}

TEST(TraceAnalysis, ShortKernelsLaunchedSlowlyAreLaunchBound) {
  SyntheticTrace t;
  t.kernels = {{"void at::native::vectorized_elementwise_kernel<4>", "kernel", 3}};
  t.repeats = 200;
  t.launch_gap_us = 25;
  std::vector<SyntheticStepFigures> want;
  const RankTrace r = analyse_trace_text(synthetic_trace_text(t, &want), "launch");
  expect_figures(r, want);
  EXPECT_EQ(r.total.verdict, Bottleneck::launch_overhead) << r.total.evidence;
  EXPECT_NEAR(r.total.kernel_median_s, 3e-6, 1e-12);
  EXPECT_NEAR(r.total.launch_gap_median_s, 25e-6, 1e-12);
  EXPECT_GT(r.total.host_wait_s, 0.8 * r.total.idle_s);
}

// The GPU's idle time, by what the host was doing in it. A step of 10 ms: a kernel over [0, 1) ms,
// then the host in Python until 2 ms, then 4 ms in a cudaMemcpyAsync from pageable memory (CUDA
// makes it wait: the GPU idles through it), the copy and a kernel over [6, 7) ms, then a
// cudaStreamSynchronize from 7 ms that the GPU idles through to the step's end. The copy's 4 ms and
// the synchronisation's 3 ms are waits in CUDA; the 1 ms before the copy began is the host's.
TEST(TraceAnalysis, IdleTimeInsideABlockingCopyIsASynchronisation) {
  const std::string text = R"json({"traceEvents": [
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 10000},
    {"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm", "pid": 0, "tid": 7, "ts": 0, "dur": 1000},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1, "ts": 2000, "dur": 4000},
    {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 7, "ts": 6000, "dur": 500},
    {"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm", "pid": 0, "tid": 7, "ts": 6500, "dur": 500},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 1, "tid": 1, "ts": 7000, "dur": 3000}
  ]})json";
  const RankTrace r = analyse_trace_text(text, "copy");
  ASSERT_EQ(r.steps.size(), 1u);
  const StepTrace& s = r.steps[0];
  EXPECT_NEAR(s.gpu_busy_s, 2e-3, 1e-12);
  EXPECT_NEAR(s.sync_wait_s, 7e-3, 1e-12);
  EXPECT_NEAR(s.host_wait_s, 1e-3, 1e-12);
  EXPECT_NEAR(s.input_wait_s, 0, 1e-12);
  EXPECT_EQ(s.verdict, Bottleneck::launch_overhead) << s.evidence;
  EXPECT_NE(s.evidence.find("70% in synchronisations"), std::string::npos) << s.evidence;
}

// The run is judged on its sums; where its steps differ, its evidence says how many steps and how
// much of the time each verdict holds: the recorded loader-workers job, two steps waiting for their
// batches and one that the host set the pace of. Steps of one verdict (the toy model's) add nothing.
TEST(TraceAnalysis, ARunOfMixedStepsSaysHowTheyDivide) {
  const std::string data = std::string(TRAINFIT_SOURCE_DIR) + "/data/trace/";
  const RankTrace workers = analyse_trace(data + "workers/trace.json.gz").ranks.at(0);
  ASSERT_EQ(workers.steps.size(), 3u);
  EXPECT_NE(workers.total.evidence.find("; the steps: input-pipeline 2 of 3 ("), std::string::npos)
      << workers.total.evidence;
  EXPECT_NE(workers.total.evidence.find("launch-overhead 1 of 3 ("), std::string::npos) << workers.total.evidence;
  const RankTrace host = analyse_trace(data + "host/trace.json.gz").ranks.at(0);
  EXPECT_EQ(host.total.evidence.find("the steps:"), std::string::npos) << host.total.evidence;
}

TEST(TraceAnalysis, AWaitForTheLoaderIsTheInputPipeline) {
  SyntheticTrace t;
  t.loader_us = 30000;
  std::vector<SyntheticStepFigures> want;
  const RankTrace r = analyse_trace_text(synthetic_trace_text(t, &want), "input");
  expect_figures(r, want);
  EXPECT_GT(r.total.input_wait_s, 0);
  EXPECT_EQ(r.total.verdict, Bottleneck::input_pipeline) << r.total.evidence;
  for (const StepTrace& s : r.steps) EXPECT_EQ(s.verdict, Bottleneck::input_pipeline);
}

// A launch-bound step that also waits for its batch, a third as long as the host's idle time: a
// fetch in the training process adds to the step, and the host is the larger part; batches from
// worker processes arrive beside the step, and the wait is what they fall short of it by: the
// loader sets the pace.
TEST(TraceAnalysis, AWaitForLoaderWorkersIsTheInputPipelineWhateverTheHostsShare) {
  SyntheticTrace t;
  t.kernels = {{"void at::native::vectorized_elementwise_kernel<4>", "kernel", 3}};
  t.repeats = 200;
  t.launch_gap_us = 25;
  t.loader_us = 2000;
  std::vector<SyntheticStepFigures> want;
  const RankTrace in_process = analyse_trace_text(synthetic_trace_text(t, &want), "in process");
  expect_figures(in_process, want);
  ASSERT_GE(in_process.total.input_wait_s, 0.2 * in_process.total.wall_s);
  ASSERT_LT(in_process.total.input_wait_s, in_process.total.host_wait_s);
  EXPECT_EQ(in_process.total.verdict, Bottleneck::launch_overhead) << in_process.total.evidence;
  t.loader_workers = true;
  const RankTrace workers = analyse_trace_text(synthetic_trace_text(t, &want), "workers");
  expect_figures(workers, want);
  EXPECT_EQ(workers.total.verdict, Bottleneck::input_pipeline) << workers.total.evidence;
  EXPECT_NE(workers.total.evidence.find("worker processes"), std::string::npos) << workers.total.evidence;
}

TEST(TraceAnalysis, ExposedCollectivesAreCommunicationAndOverlapIsMeasured) {
  SyntheticTrace t;
  t.collective_us = 8000;  // far longer than the step's compute: mostly exposed
  t.collective_start = 0.9;
  std::vector<SyntheticStepFigures> want;
  const RankTrace r = analyse_trace_text(synthetic_trace_text(t, &want), "comm");
  expect_figures(r, want);
  EXPECT_EQ(r.total.verdict, Bottleneck::communication) << r.total.evidence;
  EXPECT_GT(r.overlap_fraction, 0);
  EXPECT_LT(r.overlap_fraction, 0.2);
}

TEST(TraceAnalysis, HostToDeviceCopiesThatFillTheStepAreOffload) {
  const auto [verdict, evidence] =
      verdict_of({{"Memcpy HtoD (Pageable -> Device)", "gpu_memcpy", 400}, {"sm90_xmma_gemm", "kernel", 50}});
  EXPECT_EQ(verdict, Bottleneck::offload) << evidence;
}

TEST(TraceAnalysis, WithoutStepAnnotationsTheWholeTraceIsOneWindowAndSaysSo) {
  SyntheticTrace t;
  t.annotate_steps = false;
  const RankTrace r = analyse_trace_text(synthetic_trace_text(t), "plain");
  ASSERT_EQ(r.steps.size(), 1u);
  EXPECT_FALSE(r.step_annotations);
  EXPECT_EQ(r.steps[0].name, "whole trace");
  ASSERT_FALSE(r.warnings.empty());
  EXPECT_NE(r.warnings[0].find("whole trace is one window"), std::string::npos);
}

TEST(TraceAnalysis, MalformedAndUnknownEventsAreSkippedAndCounted) {
  const std::string text = R"({"traceEvents": [
    {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 100, "dur": 50, "args": {"device": 0}},
    {"ph": "X", "cat": "kernel", "name": "gemm", "ts": "late", "dur": 5},
    {"ph": "X", "cat": "kernel", "name": gemm},
    {"ph": "Q", "name": "a new kind"},
    {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 200, "dur": 50, "args": {"device": 0}}]})";
  const RankTrace r = analyse_trace_text(text, "mixed");
  EXPECT_EQ(r.counts.events, 5u);
  EXPECT_EQ(r.counts.malformed, 2u);
  EXPECT_EQ(r.counts.unsupported, 1u);
  EXPECT_EQ(r.counts.gpu_activities, 2u);
  ASSERT_EQ(r.steps.size(), 1u);
  EXPECT_NEAR(r.steps[0].gpu_busy_s, 100e-9 * 1000, 1e-12);
  bool said = false;
  for (const auto& w : r.warnings) said |= w.find("\"Q\"") != std::string::npos;
  EXPECT_TRUE(said);
}

// A GPU activity whose args.device is not a whole number is a field of the wrong type: malformed,
// as docs/trace.md says, not an activity of device -1 (before issue 39 it was counted as one).
TEST(TraceAnalysis, ADeviceOfTheWrongTypeIsMalformed) {
  const std::string text = R"({"traceEvents": [
    {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 100, "dur": 50, "args": {"device": 0}},
    {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 160, "dur": 50, "args": {"device": "zero"}},
    {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 220, "dur": 50, "args": {"device": 1.5}},
    {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 300, "dur": 50, "args": {"device": 0}}]})";
  const RankTrace r = analyse_trace_text(text, "device of the wrong type");
  EXPECT_EQ(r.counts.malformed, 2u);
  EXPECT_EQ(r.counts.gpu_activities, 2u);
  EXPECT_EQ(r.device, 0);
  for (const auto& w : r.warnings) EXPECT_EQ(w.find("devices"), std::string::npos) << w;  // one device, not two
}

// A file cut short before its GPU activities (Kineto writes them after the host's events) says it
// is cut, not that the trace was recorded without ProfilerActivity.CUDA.
TEST(TraceAnalysis, ATraceCutBeforeItsGpuEventsSaysItIsCut) {
  const std::string text = R"({"traceEvents": [
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 7, "tid": 7, "ts": 1000, "dur": 5000},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 7, "ts": 1100, "dur": 4000},
    {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 1200, "d)";
  const RankTrace r = analyse_trace_text(text, "cut");
  EXPECT_TRUE(r.truncated);
  EXPECT_EQ(r.total.evidence.find("ProfilerActivity.CUDA"), std::string::npos) << r.total.evidence;
  EXPECT_NE(r.total.evidence.find("cut short"), std::string::npos) << r.total.evidence;
  bool said = false;
  for (const auto& w : r.warnings) said |= w.find("the file is cut short") != std::string::npos;
  EXPECT_TRUE(said);
}

// Past 100,000 distinct kernel names the rest are summed as "(other kernels)", and a note says so.
TEST(TraceAnalysis, KernelNamesPastTheCapAreNamedInANote) {
  std::string text = R"({"traceEvents": [)";
  for (std::size_t i = 0; i < trainfit::trace::detail::kMaxKernelNames + 10; ++i)
    text += fmt::format(
        R"({}{{"ph": "X", "cat": "kernel", "name": "k{}", "pid": 0, "tid": 7, "ts": {}, "dur": 1, "args": {{"device": 0}}}})",
        i == 0 ? "" : ",", i, 10 + 2 * i);
  text += "]}";
  const RankTrace r = analyse_trace_text(text, "many kernels");
  bool said = false;
  for (const auto& w : r.warnings) said |= w.find("distinct kernel names") != std::string::npos;
  EXPECT_TRUE(said);
}

// Most events are read by the fast path, straight from the text; those with an escape in a field
// it reads, a non-ASCII byte, or fields in another order go to simdjson or the fast path's slower
// steps. The figures are the same whichever way an event went.
TEST(TraceAnalysis, EveryWayOfReadingAnEventGivesTheSameFigures) {
  const std::string text = R"({"traceEvents": [
    {"args": {"device": 0, "grid": [1, {"a": "}"}]}, "ph": "X", "name": "gemm", "cat": "kernel", "ts": 100, "dur": 50, "pid": 0},
    {"ph": "X", "cat": "kernel", "name": "gemm", "args": {"device": 0}, "ts": 200, "dur": 50},
    {"ph": "X", "cat": "kernel", "name": "ge\u006dm", "ts": 300, "dur": 50, "args": {"device": 0}},
    {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 400, "dur": 50, "args": {"x": "caf\u00e9", "device": 0}},
    {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 500, "dur": 50, "args": {"x": "café", "device": 0}},
    {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 600, "dur": 5e1, "args": {"device": 0}},
    {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 700, "dur": 50, "args": {"device": 0}, "tid": 7},
    {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 800, "dur": 50, "args": {"device": 0}, "ph": "i"}]})";
  const RankTrace r = analyse_trace_text(text, "mixed");
  EXPECT_EQ(r.counts.events, 8u);
  EXPECT_EQ(r.counts.malformed, 0u);
  EXPECT_EQ(r.counts.gpu_activities, 7u);  // the last one's second "ph" wins, as in simdjson
  ASSERT_EQ(r.steps.size(), 1u);
  EXPECT_NEAR(r.steps[0].gpu_busy_s, 7 * 50e-9 * 1000, 1e-12);
  ASSERT_EQ(r.kernels_top.size(), 1u);
  EXPECT_EQ(r.kernels_top[0].name, "gemm");
  EXPECT_EQ(r.kernels_top[0].count, 7u);

  // A real-sized trace, then the same with every event made non-ASCII (simdjson reads them all)
  // and with an escape in the GPU activities' args (the fast path gives them to simdjson).
  SyntheticTrace t;
  t.steps = 4;
  t.collective_us = 300;
  const std::string plain = synthetic_trace_text(t);
  const auto replaced = [&](std::string_view from, std::string_view to) {
    std::string out = plain;
    for (std::size_t at = out.find(from); at != std::string::npos; at = out.find(from, at + to.size()))
      out.replace(at, from.size(), to);
    return out;
  };
  const RankTrace want = analyse_trace_text(plain, "plain");
  for (const std::string& other : {replaced("\"args\": {", "\"args\": {\"note\": \"\xc3\xa9\", "),
                                   replaced("\"queued\": 0", "\"q\\u0075eued\": 0")}) {
    const RankTrace got = analyse_trace_text(other, "other");
    ASSERT_EQ(got.steps.size(), want.steps.size());
    for (std::size_t k = 0; k < want.steps.size(); ++k) {
      EXPECT_EQ(got.steps[k].gpu_busy_s, want.steps[k].gpu_busy_s) << k;
      EXPECT_EQ(got.steps[k].communication_overlapped_s, want.steps[k].communication_overlapped_s) << k;
      EXPECT_EQ(got.steps[k].launch_gap_median_s, want.steps[k].launch_gap_median_s) << k;
      EXPECT_EQ(got.steps[k].verdict, want.steps[k].verdict) << k;
    }
    EXPECT_EQ(got.counts.gpu_activities, want.counts.gpu_activities);
    EXPECT_EQ(got.counts.malformed, 0u);
    ASSERT_EQ(got.kernels_top.size(), want.kernels_top.size());
    for (std::size_t k = 0; k < want.kernels_top.size(); ++k) {
      EXPECT_EQ(got.kernels_top[k].name, want.kernels_top[k].name);
      EXPECT_EQ(got.kernels_top[k].count, want.kernels_top[k].count);
    }
  }
}

// Events in the layout libkineto writes (keys in its order, its line breaks and indents) are read
// by a path of their own; the same events on one line with "ph" last (the fast path's general
// steps), and with a non-ASCII byte in each (simdjson), give the same answer, to the byte of the
// JSON, edge cases of the numbers included.
TEST(TraceAnalysis, KinetosOwnLayoutReadsAsEveryOtherWay) {
  struct Event {
    std::vector<std::pair<std::string, std::string>> fields;  // key, the value's JSON
    std::vector<std::size_t> line_breaks;                     // before these fields (Kineto's lines)
  };
  const auto complete = [](std::string cat, std::string name, std::string pid, std::string tid, std::string ts,
                           std::string dur, std::string args) {
    Event e{{{"ph", "\"X\""},
             {"cat", "\"" + cat + "\""},
             {"name", "\"" + name + "\""},
             {"pid", pid},
             {"tid", tid},
             {"ts", ts},
             {"dur", dur}},
            {5}};
    if (!args.empty()) {
      e.fields.emplace_back("args", "{\n      " + args + "\n    }");
      e.line_breaks.push_back(7);
    }
    return e;
  };
  const auto flow = [](std::string ph, std::string id, std::string ts, bool bp) {
    Event e{{{"ph", "\"" + ph + "\""},
             {"id", id},
             {"pid", "2405"},
             {"tid", "2405"},
             {"ts", ts},
             {"cat", "\"ac2g\""},
             {"name", "\"ac2g\""}},
            {5}};
    if (bp) e.fields.emplace_back("bp", "\"e\"");
    return e;
  };
  const std::string kernel_args =
      "\"External id\": 7,      \"queued\": 0, \"device\": 0, \"context\": 1,      \"stream\": 7, \"correlation\": "
      "314161,      \"grid\": [32, 1, 8],      \"block\": [128, 1, 1]";
  const std::vector<Event> events = {
      complete("user_annotation", "ProfilerStep#1", "2405", "2405", "5226435249696.611", "5000.000",
               "\"External id\": 1"),
      complete("cuda_runtime", "cudaLaunchKernelExC", "2405", "2405", "5226435249700.001", "7.5",
               "\"cbid\": 430, \"correlation\": 314161"),
      complete("kernel", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "0", "7", "5226435249710.250",
               "47.168", kernel_args),
      complete("kernel", "void at::native::vectorized_elementwise_kernel<4>", "0", "7", "5226435249760", "12.34567",
               "\"queued\": 0, \"device\": 0, \"context\": 1"),
      complete("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", "0", "7", "5226435249800.5", "100.000",
               "\"External id\": 8,      \"device\": 0, \"context\": 1"),
      complete("kernel", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "1", "20", "5226435249900.000", "5e1",
               "\"queued\": 0, \"device\": 1"),
      flow("s", "314161", "5226435249700.001", false),
      flow("f", "314161", "5226435249710.250", true),
      complete("overhead", "Activity Buffer Request", "-1", "0", "5226435249720.878", "2.197", ""),
      complete("cpu_op", "aten::mm", "0007", "0007", "-5.5", "0.001", "\"External id\": 9"),
      complete("cpu_op", "aten::addmm", "\"Spans\"", "7", "5226435249730.123456", "3.000", "\"Ev Idx\": 4"),
      complete("cuda_runtime", "cudaStreamSynchronize", "2405", "2405", "5226435253000.000", "1500.000",
               "\"cbid\": 131"),
      complete("cpu_op", "aten::item", "2405", "2405", "1764536789123456.789", "10.000", "\"External id\": 10"),
      complete("cpu_op", "aten::copy_", "2405", "2405", "17645367891234567.8", "1.000", "\"External id\": 11"),
      complete("cpu_op", "quoted \\\"name\\\"", "2405", "2405", "5226435249740.000", "1.000", "\"External id\": 12"),
      complete("cpu_op", "aten::empty", "2405", "2405", "5226435249741.000", "-1.000", "\"External id\": 13"),
      complete("cpu_op", "aten::zeros", "2405", "2405", "\"late\"", "1.000", "\"External id\": 14"),
  };
  const auto text = [&](const std::function<std::string(const Event&)>& write) {
    std::string out = "{\n  \"schemaVersion\": 1,\n  \"traceEvents\": [";
    for (std::size_t k = 0; k < events.size(); ++k) {
      out += k == 0 ? "\n  " : ",\n  ";
      out += write(events[k]);
    }
    return out + "\n  ]\n}";
  };
  const std::string kineto = text([](const Event& e) {
    std::string out = "{";
    for (std::size_t k = 0; k < e.fields.size(); ++k) {
      const bool line = k == 0 || std::find(e.line_breaks.begin(), e.line_breaks.end(), k) != e.line_breaks.end();
      if (k > 0) out += ',';
      out += line ? "\n    \"" : " \"";
      out += e.fields[k].first;
      out += "\": ";
      out += e.fields[k].second;
    }
    return out + "\n  }";
  });
  const std::string ph_last = text([](const Event& e) {
    std::string out = "{";
    for (std::size_t k = 1; k <= e.fields.size(); ++k) {
      const auto& [key, value] = e.fields[k % e.fields.size()];
      out += k == 1 ? "\"" : ", \"";
      out += key;
      out += "\": ";
      out += value;
    }
    return out + "}";
  });
  std::string non_ascii = ph_last;
  for (std::size_t at = non_ascii.find("\"ph\""); at != std::string::npos; at = non_ascii.find("\"ph\"", at + 20))
    non_ascii.insert(at, "\"note\": \"\xc3\xa9\", ");
  const auto rendered = [](const std::string& json) {
    TraceReport report;
    report.ranks.push_back(analyse_trace_text(json, "events"));
    report.ranks[0].counts.bytes = 0;  // the texts differ in their spaces
    return render_trace(report, nullptr, nullptr, trainfit::Format::json);
  };
  const std::string want = rendered(kineto);
  EXPECT_NE(want.find("\"malformed\": 3"), std::string::npos) << want;  // "late", and two events of a negative or
                                                                        // past-2262 time
  EXPECT_EQ(rendered(ph_last), want);
  EXPECT_EQ(rendered(non_ascii), want);
  // The numbers' masks are made as wide as the splitter's blocks: each width the CPU has.
  const detail::BlockScan widest = detail::block_scan();
  for (int w = 0; w <= 4; ++w) {
    if (detail::use_block_scan(static_cast<detail::BlockScan>(w))) {
      EXPECT_EQ(rendered(kineto), want) << w;
    }
  }
  EXPECT_TRUE(detail::use_block_scan(widest));
}

TEST(TraceAnalysis, ATruncatedFileGivesTheStepsBeforeTheCut) {
  SyntheticTrace t;
  t.steps = 6;
  const std::string text = synthetic_trace_text(t);
  const RankTrace whole = analyse_trace_text(text, "whole");
  const RankTrace cut = analyse_trace_text(std::string_view(text).substr(0, text.size() * 2 / 3), "cut");
  EXPECT_TRUE(cut.truncated);
  EXPECT_FALSE(whole.truncated);
  EXPECT_GT(cut.steps.size(), 1u);
  EXPECT_LT(cut.steps.size(), whole.steps.size());
  EXPECT_NEAR(cut.steps[0].gpu_busy_s, whole.steps[0].gpu_busy_s, 1e-12);
  ASSERT_FALSE(cut.warnings.empty());
  EXPECT_NE(cut.warnings[0].find("ends inside its traceEvents"), std::string::npos);
}

TEST(TraceAnalysis, TextThatIsNoTraceIsAnInputError) {
  for (const std::string_view bad : {"", "{}", R"({"foo": [1]})", "[[[", "\x1f\x8b garbage", "null"})
    EXPECT_THROW(analyse_trace_text(bad, "bad"), trainfit::InputError) << bad;
}

TEST(TraceFiles, GzipAndPlainFilesGiveTheSameAnswer) {
  SyntheticTrace t;
  t.steps = 4;
  t.collective_us = 300;
  const std::string text = synthetic_trace_text(t);
  write_file(scratch("plain.json"), text);
  write_gzip(scratch("packed.json.gz"), text);
  const RankTrace plain = analyse_trace(scratch("plain.json").string()).ranks.at(0);
  const RankTrace packed = analyse_trace(scratch("packed.json.gz").string()).ranks.at(0);
  const RankTrace memory = analyse_trace_text(text, "memory");
  ASSERT_EQ(plain.steps.size(), 4u);
  for (std::size_t k = 0; k < 4; ++k) {
    EXPECT_EQ(plain.steps[k].gpu_busy_s, packed.steps[k].gpu_busy_s);
    EXPECT_EQ(plain.steps[k].gpu_busy_s, memory.steps[k].gpu_busy_s);
    EXPECT_EQ(plain.steps[k].communication_overlapped_s, packed.steps[k].communication_overlapped_s);
  }
  EXPECT_EQ(packed.counts.bytes, text.size());
  // A gzip stream cut short: the steps before the cut, and the cut said.
  const std::string packed_bytes = [&] {
    std::ifstream in(scratch("packed.json.gz"), std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  write_file(scratch("cut.json.gz"), packed_bytes.substr(0, packed_bytes.size() / 2));
  const RankTrace cut = analyse_trace(scratch("cut.json.gz").string()).ranks.at(0);
  EXPECT_TRUE(cut.truncated);
  EXPECT_LT(cut.steps.size(), 4u);
  EXPECT_THROW(analyse_trace(scratch("missing.json").string()), trainfit::InputError);
}

// ISA-L (where the build has it) and zlib inflate to the same text, so the answer is the same
// whichever runs: whole, in two members, cut anywhere (ISA-L alone may hold back the last bytes it
// could decode, and zlib reads the cut file again for them), or followed by bytes that are not gzip.
TEST(TraceFiles, EitherGzipDecoderGivesTheSameAnswer) {
  SyntheticTrace t;
  t.steps = 3;
  const std::string text = synthetic_trace_text(t);
  write_gzip(scratch("one.json.gz"), text);
  const std::string packed = [&] {
    std::ifstream in(scratch("one.json.gz"), std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  write_file(scratch("two.json.gz"), packed + packed);  // cat a.gz b.gz: the second is read, and ignored
  write_file(scratch("zeros.json.gz"), packed + std::string(7, '\0'));
  write_file(scratch("junk.json.gz"), packed + "and then some bytes that are not gzip at all\n");
  const auto read = [](const std::string& name) { return analyse_trace(scratch(name).string()).ranks.at(0); };
  const detail::Inflate in_use = detail::inflate_in_use();
  std::vector<std::vector<std::string>> answers;  // per decoder: every answer, in words
  for (const detail::Inflate decoder : {detail::Inflate::zlib, detail::Inflate::isal}) {
    if (!detail::use_inflate(decoder)) continue;
    std::vector<std::string> got;
    const RankTrace one = read("one.json.gz"), two = read("two.json.gz");
    EXPECT_EQ(one.counts.bytes, text.size());
    EXPECT_EQ(two.counts.bytes, 2 * text.size());
    EXPECT_FALSE(one.truncated);
    EXPECT_FALSE(two.truncated);
    ASSERT_EQ(one.steps.size(), 3u);
    for (const char* name : {"zeros.json.gz", "junk.json.gz"}) {
      const RankTrace r = read(name);
      EXPECT_EQ(r.counts.bytes, text.size()) << name;
      EXPECT_FALSE(r.truncated) << name;
      ASSERT_EQ(r.warnings.size(), 1u) << name;
      EXPECT_NE(r.warnings[0].find("not gzip: ignored"), std::string::npos) << r.warnings[0];
    }
    for (std::size_t cut = 20; cut < packed.size(); cut += 1 + cut / 7) {
      write_file(scratch("cut.json.gz"), packed.substr(0, cut));
      try {
        const RankTrace r = read("cut.json.gz");
        EXPECT_TRUE(r.truncated) << cut;
        got.push_back(std::to_string(cut) + ": " + std::to_string(r.counts.bytes) + " bytes, " +
                      std::to_string(r.counts.events) + " events, " + std::to_string(r.steps.size()) + " steps");
      } catch (const trainfit::InputError& e) {  // cut before the traceEvents array
        got.push_back(std::to_string(cut) + ": " + e.what());
      }
    }
    answers.push_back(got);
  }
  ASSERT_FALSE(answers.empty());
  for (const auto& other : answers) EXPECT_EQ(other, answers.front());
  EXPECT_TRUE(detail::use_inflate(in_use));
}

// What a ChunkReader hands out, chunk by chunk, with its marks after each, and how it ends: the
// empty chunk, or the exception (its type and words) in place of the chunk it was making.
struct ChunkReading {
  std::vector<std::string> chunks;
  std::vector<std::pair<bool, bool>> marks;  // truncated, trailing bytes
  std::string error;
  bool prefetched = false;
};

ChunkReading read_chunks(const std::filesystem::path& path, std::size_t chunk_bytes,
                         detail::ChunkReader::Prefetch prefetch) {
  ChunkReading r;
  try {
    detail::ChunkReader reader(path.string(), chunk_bytes, prefetch);
    r.prefetched = reader.prefetching();
    for (std::string_view chunk = reader.next(); !chunk.empty(); chunk = reader.next()) {
      r.chunks.emplace_back(chunk);
      r.marks.emplace_back(reader.truncated(), reader.trailing_bytes());
    }
    r.marks.emplace_back(reader.truncated(), reader.trailing_bytes());  // after the end
  } catch (const trainfit::InputError& e) {
    r.error = std::string("InputError: ") + e.what();
  } catch (const trainfit::SystemError& e) {
    r.error = std::string("SystemError: ") + e.what();
  }
  return r;
}

// A trace of `events` events whose names and times are random, so that gzip leaves it large.
std::string random_trace_text(std::size_t events, unsigned seed) {
  std::mt19937 rng(seed);
  std::string text = R"({"schemaVersion": 1, "traceEvents": [)";
  for (std::size_t k = 0; k < events; ++k) {
    text += fmt::format(R"({}{{"ph": "X", "cat": "kernel", "name": "k{}\"{{[", "pid": 0, "tid": 7, "ts": {}, )"
                        R"("dur": {}, "args": {{"device": 0, "stream": {}, "grid": [{}, 1, 1]}}}})",
                        k == 0 ? "" : ", ", rng(), 1000 + 10 * k, rng() % 97, rng() % 8, rng() % 4096);
  }
  return text + "]}";
}

std::string read_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Reading ahead on a thread hands out what reading on the caller's thread does, chunk for chunk
// (the same bytes, the same boundaries, so none reordered, dropped or repeated), with the same marks
// after each, and ends the same way: a corrupt gzip stream's InputError after the same chunks, a
// cut stream's truncated mark, trailing bytes noted. Small chunks make the ring turn over hundreds
// of times and cut most events across two chunks; the events split from them are the whole text's.
TEST(TraceChunks, ReadingAheadHandsOutWhatReadingInPlaceDoes) {
  const std::string text = random_trace_text(12000, 5);
  ASSERT_GT(text.size(), std::size_t{1} << 20);
  write_file(scratch("ahead.json"), text);
  write_gzip(scratch("ahead.json.gz"), text);
  const std::string packed = read_bytes(scratch("ahead.json.gz"));
  ASSERT_GT(packed.size(), std::size_t{100} << 10);  // read in many pieces too
  write_file(scratch("ahead-two.json.gz"), packed + packed);
  write_file(scratch("ahead-junk.json.gz"), packed + "and then bytes that are not gzip\n");
  write_file(scratch("ahead-cut.json.gz"), packed.substr(0, packed.size() * 3 / 5));
  std::string corrupt = packed;
  std::fill_n(corrupt.begin() + static_cast<std::ptrdiff_t>(corrupt.size() / 2), 300, '\xff');
  write_file(scratch("ahead-corrupt.json.gz"), corrupt);
  std::string bad_check = packed;
  bad_check[bad_check.size() - 8] ^= 1;  // the trailer's CRC
  write_file(scratch("ahead-check.json.gz"), bad_check);

  std::vector<std::string> whole_events;
  detail::TraceSplitter whole([&](std::string_view e, const detail::EventShape&) { whole_events.emplace_back(e); },
                              [](std::string_view, std::string_view) {});
  whole.feed(text);
  ASSERT_EQ(whole_events.size(), 12000u);

  using Prefetch = detail::ChunkReader::Prefetch;
  const detail::Inflate in_use = detail::inflate_in_use();
  for (const detail::Inflate decoder : {detail::Inflate::zlib, detail::Inflate::isal}) {
    if (!detail::use_inflate(decoder)) continue;
    for (const char* name : {"ahead.json", "ahead.json.gz", "ahead-two.json.gz", "ahead-junk.json.gz",
                             "ahead-cut.json.gz", "ahead-corrupt.json.gz", "ahead-check.json.gz"}) {
      for (const std::size_t chunk_bytes : {std::size_t{1000}, std::size_t{4096 + 7}, std::size_t{256} << 10}) {
        const std::string what = fmt::format("{}, chunks of {}, decoder {}", name, chunk_bytes,
                                             decoder == detail::Inflate::zlib ? "zlib" : "isal");
        const ChunkReading in_place = read_chunks(scratch(name), chunk_bytes, Prefetch::off);
        const ChunkReading ahead = read_chunks(scratch(name), chunk_bytes, Prefetch::on);
        EXPECT_FALSE(in_place.prefetched) << what;
        EXPECT_TRUE(ahead.prefetched) << what;
        ASSERT_EQ(ahead.chunks.size(), in_place.chunks.size()) << what;
        EXPECT_TRUE(ahead.chunks == in_place.chunks) << what;
        EXPECT_EQ(ahead.marks, in_place.marks) << what;
        EXPECT_EQ(ahead.error, in_place.error) << what;
        const std::string_view file(name);
        if (file == "ahead-corrupt.json.gz" || file == "ahead-check.json.gz") {
          EXPECT_NE(ahead.error.find("InputError: corrupt gzip stream"), std::string::npos) << what << ahead.error;
          EXPECT_GT(ahead.chunks.size(), 1u) << what;  // thrown after chunks were handed out, not at once
          continue;
        }
        EXPECT_EQ(ahead.error, "") << what;
        ASSERT_FALSE(ahead.marks.empty());
        EXPECT_EQ(ahead.marks.back().first, file == "ahead-cut.json.gz") << what;
        EXPECT_EQ(ahead.marks.back().second, file == "ahead-junk.json.gz") << what;
        if (file == "ahead-cut.json.gz") continue;
        std::vector<std::string> events;
        detail::TraceSplitter split([&](std::string_view e, const detail::EventShape&) { events.emplace_back(e); },
                                    [](std::string_view, std::string_view) {});
        std::size_t bytes = 0;
        for (const std::string& chunk : ahead.chunks) {  // ahead-two's second member: the text again
          const std::string_view first = std::string_view(chunk).substr(0, text.size() - bytes);
          split.feed(first);
          bytes += first.size();
        }
        EXPECT_EQ(bytes, text.size()) << what;
        EXPECT_TRUE(events == whole_events) << what;
      }
    }
  }
  EXPECT_TRUE(detail::use_inflate(in_use));
  // Left to itself, the reader reads ahead only a gzip file large enough to gain by it.
  EXPECT_FALSE(read_chunks(scratch("ahead.json"), 256 << 10, Prefetch::automatic).prefetched);
  write_gzip(scratch("small.json.gz"), text.substr(0, 100000) + "]}");
  EXPECT_FALSE(read_chunks(scratch("small.json.gz"), 256 << 10, Prefetch::automatic).prefetched);
  const std::filesystem::path proc_mem = "/proc/self/mem";  // opened, but not read from its start
  if (std::filesystem::exists(proc_mem)) {
    EXPECT_NE(read_chunks(proc_mem, 4096, Prefetch::on).error.find("SystemError: cannot read trace"),
              std::string::npos);
  }
}

// A source for ChunkPrefetcher that says which chunk each is: chunk k holds "k:" and then k's own
// filler, of a length that varies, up to the capacity. It throws at chunk `throw_at` (a
// SystemError or an InputError) and ends (an empty chunk) at `end_at`; it counts its calls.
struct CountingSource {
  std::size_t throw_at = SIZE_MAX, end_at = SIZE_MAX;
  bool input_error = false;
  std::chrono::microseconds delay{0};
  std::atomic<std::size_t> calls{0};
  std::atomic<bool> called_after_end{false};

  static std::string chunk(std::size_t k, std::size_t capacity) {
    std::string text = std::to_string(k) + ":";
    const std::size_t length = 10 + (k * 7919) % 3000;
    if (text.size() < length) text.append(length - text.size(), static_cast<char>('a' + k % 26));
    return text.substr(0, capacity);
  }
  detail::MadeChunk operator()(char* out, std::size_t capacity) {
    const std::size_t k = calls++;
    if (k > std::min(throw_at, end_at)) called_after_end = true;
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
    if (k == throw_at) {
      if (input_error) throw trainfit::InputError(fmt::format("bad bytes in chunk {}", k));
      throw trainfit::SystemError(fmt::format("disk gone at chunk {}", k));
    }
    if (k == end_at) return {};
    const std::string text = chunk(k, capacity);
    std::memcpy(out, text.data(), text.size());
    return {{out, text.size()}, {k % 3 == 0, k % 5 == 0}};
  }
};

detail::ChunkPrefetcher::Make make_from(CountingSource& source) {
  return [&source](char* out, std::size_t capacity) { return source(out, capacity); };
}

// The chunks come out in the order made, each whole, with its marks; an exception comes out in
// place of the chunk that threw it, after every chunk before it, and the source is called no more.
TEST(TraceChunks, APrefetcherHandsOutChunksInOrderAndThrowsInPlace) {
  for (const std::size_t slots : {std::size_t{2}, std::size_t{3}, std::size_t{4}, std::size_t{8}}) {
    for (const bool input_error : {false, true}) {
      for (const std::size_t throw_at : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{500}}) {
        CountingSource source;
        source.throw_at = throw_at;
        source.input_error = input_error;
        std::size_t got = 0;
        std::string error;
        {
          detail::ChunkPrefetcher ahead(make_from(source), 1000, slots);
          try {
            for (detail::MadeChunk c = ahead.next(); !c.text.empty(); ++got, c = ahead.next()) {
              ASSERT_EQ(c.text, CountingSource::chunk(got, 1000)) << got;
              EXPECT_EQ(c.marks.truncated, got % 3 == 0);
              EXPECT_EQ(c.marks.trailing_bytes, got % 5 == 0);
            }
          } catch (const trainfit::InputError& e) {
            error = std::string("input: ") + e.what();
          } catch (const trainfit::SystemError& e) {
            error = std::string("system: ") + e.what();
          }
          EXPECT_TRUE(ahead.next().text.empty());  // and nothing after it
        }
        EXPECT_EQ(got, throw_at) << slots;
        EXPECT_EQ(error, fmt::format("{}: {} {}", input_error ? "input" : "system",
                                     input_error ? "bad bytes in chunk" : "disk gone at chunk", throw_at));
        EXPECT_EQ(source.calls.load(), throw_at + 1);
        EXPECT_FALSE(source.called_after_end.load());
      }
    }
  }
  CountingSource source;
  source.end_at = 100;
  detail::ChunkPrefetcher ahead(make_from(source), 64, 3);
  std::size_t got = 0;
  for (detail::MadeChunk c = ahead.next(); !c.text.empty(); c = ahead.next())
    EXPECT_EQ(c.text, source.chunk(got++, 64));
  EXPECT_EQ(got, 100u);
  EXPECT_TRUE(ahead.next().text.empty());
  EXPECT_TRUE(ahead.next().text.empty());
  EXPECT_EQ(source.calls.load(), 101u);
}

// A caller that stops early (it has what it wanted, or it threw) leaves by the destructor, which
// stops the thread and joins it, also while a chunk is being made; the thread is never more than
// the ring ahead of the caller, so what it holds stays a few chunks.
TEST(TraceChunks, APrefetcherStopsWhereverTheCallerLeaves) {
  for (const std::size_t slots : {std::size_t{2}, std::size_t{4}}) {
    for (const std::size_t taken : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{50}}) {
      for (const int delay_us : {0, 2000}) {
        CountingSource source;  // endless
        source.delay = std::chrono::microseconds(delay_us);
        {
          detail::ChunkPrefetcher ahead(make_from(source), 4096, slots);
          for (std::size_t k = 0; k < taken; ++k) ASSERT_EQ(ahead.next().text, source.chunk(k, 4096));
          std::this_thread::sleep_for(std::chrono::milliseconds(5));  // time to run ahead, as far as it may
        }
        EXPECT_LE(source.calls.load(), taken + slots) << slots << ", " << taken;
      }
    }
  }
  try {
    CountingSource source;
    detail::ChunkPrefetcher ahead(make_from(source), 4096, 4);
    ahead.next();
    throw std::runtime_error("the caller's own fault");
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "the caller's own fault");
  }
  // A reader reading ahead through a gzip file, let go after two chunks.
  write_gzip(scratch("early.json.gz"), random_trace_text(20000, 9));
  for (const std::size_t chunks : {std::size_t{0}, std::size_t{1}, std::size_t{2}}) {
    detail::ChunkReader reader(scratch("early.json.gz").string(), 4096, detail::ChunkReader::Prefetch::on);
    for (std::size_t k = 0; k < chunks; ++k) EXPECT_EQ(reader.next().size(), 4096u);
  }
}

TEST(TraceFiles, AFolderOfRanksNamesTheStraggler) {
  const auto dir = scratch("ranks");
  std::filesystem::create_directories(dir);
  for (int rank = 0; rank < 3; ++rank) {
    SyntheticTrace t;
    t.rank = rank;
    // Rank 2 computes longer; the others wait for it in the all-reduce.
    t.kernels = {{"sm90_xmma_gemm", "kernel", rank == 2 ? 150.0 : 100.0}};
    t.collective_us = rank == 2 ? 100 : 600;
    t.collective_start = 0.95;
    write_file(dir / ("worker" + std::to_string(2 - rank) + ".pt.trace.json"), synthetic_trace_text(t));
  }
  write_file(dir / "notes.txt", "not a trace");
  // Other JSON beside the traces (a reading of them, a config) is skipped and named.
  write_file(dir / "expected.json", R"({"steps": []})");
  const TraceReport report = analyse_trace(dir.string());
  ASSERT_EQ(report.ranks.size(), 3u);
  ASSERT_EQ(report.skipped.size(), 1u);
  EXPECT_NE(report.skipped[0].find("expected.json"), std::string::npos) << report.skipped[0];
  EXPECT_EQ(report.ranks[0].rank, 0);  // in rank order, whatever the file names
  EXPECT_EQ(report.ranks[2].rank, 2);
  EXPECT_EQ(report.straggler, 2);
  EXPECT_NE(report.straggler_evidence.find("rank 2"), std::string::npos) << report.straggler_evidence;
}

// A folder of two runs is not one job's ranks: files from GPUs of two models (a before and an after
// on two machines, as Holistic Trace Analysis's trace_diff pair is), or two files of the same rank
// that are not one process's cycles. No straggler is named between them, and the check says why.
TEST(TraceFiles, FilesOfTwoJobsHaveNoStraggler) {
  SyntheticTrace fast, slow;
  fast.rank = 0;
  slow.rank = 1;
  fast.kernels = {{"sm90_xmma_gemm", "kernel", 100.0}};
  slow.kernels = {{"sm90_xmma_gemm", "kernel", 300.0}};
  const auto gpus = scratch("two-gpus");
  std::filesystem::create_directories(gpus);
  write_file(gpus / "after.json", synthetic_trace_text(fast));
  std::string v100 = synthetic_trace_text(slow);
  const std::size_t gpu_name = v100.find("NVIDIA H200");
  ASSERT_NE(gpu_name, std::string::npos);
  v100.replace(gpu_name, 11, "Tesla V100-SXM2-16GB");
  write_file(gpus / "before.json", v100);
  TraceReport report = analyse_trace(gpus.string());
  ASSERT_EQ(report.ranks.size(), 2u);
  EXPECT_EQ(report.straggler, -1);
  EXPECT_NE(report.straggler_evidence.find("their GPUs differ (NVIDIA H200, Tesla V100-SXM2-16GB)"), std::string::npos)
      << report.straggler_evidence;
  // The same GPU, both rank 0, the second file's steps no later than the first's: two runs.
  const auto same = scratch("two-rank-zeros");
  std::filesystem::create_directories(same);
  slow.rank = 0;
  write_file(same / "a.json", synthetic_trace_text(fast));
  write_file(same / "b.json", synthetic_trace_text(slow));
  report = analyse_trace(same.string());
  ASSERT_EQ(report.ranks.size(), 2u);
  EXPECT_EQ(report.straggler, -1);
  EXPECT_NE(report.straggler_evidence.find("two of them are rank 0"), std::string::npos) << report.straggler_evidence;
  // Without the second GPU's name or rank, the slower is the straggler, as in a job.
  slow.rank = 1;
  write_file(same / "b.json", synthetic_trace_text(slow));
  EXPECT_EQ(analyse_trace(same.string()).straggler, 1);
}

// Ranks that do the same work within a few percent: no straggler is named, and the check says why.
TEST(TraceFiles, RanksOfTheSameWorkHaveNoStraggler) {
  const auto dir = scratch("balanced");
  std::filesystem::create_directories(dir);
  for (int rank = 0; rank < 2; ++rank) {
    SyntheticTrace t;
    t.rank = rank;
    t.kernels = {{"sm90_xmma_gemm", "kernel", rank == 1 ? 104.0 : 100.0}};
    t.collective_us = 300;
    write_file(dir / ("rank" + std::to_string(rank) + ".json"), synthetic_trace_text(t));
  }
  const TraceReport report = analyse_trace(dir.string());
  ASSERT_EQ(report.ranks.size(), 2u);
  EXPECT_EQ(report.straggler, -1);
  EXPECT_EQ(report.straggler_evidence.rfind("none", 0), 0u) << report.straggler_evidence;
}

// tensorboard_trace_handler writes a file a profiling cycle (<worker>.<time>.pt.trace.json): a
// folder of one process's cycles is one rank, its steps those of every file, with no straggler to
// name among them; another process's file beside them is another rank.
TEST(TraceFiles, ProfilingCyclesOfOneProcessAreOneRank) {
  const auto dir = scratch("cycles");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  SyntheticTrace first;
  first.distributed = false;  // one process without a process group: known by its pid
  first.pid = 4321;
  SyntheticTrace second = first;
  second.start_us = 5e6;  // the next cycle, seconds later on the same clock
  second.kernels = {{"sm90_xmma_gemm", "kernel", 250}};
  SyntheticTrace other = first;
  other.pid = 999;
  std::vector<SyntheticStepFigures> want, more, theirs;
  write_file(dir / "worker0.100.pt.trace.json", synthetic_trace_text(first, &want));
  write_file(dir / "worker0.200.pt.trace.json", synthetic_trace_text(second, &more));
  write_file(dir / "worker1.150.pt.trace.json", synthetic_trace_text(other, &theirs));
  want.insert(want.end(), more.begin(), more.end());
  const TraceReport report = analyse_trace(dir.string());
  ASSERT_EQ(report.ranks.size(), 2u);
  const RankTrace& cycles = report.ranks[0];
  EXPECT_EQ(cycles.sources.size(), 2u);
  expect_figures(cycles, want);  // both files' steps, in time order, each with its own figures
  expect_figures(report.ranks[1], theirs);
  // The run's figures are of both cycles: twice the steps' kernels; the top kernels' share is of
  // every activity the files hold.
  EXPECT_EQ(cycles.total.kernels, 2 * report.ranks[1].total.kernels);
  double top = 0;
  for (const KernelStat& k : cycles.kernels_top) top += k.total_s;
  EXPECT_NEAR(cycles.activity_s, top, 1e-9);
  const std::string table = render_trace(report, nullptr, nullptr, trainfit::Format::table);
  EXPECT_NE(table.find("worker0.100.pt.trace.json and 1 more file of its process"), std::string::npos) << table;

  // The same pid at the same time is not one process's later cycle (two machines' processes).
  const auto apart = scratch("same_pid");
  std::filesystem::remove_all(apart);
  std::filesystem::create_directories(apart);
  write_file(apart / "a.json", synthetic_trace_text(first));
  write_file(apart / "b.json", synthetic_trace_text(first));
  EXPECT_EQ(analyse_trace(apart.string()).ranks.size(), 2u);
}

// A step the host only queued (a CUDA graph's replay, no synchronisation in the loop): the GPU's
// copy of its annotation spans its work, far past the host's window, and the report says the GPU
// set the pace. A step that synchronises has the two spans alike and no such note.
TEST(TraceAnalysis, AHostThatRanAheadOfTheGpuIsNamed) {
  SyntheticTrace queued;
  queued.kernels = {{"sm90_xmma_gemm", "kernel", 1000}};
  queued.synchronise = false;
  queued.annotate_steps_on_device = true;
  std::vector<SyntheticStepFigures> want;
  const RankTrace r = analyse_trace_text(synthetic_trace_text(queued, &want), "queued");
  expect_figures(r, want);
  ASSERT_EQ(r.steps.size(), want.size());
  for (std::size_t k = 0; k < want.size(); ++k) {
    EXPECT_NEAR(r.steps[k].device_wall_s, want[k].device_wall_s, 1e-9) << k;
    EXPECT_GT(r.steps[k].device_wall_s, 10 * r.steps[k].wall_s) << k;
  }
  EXPECT_TRUE(r.host_ran_ahead);
  ASSERT_FALSE(r.warnings.empty());
  EXPECT_NE(r.warnings.back().find("the host ran ahead of the GPU"), std::string::npos) << r.warnings.back();

  SyntheticTrace synchronised = queued;
  synchronised.synchronise = true;
  const RankTrace s = analyse_trace_text(synthetic_trace_text(synchronised, &want), "synchronised");
  EXPECT_NEAR(s.steps[0].device_wall_s, want[0].device_wall_s, 1e-9);
  EXPECT_LT(s.steps[0].device_wall_s, s.steps[0].wall_s);
  EXPECT_FALSE(s.host_ran_ahead);
  EXPECT_TRUE(s.warnings.empty()) << s.warnings.front();
}

// A trace of the host alone (profiled without ProfilerActivity.CUDA) has nothing to judge the GPU
// by: no verdict (null in JSON), with the reason, rather than a host-bound one.
TEST(TraceAnalysis, ATraceWithoutGpuActivityHasNoVerdict) {
  const std::string text = R"({"traceEvents": [
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 7, "tid": 7, "ts": 1000, "dur": 5000},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 7, "ts": 1100, "dur": 4000},
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "pid": 7, "tid": 7, "ts": 6000, "dur": 5000}]})";
  TraceReport report;
  report.ranks.push_back(analyse_trace_text(text, "host only"));
  const RankTrace& r = report.ranks[0];
  ASSERT_EQ(r.steps.size(), 2u);
  EXPECT_FALSE(r.total.verdict.has_value());
  for (const StepTrace& step : r.steps) EXPECT_FALSE(step.verdict.has_value());
  EXPECT_NE(r.total.evidence.find("no GPU activity"), std::string::npos) << r.total.evidence;
  const auto j = nlohmann::json::parse(render_trace(report, nullptr, nullptr, trainfit::Format::json));
  EXPECT_TRUE(j["verdict"].is_null()) << j.dump();
  EXPECT_TRUE(j["steps"][0]["verdict"].is_null());
  EXPECT_NE(render_trace(report, nullptr, nullptr, trainfit::Format::table).find("verdict: none"), std::string::npos);
}

// The timeline is the step in time order: a loader's wait at its start, then the matmuls, in
// proportion to their time.
// A made-up trace whose step lasts half a century (the fuzzer's find): its window in nanoseconds
// times the timeline's 240 slices passed 64 bits (undefined behaviour, which the sanitizers' build
// stops on); the timeline is made all the same.
TEST(TraceAnalysis, AStepOfCenturiesStillHasItsTimeline) {
  const std::string text = R"({"traceEvents": [
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 1000, "dur": 1694768750406391.525},
    {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 847384375204195, "dur": 5000, "args": {"device": 0}}]})";
  const RankTrace r = analyse_trace_text(text, "centuries");
  ASSERT_EQ(r.steps.size(), 1u);
  EXPECT_EQ(r.steps[0].timeline.size(), kTimelineBins);
  EXPECT_NEAR(r.steps[0].gpu_busy_s, 5e-3, 1e-12);
}

TEST(TraceAnalysis, TheTimelineShowsTheStepInTimeOrder) {
  SyntheticTrace t;
  t.loader_us = 3000;
  t.kernels = {{"sm90_xmma_gemm", "kernel", 100}};
  t.repeats = 30;
  const RankTrace r = analyse_trace_text(trainfit::testing::synthetic_trace_text(t), "timeline");
  ASSERT_FALSE(r.steps.empty());
  const StepTrace& s = r.steps[0];
  ASSERT_EQ(s.timeline.size(), kTimelineBins);
  EXPECT_EQ(s.timeline.front(), 'i');
  const auto slices = [&](char c) { return static_cast<double>(std::count(s.timeline.begin(), s.timeline.end(), c)); };
  // Each letter's share of the slices is its share of the wall time, to a slice or two at each change.
  EXPECT_NEAR(slices('i') / kTimelineBins, s.input_wait_s / s.wall_s, 0.03);
  EXPECT_NEAR(slices('M') / kTimelineBins, s.gpu_busy_s / s.wall_s, 0.05);
  EXPECT_GT(s.timeline.find('M'), s.timeline.rfind('i'));  // no matmul before the loader's wait ends
  EXPECT_TRUE(r.total.timeline.empty());
}

TEST(TraceFiles, AFolderWithoutAnyTraceIsAnInputError) {
  const auto dir = scratch("no_traces");
  std::filesystem::create_directories(dir);
  write_file(dir / "config.json", R"({"model": "qwen"})");
  try {
    analyse_trace(dir.string());
    ADD_FAILURE() << "a folder of no traces was read";
  } catch (const trainfit::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos) << e.what();
  }
}

// A trace far larger than a chunk or a batch streams through with the answer of one in memory.
TEST(TraceFiles, ABigTraceStreamsToTheSameFigures) {
  SyntheticTrace t;
  t.steps = 60;
  t.repeats = 400;
  t.kernels = {{"sm90_xmma_gemm", "kernel", 30}, {"void at::native::vectorized_elementwise_kernel<4>", "kernel", 8}};
  std::vector<SyntheticStepFigures> want;
  {
    std::ofstream out(scratch("big.json"), std::ios::binary);
    want = trainfit::testing::write_synthetic_trace(
        t, [&](std::string_view piece) { out.write(piece.data(), static_cast<std::streamsize>(piece.size())); });
  }
  EXPECT_GT(std::filesystem::file_size(scratch("big.json")), std::uintmax_t{30} << 20);
  const RankTrace r = analyse_trace(scratch("big.json").string()).ranks.at(0);
  expect_figures(r, want);
  EXPECT_EQ(r.counts.malformed, 0u);
}

}  // namespace

namespace {

std::string inflated(const std::filesystem::path& p) {
  gzFile f = gzopen(p.c_str(), "rb");
  if (f == nullptr) return {};
  std::string out;
  std::array<char, 1 << 16> buffer{};
  for (int n = 0; (n = gzread(f, buffer.data(), static_cast<unsigned>(buffer.size()))) > 0;)
    out.append(buffer.data(), static_cast<std::size_t>(n));
  gzclose(f);
  return out;
}

// Every output of a reading (the JSON, which holds every figure, and the table), or its error.
std::string answer_of(const std::function<detail::TraceData()>& read, std::size_t* threads = nullptr) {
  try {
    detail::TraceData data = read();
    if (threads != nullptr) *threads = data.read_threads;
    TraceReport report;
    report.ranks.push_back(detail::analyse(std::move(data), "t", {}));
    return render_trace(report, nullptr, nullptr, trainfit::Format::json) +
           render_trace(report, nullptr, nullptr, trainfit::Format::table);
  } catch (const trainfit::InputError& e) {
    return std::string("error: ") + e.what();
  } catch (const trainfit::SystemError& e) {
    return std::string("system error: ") + e.what();
  }
}

// The text read on one thread and on several, in chunks of `chunk` bytes: the same answer, to the
// byte; `parallel` says whether the threads' reading stood (else it was read again on one thread).
void expect_threads_read_as_one(std::string_view text, std::size_t chunk, const std::string& what,
                                bool parallel = true) {
  const std::string one = answer_of([&] { return detail::read_trace_text(text, "t", {1, chunk, 0}); });
  for (const std::size_t threads : {std::size_t{2}, std::size_t{3}}) {
    for (const std::size_t segment : {std::size_t{1}, std::size_t{3}}) {
      std::size_t used = 0;
      const std::string several = answer_of(
          [&] {
            return detail::read_trace_text(text, "t", {threads, chunk, segment});
          },
          &used);
      EXPECT_EQ(several, one) << what << ", " << threads << " threads, segments of " << segment;
      if (several.starts_with("error")) continue;
      EXPECT_EQ(used, parallel ? threads : 1u) << what << ", " << threads << " threads, segments of " << segment;
    }
  }
}

std::string replaced_all(std::string text, std::string_view from, std::string_view to, std::size_t every = 1) {
  std::size_t seen = 0;
  for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + 1))
    if (seen++ % every == 0) {
      text.replace(at, from.size(), to);
      at += to.size() - 1;
    }
  return text;
}

}  // namespace

// A trace read on several threads, each beginning in the middle of traceEvents on a guess of where
// an event begins, gives what one thread gives, byte for byte: on a recorded trace in libkineto's
// layout and on a synthetic one (events on one line), at chunk sizes that put the 64-byte blocks
// anywhere relative to the events, with non-ASCII bytes (events simdjson reads, and neighbours
// that the blocks make not plain) and escapes around the places the threads begin.
TEST(TraceParallel, ThreadsReadWhatOneThreadReads) {
  const std::string kineto = inflated(std::string(TRAINFIT_SOURCE_DIR) + "/data/trace/host/trace.json.gz");
  ASSERT_GT(kineto.size(), std::size_t{1} << 20);
  SyntheticTrace t;
  t.steps = 3;
  t.collective_us = 300;
  const std::string synthetic = synthetic_trace_text(t);
  for (const std::size_t chunk : {std::size_t{4096}, std::size_t{4000 + 13}, std::size_t{64} << 10}) {
    expect_threads_read_as_one(kineto, chunk, fmt::format("kineto, chunks of {}", chunk));
    expect_threads_read_as_one(synthetic, chunk, fmt::format("synthetic, chunks of {}", chunk));
  }
  // Non-ASCII names (simdjson's events, deferred to the merge) and bytes beside the boundaries.
  const std::string accents = replaced_all(kineto, "\"name\": \"aten::", "\"name\": \"\xc3\xa9t\xc3\xa9::", 7);
  const std::string escapes = replaced_all(kineto, "\"cat\": \"cpu_op\"", "\"cat\": \"cpu\\u005fop\"", 5);
  const std::string tails = replaced_all(kineto, "\"Ev Idx\": 0", "\"Ev Idx\": \"\xc3\xa9\"", 3);
  for (const std::size_t chunk : {std::size_t{4096}, std::size_t{1000 + 1}}) {
    expect_threads_read_as_one(accents, chunk, "non-ASCII names");
    expect_threads_read_as_one(escapes, chunk, "escapes");
    expect_threads_read_as_one(tails, chunk, "non-ASCII bytes at the events' ends");
  }
  // No step annotations: one window, the same.
  expect_threads_read_as_one(replaced_all(kineto, "ProfilerStep#", "ProfilerSlice#"), 4096, "no steps");
}

// What one thread answers for bad input, threads answer too: a cut file (the partial answer), a
// malformed event (counted), an event that is not an object or a stray byte (the error, at its
// byte, or the partial answer before it), a file whose events are deferred past one batch.
TEST(TraceParallel, BadInputReadsAsOnOneThread) {
  const std::string kineto = inflated(std::string(TRAINFIT_SOURCE_DIR) + "/data/trace/host/trace.json.gz");
  ASSERT_GT(kineto.size(), std::size_t{1} << 20);
  for (const std::size_t cut : {kineto.size() / 3, kineto.size() / 2 + 17, kineto.size() - 1000})
    expect_threads_read_as_one(std::string_view(kineto).substr(0, cut), 4096, fmt::format("cut at {}", cut));
  expect_threads_read_as_one(replaced_all(kineto, "\"dur\": 1", "\"dur\": \"late\"", 50), 4096, "malformed");
  // An error: where one thread finds it, the threads' reading gives way to one thread's.
  std::string stray = kineto;
  stray.insert(kineto.find("},\n  {", kineto.size() * 2 / 3) + 2, "x");
  expect_threads_read_as_one(stray, 4096, "a stray byte", false);
  std::string early = kineto;
  early.insert(kineto.find("\"traceEvents\": [") + 16, "7, ");
  expect_threads_read_as_one(early, 4096, "not an object", false);
  // Over 256 KiB of events for simdjson: one thread parses some of them before the rest.
  expect_threads_read_as_one(replaced_all(kineto, "\"name\": \"", "\"name\": \"\xc3\xa9"), 4096, "all non-ASCII",
                             false);
}

// A guess that is wrong: the bytes of libkineto's break between events, inside an event (in an
// array of args at the same indent, and in a string with raw line breaks, which JSON forbids but the
// splitter reads). The thread before finds that no event begins there, and the trace is read again
// on one thread: the same answer.
TEST(TraceParallel, AWrongGuessFallsBackToOneThread) {
  const std::string kineto = inflated(std::string(TRAINFIT_SOURCE_DIR) + "/data/trace/host/trace.json.gz");
  ASSERT_GT(kineto.size(), std::size_t{1} << 20);
  const std::string nested = "\"args\": {\n      \"shapes\": [{\"ph\": \"X\"},\n  {\n    \"ph\": \"X\", \"dur\": 1}],";
  std::string in_args = kineto;
  for (std::size_t at = in_args.find("\"args\": {", in_args.size() / 2);
       at != std::string::npos && at < in_args.size() * 3 / 4; at = in_args.find("\"args\": {", at + 4096))
    in_args.replace(at, 9, nested);
  expect_threads_read_as_one(in_args, 4096, "in args", false);
  std::string in_string = kineto;
  const std::size_t name = in_string.find("\"name\": \"", in_string.size() / 2);
  in_string.insert(name + 9, "a},\n  {\n    \"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"b");
  expect_threads_read_as_one(in_string, 4096, "in a string", false);
}

// Files: plain and gzip, read on several threads by SharedChunks (a plain file's chunks where they
// lie, a gzip file's through the shared ring), cut, corrupt, padded and doubled: as on one thread.
TEST(TraceParallel, FilesReadOnThreadsAsOnOne) {
  const std::string kineto = inflated(std::string(TRAINFIT_SOURCE_DIR) + "/data/trace/host/trace.json.gz");
  ASSERT_GT(kineto.size(), std::size_t{1} << 20);
  write_file(scratch("threads.json"), kineto);
  write_file(scratch("threads-cut.json"), kineto.substr(0, kineto.size() * 3 / 5));
  write_gzip(scratch("threads.json.gz"), kineto);
  const std::string packed = read_bytes(scratch("threads.json.gz"));
  write_file(scratch("threads-two.json.gz"), packed + packed);
  write_file(scratch("threads-junk.json.gz"), packed + "and then bytes that are not gzip\n");
  write_file(scratch("threads-cut.json.gz"), packed.substr(0, packed.size() * 3 / 5));
  std::string corrupt = packed;
  std::fill_n(corrupt.begin() + static_cast<std::ptrdiff_t>(corrupt.size() / 2), 300, '\xff');
  write_file(scratch("threads-corrupt.json.gz"), corrupt);
  for (const char* name : {"threads.json", "threads-cut.json", "threads.json.gz", "threads-two.json.gz",
                           "threads-junk.json.gz", "threads-cut.json.gz", "threads-corrupt.json.gz"}) {
    const std::string path = scratch(name).string();
    for (const std::size_t chunk : {std::size_t{4096}, std::size_t{256} << 10}) {
      const std::string one = answer_of([&] { return detail::read_trace_file(path, {1, chunk, 0}); });
      // A gzip file's chunks inflated by the threads as they need them, and by a thread ahead of them.
      for (const std::size_t threads : {std::size_t{2}, std::size_t{4}}) {
        for (const bool ahead : {false, true}) {
          if (ahead && !std::string_view(name).ends_with(".gz")) continue;  // a plain file has no inflate
          std::size_t used = 0;
          const std::string several = answer_of(
              [&] {
                return detail::read_trace_file(path, {threads, chunk, 2, ahead});
              },
              &used);
          EXPECT_EQ(several, one) << name << ", chunks of " << chunk << ", " << threads << " threads"
                                  << (ahead ? ", inflated ahead" : "");
          // A corrupt stream is read again on one thread (which reports the error where it
          // stands), and so is a doubled one: the second copy's events, after the first's end,
          // hold the places a thread would begin at, which the first copy's end does not stop at.
          const std::string_view file(name);
          if (chunk == 4096) {
            EXPECT_EQ(used, file == "threads-corrupt.json.gz" || file == "threads-two.json.gz" ? 1 : threads) << name;
          }
        }
      }
    }
  }
  // A real gzip trace as a machine of three CPUs or more reads it (two threads, a third inflating
  // ahead, chunks of 128 KiB), again and again: the threads start and claim in another order each
  // time, and a ring that moved past a segment claimed but not begun read an event twice.
  const std::string loader = std::string(TRAINFIT_SOURCE_DIR) + "/data/trace/loader/trace.json.gz";
  const std::string loader_one = answer_of([&] { return detail::read_trace_file(loader, {1, 0, 0}); });
  for (int run = 0; run < 6; ++run) {
    std::size_t used = 0;
    const std::string several = answer_of(
        [&] {
          return detail::read_trace_file(loader, {2 + std::size_t(run % 2), 0, 0, true});
        },
        &used);
    EXPECT_EQ(used, 2 + std::size_t(run % 2));
    EXPECT_TRUE(several == loader_one) << "loader.json.gz, run " << run;
  }
  // Left to itself, a process of one CPU reads on one thread (the test may run under taskset).
  if (detail::usable_cpus() == 1) {
    EXPECT_EQ(detail::read_trace_file(scratch("threads.json").string()).read_threads, 1u);
  }
}
