// Runs the frameworks published, read from data/published/ and planned beside their figures
// (docs/published.md).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "bench/bench_row.hpp"
#include "common/statistics.hpp"
#include "common/text.hpp"
#include "trainfit/error.hpp"
#include "trainfit/hardware.hpp"
#include "trainfit/measurements.hpp"
#include "trainfit/model.hpp"
#include "trainfit/plan.hpp"
#include "trainfit/settings.hpp"

namespace trainfit {
// Named, not anonymous: the quick start's unity build puts this file beside measurements.cpp,
// whose anonymous helpers share these names.
namespace published_reading {

using nlohmann::json;

const json& member(const json& o, const char* key) {
  static const json null_value;
  return o.is_object() && o.contains(key) ? o.at(key) : null_value;
}

std::string text(const json& o, const char* key) {
  const json& v = member(o, key);
  if (v.is_null()) return {};
  if (!v.is_string()) throw InputError(fmt::format("field \"{}\" must be a string", key));
  return v.get<std::string>();
}

std::optional<double> positive(const json& o, const char* key) {
  const json& v = member(o, key);
  if (v.is_null()) return std::nullopt;
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() <= 0)
    throw InputError(fmt::format("field \"{}\" must be a positive number", key));
  return v.get<double>();
}

// The units sources print memory in: GiB (torch's logging divides by 2^30), GB (some divide by
// 1e9, or round the GiB figure's name), MiB.
double bytes_per_unit(const std::string& unit) {
  if (unit == "GiB") return 1073741824.0;
  if (unit == "GB") return 1e9;
  if (unit == "MiB") return 1048576.0;
  throw InputError(fmt::format("field \"memory_unit\": '{}' is not GiB, GB or MiB", unit));
}

// The memory kinds the sources name, as the allocator's statistics (torch.cuda.memory_stats) call
// them: a peak of reserved bytes, of active bytes (allocated blocks and what they were rounded to),
// or of allocated bytes. Any other ("unknown", "nvidia-smi", "estimator") is not compared.
std::string memory_kind_of(const std::string& kind) {
  if (kind == "max_reserved") return "reserved";
  if (kind == "max_active") return "active";
  if (kind == "max_allocated") return "allocated";
  return {};
}

PublishedRun parse_run(const json& row, std::string_view source) {
  if (!row.is_object()) throw InputError("a published run must be a JSON object");
  PublishedRun r;
  r.id = text(row, "id");
  if (r.id.empty()) throw InputError("field \"id\" is missing");
  r.framework = text(row, "framework");
  r.url = text(member(row, "source"), "url");
  r.model = text(row, "model");
  r.gpu = text(row, "gpu");
  if (const auto g = positive(row, "gpus")) r.gpus = static_cast<std::int64_t>(*g);
  const json& ours = member(row, "trainfit");
  if (!ours.is_object())
    throw InputError(
        "field \"trainfit\" must be an object: the setup that expresses the run, or "
        "not_expressed");
  const json& measured = member(row, "measured");
  if (!measured.is_null() && !measured.is_object()) throw InputError("field \"measured\" must be an object");
  r.tokens_per_second_per_gpu = positive(measured, "tokens_per_sec_per_gpu");
  // A total throughput is a per-GPU one on one GPU, or where the framework's logging counts per
  // GPU though the source's table does not say so (the row's trainfit block says why).
  if (!r.tokens_per_second_per_gpu && (r.gpus == 1 || member(ours, "tokens_per_sec_is_per_gpu") == true))
    r.tokens_per_second_per_gpu = positive(measured, "tokens_per_sec");
  if (const auto memory = positive(measured, "peak_memory")) {
    const std::string kind =
        memory_kind_of(text(ours, "memory_kind").empty() ? text(measured, "memory_kind") : text(ours, "memory_kind"));
    if (!kind.empty()) {
      r.memory_bytes = *memory * bytes_per_unit(text(measured, "memory_unit"));
      r.memory_kind = kind;
    }
  }
  const json& setup = member(ours, "setup");
  const json& missing = member(ours, "not_expressed");
  if (setup.is_null() == missing.is_null())
    throw InputError("field \"trainfit\" must hold either \"setup\" or \"not_expressed\"");
  if (!setup.is_null()) {
    r.setup = setup_from_json(setup);
    if (r.setup->model.empty()) throw InputError("field \"trainfit.setup.model\" is missing");
    if (r.setup->model.ends_with(".json")) r.setup->model = bench::beside_the_file(r.setup->model, source);
    r.setup->gpu_spec = bench::beside_the_file(r.setup->gpu_spec, source);
    if (r.setup->gpu.empty() && r.setup->gpu_spec.empty())
      throw InputError("field \"trainfit.setup\" names no card (gpu or gpu_spec)");
  } else {
    if (!missing.is_array() || missing.empty())
      throw InputError("field \"not_expressed\" must be a non-empty list of what no setting describes");
    for (const json& what : missing) {
      if (!what.is_string() || what.get<std::string>().empty())
        throw InputError("field \"not_expressed\" must hold non-empty strings");
      r.not_expressed.push_back(what.get<std::string>());
    }
  }
  return r;
}

void fail(std::string_view source, int line, const std::string& what) {
  throw InputError(fmt::format("{}:{}: {}", source, line, what));
}

void add_line(std::vector<PublishedRun>& runs, std::string_view raw, std::string_view source, int line) {
  if (raw.find_first_not_of(" \t\r") == std::string_view::npos) return;
  if (runs.size() >= kMaxMeasurementRows) fail(source, line, fmt::format("more than {} runs", kMaxMeasurementRows));
  try {
    json row = json::parse(raw.begin(), raw.end());
    PublishedRun r = parse_run(row, source);
    r.source = std::string(source);
    r.line = line;
    for (const PublishedRun& earlier : runs)
      if (earlier.id == r.id) throw InputError(fmt::format("id '{}' is also line {}'s", r.id, earlier.line));
    runs.push_back(std::move(r));
  } catch (const json::exception& e) {
    fail(source, line, fmt::format("not JSON: {}", e.what()));
  } catch (const InputError& e) {
    fail(source, line, e.what());
  }
}

}  // namespace published_reading

std::vector<PublishedRun> parse_published_runs(std::string_view text, std::string_view source) {
  std::vector<PublishedRun> runs;
  detail::for_each_line_in(text, source, kMaxMeasurementLineBytes,
                           [&](int line, std::string_view raw) { published_reading::add_line(runs, raw, source, line); });
  return runs;
}

std::vector<PublishedRun> load_published_runs(std::string_view path) {
  std::vector<PublishedRun> runs;
  detail::for_each_line(path, "published runs file", {kMaxMeasurementLineBytes, kMaxMeasurementFileBytes},
                        [&](int line, std::string_view raw) { published_reading::add_line(runs, raw, path, line); });
  return runs;
}

PublishedSummary compare_with_published(const std::vector<PublishedRun>& runs, const TimeProfile* profile) {
  PublishedSummary out;
  out.runs = runs.size();
  std::map<std::string, std::size_t> blocked;
  std::vector<double> tokens_errors, memory_errors;
  for (const PublishedRun& run : runs) {
    if (!run.setup) {
      for (const std::string& what : run.not_expressed) ++blocked[what];
      continue;
    }
    try {
      const ModelSpec model = load_model(run.setup->model);
      const GpuSpec gpu = resolve_card(*run.setup);
      PlanOptions options;
      options.suggest = false;
      if (profile) options.profile = *profile;
      const Plan plan = make_plan(model, *run.setup, gpu, options);
      PublishedComparison c;
      c.run = &run;
      c.verdict = to_string(plan.verdict);
      c.time_profile_card = plan.profile.measured_on;
      if (plan.verdict == Verdict::oom || plan.verdict == Verdict::spills) ++out.planned_out_of_memory;
      if (plan.time.predicted) {
        c.predicted_tokens_per_second_per_gpu = plan.time.tokens_per_second / static_cast<double>(run.setup->gpus);
        if (run.tokens_per_second_per_gpu) {
          c.tokens_error = c.predicted_tokens_per_second_per_gpu / *run.tokens_per_second_per_gpu - 1.0;
          tokens_errors.push_back(std::abs(*c.tokens_error));
        }
      }
      if (run.memory_bytes) {
        c.predicted_memory_bytes = static_cast<double>(
            run.memory_kind == "reserved" ? plan.memory.peak_reserved_bytes : plan.memory.peak_allocated_bytes);
        c.memory_error = c.predicted_memory_bytes / *run.memory_bytes - 1.0;
        memory_errors.push_back(std::abs(*c.memory_error));
      }
      out.rows.push_back(std::move(c));
    } catch (const InputError& e) {
      published_reading::fail(run.source, run.line, e.what());
    }
  }
  out.blocked_by.assign(blocked.begin(), blocked.end());
  std::stable_sort(out.blocked_by.begin(), out.blocked_by.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  out.throughput_rows = tokens_errors.size();
  out.median_abs_tokens_error = detail::median(tokens_errors).value_or(0);
  out.max_abs_tokens_error = detail::max_abs(tokens_errors);
  out.memory_rows = memory_errors.size();
  out.median_abs_memory_error = detail::median(memory_errors).value_or(0);
  out.max_abs_memory_error = detail::max_abs(memory_errors);
  return out;
}

}  // namespace trainfit
