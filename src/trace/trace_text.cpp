// `trainfit trace`'s output: a table, Markdown, or JSON (schema trainfit.trace/1), and the trace's
// measured terms beside a plan's predicted ones.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <numeric>
#include <string_view>
#include <nlohmann/json.hpp>

#include "common/text.hpp"
#include "trace/trace_data.hpp"
#include "trainfit/report.hpp"
#include "trainfit/trace.hpp"

namespace trainfit::trace {
namespace {

using nlohmann::json;

double category(const StepTrace& s, KernelCategory c) {
  return s.categories[static_cast<std::size_t>(c)];
}

// A verdict in JSON: its name, or null when there was nothing to judge.
json verdict_json(const std::optional<Bottleneck>& verdict) {
  return verdict ? json(to_string(*verdict)) : json(nullptr);
}

json step_json(const StepTrace& s) {
  json categories = json::object();
  for (std::size_t k = 0; k < kKernelCategories; ++k)
    categories[std::string(to_string(static_cast<KernelCategory>(k)))] = s.categories[k];
  json j = {{"name", s.name},
            {"begin_s", s.begin_s},
            {"wall_s", s.wall_s},
            {"gpu_busy_s", s.gpu_busy_s},
            {"idle_s", s.idle_s},
            {"input_wait_s", s.input_wait_s},
            {"sync_wait_s", s.sync_wait_s},
            {"host_wait_s", s.host_wait_s},
            {"categories", categories},
            {"communication_s", s.communication_s},
            {"communication_overlapped_s", s.communication_overlapped_s},
            {"kernels", s.kernels},
            {"kernel_median_s", s.kernel_median_s},
            {"launch_gap_median_s", s.launch_gap_median_s},
            {"device_wall_s", s.device_wall_s > 0 ? json(s.device_wall_s) : json(nullptr)},
            {"verdict", verdict_json(s.verdict)},
            {"evidence", s.evidence}};
  if (!s.timeline.empty()) j["timeline"] = s.timeline;
  return j;
}

json rank_json(const RankTrace& r) {
  json steps = json::array();
  for (const StepTrace& s : r.steps) steps.push_back(step_json(s));
  json kernels = json::array();
  for (const KernelStat& k : r.kernels_top)
    kernels.push_back(
        {{"name", k.name}, {"category", to_string(k.category)}, {"count", k.count}, {"total_s", k.total_s}});
  return {{"source", r.source},
          {"sources", r.sources},
          {"rank", r.rank >= 0 ? json(r.rank) : json(nullptr)},
          {"device", r.device},
          {"device_name", r.device_name},
          {"step_annotations", r.step_annotations},
          {"truncated", r.truncated},
          {"steps", steps},
          {"total", step_json(r.total)},
          {"verdict", verdict_json(r.total.verdict)},
          {"evidence", r.total.evidence},
          {"host_ran_ahead", r.host_ran_ahead},
          {"activity_s", r.activity_s},
          {"kernels_top", kernels},
          {"overlap",
           {{"communication_s", r.total.communication_s},
            {"overlapped_s", r.total.communication_overlapped_s},
            {"fraction", r.overlap_fraction}}},
          {"counts",
           {{"bytes", r.counts.bytes},
            {"events", r.counts.events},
            {"gpu_activities", r.counts.gpu_activities},
            {"malformed", r.counts.malformed},
            {"unsupported", r.counts.unsupported}}},
          {"warnings", r.warnings}};
}

json breakdown_json(const std::vector<MemoryTerm>& terms) {
  json out = json::object();
  for (const MemoryTerm& t : terms) out[t.category] = t.bytes;
  return out;
}

json stacks_json(const std::vector<AllocationStack>& stacks) {
  json out = json::array();
  for (const AllocationStack& st : stacks)
    out.push_back({{"frames", st.frames}, {"category", st.category}, {"bytes", st.bytes}, {"blocks", st.blocks}});
  return out;
}

json oom_json(const SnapshotOom& o) {
  return {{"requested_bytes", o.requested_bytes},
          {"segment_request_bytes", o.segment_request_bytes},
          {"allocated_bytes", o.allocated_bytes},
          {"reserved_bytes", o.reserved_bytes},
          {"cached_free_bytes", o.cached_free_bytes},
          {"largest_free_block_bytes", o.largest_free_block_bytes},
          {"device_free_bytes", o.device_free_bytes ? json(*o.device_free_bytes) : json(nullptr)},
          {"fragmentation", o.fragmentation},
          {"limit_needed_bytes", o.limit_needed_bytes ? json(*o.limit_needed_bytes) : json(nullptr)},
          {"unstranded_need_bytes", o.unstranded_need_bytes},
          {"time_s", o.time_s},
          {"moment", o.moment},
          {"oom_events", o.oom_events},
          {"breakdown", breakdown_json(o.breakdown)},
          {"top_stacks", stacks_json(o.top_stacks)}};
}

json snapshot_json(const SnapshotReport& s) {
  const json breakdown = breakdown_json(s.breakdown);
  const json stacks = stacks_json(s.top_stacks);
  return {{"source", s.source},
          {"peak_allocated_bytes", s.peak_allocated_bytes},
          {"reserved_at_peak_bytes", s.reserved_at_peak_bytes},
          {"allocator_peak_allocated_bytes",
           s.allocator_peak_allocated_bytes ? json(*s.allocator_peak_allocated_bytes) : json(nullptr)},
          {"peak_time_s", s.peak_time_s},
          {"peak_moment", s.peak_moment},
          {"breakdown", breakdown},
          {"free_cached_bytes", s.free_cached_bytes},
          {"largest_free_block_bytes", s.largest_free_block_bytes},
          {"fragmentation", s.fragmentation},
          {"top_stacks", stacks},
          {"history_events", s.history_events},
          {"oom", s.oom ? oom_json(*s.oom) : json(nullptr)},
          {"warnings", s.warnings}};
}

json comparison_json(const PlanComparison& c) {
  const auto rows = [](const std::vector<TermComparison>& terms) {
    json out = json::array();
    for (const TermComparison& t : terms)
      out.push_back({{"term", t.term}, {"measured", t.measured}, {"predicted", t.predicted}});
    return out;
  };
  return {{"time", rows(c.time)},
          {"memory", rows(c.memory)},
          {"measured_verdict", c.measured_verdict},
          {"predicted_verdict", c.predicted_verdict},
          {"largest_disagreement", c.largest_disagreement}};
}

std::string mib(double bytes) {
  return fmt::format("{:.1f}", bytes / 1048576.0);
}

std::string pct(double part, double whole) {
  return whole > 0 ? fmt::format("{:.0f}%", 100.0 * part / whole) : "-";
}

std::string shorten(const std::string& s, std::size_t n) {
  return s.size() <= n ? s : s.substr(0, n - 3) + "...";
}

// One row of the step table: seconds for wall and busy, shares of the wall for the rest.
std::vector<std::string> step_cells(const StepTrace& s) {
  const double w = s.wall_s;
  return {shorten(s.name, 20),
          fmt::format("{:.4f}", w),
          fmt::format("{:.4f}", s.gpu_busy_s),
          pct(s.gpu_busy_s, w),
          pct(s.input_wait_s, w),
          pct(s.sync_wait_s, w),
          pct(s.host_wait_s, w),
          pct(category(s, KernelCategory::matmul), w),
          pct(category(s, KernelCategory::attention), w),
          pct(category(s, KernelCategory::elementwise), w),
          pct(category(s, KernelCategory::optimizer), w),
          pct(s.communication_s, w),
          pct(category(s, KernelCategory::copy_h2d) + category(s, KernelCategory::copy_d2h), w),
          verdict_name(s.verdict)};
}

const std::vector<std::string> kStepHeader = {"step",   "wall s", "busy s", "busy",  "input", "sync",  "host",
                                              "matmul", "attn",   "elem",   "optim", "comm",  "h<->d", "verdict"};

// Rows (the first the headers) as a text or markdown table. The first and last columns are
// left-aligned, the rest right-aligned. In text, the table keeps to kTextColumns: columns two spaces
// apart, or one when two would not fit, and the last column (a kernel's name, an allocation's
// frames) cut short with "..." where it would run past; no trailing spaces.
std::string table(std::vector<std::vector<std::string>> rows, bool markdown) {
  std::vector<std::size_t> width(rows.front().size(), 0);
  for (const auto& row : rows)
    for (std::size_t k = 0; k < row.size(); ++k) width[k] = std::max(width[k], row[k].size());
  std::size_t gap = 2;
  if (!markdown) {
    std::size_t all = 0;
    for (const std::size_t w : width) all += w + gap;
    if (all - gap > trainfit::detail::kTextColumns) gap = 1;
    const std::size_t before_last = std::accumulate(width.begin(), width.end() - 1, std::size_t{0}) + gap * (width.size() - 1);
    const std::size_t room = trainfit::detail::kTextColumns > before_last + 12 ? trainfit::detail::kTextColumns - before_last : 12;
    for (auto& row : rows) row.back() = shorten(row.back(), room);
    width.back() = std::min(width.back(), room);
  }
  std::string out;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    if (markdown) out += "|";
    std::string line;
    for (std::size_t k = 0; k < rows[r].size(); ++k) {
      const std::string& cell = rows[r][k];
      const bool left = k == 0 || k + 1 == rows[r].size();
      const std::string padded = left ? fmt::format("{:<{}}", cell, width[k]) : fmt::format("{:>{}}", cell, width[k]);
      if (markdown) {
        out += ' ';
        out += padded;
        out += " |";
      } else {
        if (k > 0) line += std::string(gap, ' ');
        line += padded;
      }
    }
    if (!markdown) out += line.substr(0, line.find_last_not_of(' ') + 1);
    out += '\n';
    if (markdown && r == 0) {
      out += "|";
      for (std::size_t k = 0; k < width.size(); ++k) {
        out += std::string(width[k] + 2, '-');
        out += '|';
      }
      out += '\n';
    }
  }
  return out;
}

std::string rank_text(const RankTrace& r, bool markdown) {
  std::string out;
  const std::string name = std::filesystem::path(r.source).filename().string();
  out += markdown ? "### " : "";
  const std::size_t more = r.sources.size() > 1 ? r.sources.size() - 1 : 0;
  out +=
      fmt::format("{}{}: {}{}{}, {} step{}, {} events, {} of JSON\n", name,
                  more > 0 ? fmt::format(" and {} more file{} of its process", more, more == 1 ? "" : "s") : "",
                  r.rank >= 0 ? fmt::format("rank {}, ", r.rank) : "", r.device_name.empty() ? "" : r.device_name + " ",
                  r.device >= 0 ? fmt::format("device {}", r.device) : "no device", r.steps.size(),
                  r.steps.size() == 1 ? "" : "s", r.counts.events, mib(static_cast<double>(r.counts.bytes)) + " MiB");
  if (markdown) out += '\n';
  std::vector<std::vector<std::string>> rows{kStepHeader};
  for (const StepTrace& s : r.steps) rows.push_back(step_cells(s));
  if (r.steps.size() > 1) rows.push_back(step_cells(r.total));
  out += table(rows, markdown);
  out += fmt::format("\n{}verdict: {}{} ({})\n", markdown ? "**" : "", verdict_name(r.total.verdict),
                     markdown ? "**" : "", r.total.evidence);
  if (r.total.communication_s > 0)
    out += fmt::format("overlap: collectives {:.4f} s, {:.0f}% of it overlapped with compute kernels\n",
                       r.total.communication_s, 100.0 * r.overlap_fraction);
  if (!r.kernels_top.empty()) {
    out += markdown ? "\nTop kernels:\n\n" : "\ntop kernels:\n";
    std::vector<std::vector<std::string>> k{{"total s", "share", "count", "category", "name"}};
    for (const KernelStat& s : r.kernels_top)
      k.push_back({fmt::format("{:.4f}", s.total_s), pct(s.total_s, r.activity_s), fmt::format("{}", s.count),
                   std::string(to_string(s.category)), s.name});
    out += table(k, markdown);
  }
  for (const std::string& w : r.warnings) out += fmt::format("{}note: {}\n", markdown ? "\n" : "", w);
  return out;
}

std::string comparison_text(const PlanComparison& c, bool markdown) {
  std::string out = markdown ? "\n### Beside the plan\n" : "\nbeside the plan";
  if (!c.time.empty()) {
    out += markdown ? "\n" : " (per step; the trace's median over its steps):\n";
    std::vector<std::vector<std::string>> rows{{"term", "measured s", "predicted s", "difference"}};
    for (const TermComparison& t : c.time)
      rows.push_back({t.term, fmt::format("{:.4f}", t.measured), fmt::format("{:.4f}", t.predicted),
                      fmt::format("{:+.4f}", t.measured - t.predicted)});
    out += table(rows, markdown);
    out += fmt::format("verdict: measured {}, predicted {}; largest disagreement: {}\n", c.measured_verdict,
                       c.predicted_verdict, c.largest_disagreement);
  } else {
    out += markdown ? "\n" : ":\n";
  }
  if (!c.memory.empty()) {
    out += markdown ? "\n" : "\nmemory at the peak (MiB):\n";
    std::vector<std::vector<std::string>> m{{"category", "measured MiB", "predicted MiB", "difference"}};
    for (const TermComparison& t : c.memory)
      m.push_back(
          {t.term, mib(t.measured), mib(t.predicted), fmt::format("{:+.1f}", (t.measured - t.predicted) / 1048576.0)});
    out += table(m, markdown);
  }
  return out;
}

}  // namespace

namespace {

std::string terms_table(const std::vector<MemoryTerm>& terms, std::int64_t whole, bool markdown) {
  std::vector<std::vector<std::string>> rows{{"category", "MiB", "share"}};
  for (const MemoryTerm& t : terms)
    rows.push_back({t.category, mib(static_cast<double>(t.bytes)),
                    pct(static_cast<double>(t.bytes), static_cast<double>(whole))});
  return table(rows, markdown);
}

std::string stacks_table(const std::vector<AllocationStack>& stacks, bool markdown) {
  std::vector<std::vector<std::string>> st{{"MiB", "blocks", "category", "frames"}};
  for (const AllocationStack& a : stacks)
    st.push_back({mib(static_cast<double>(a.bytes)), fmt::format("{}", a.blocks), a.category, a.frames});
  return table(st, markdown);
}

// Why it ran out, first: the request, what the allocator held, and whether the memory was there
// but in pieces (docs/trace.md, "Why it ran out").
std::string oom_text(const SnapshotOom& o, bool markdown) {
  const auto m = [](std::int64_t bytes) { return mib(static_cast<double>(bytes)); };
  std::string out = fmt::format(
      "{}out of memory at {:.3f} s of the history: a request of {} MiB failed (the allocator asked the driver for "
      "a segment of {} MiB: PyTorch's \"Tried to allocate\")\n",
      markdown ? "### " : "", o.time_s, m(o.requested_bytes), m(o.segment_request_bytes));
  out += fmt::format("{}allocated {} MiB, reserved {} MiB: {} MiB cached free, the largest free block {} MiB\n",
                     markdown ? "\n" : "  ", m(o.allocated_bytes), m(o.reserved_bytes), m(o.cached_free_bytes),
                     m(o.largest_free_block_bytes));
  if (o.fragmentation)
    out += fmt::format(
        "{}fragmentation: the allocator held {} MiB free, more than the request, but in no block of {} MiB; "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lets a segment grow instead of leaving gaps\n",
        markdown ? "\n" : "  ", m(o.cached_free_bytes), m(o.requested_bytes));
  else
    out += fmt::format(
        "{}not fragmentation: the request was {} MiB more than all the allocator held free{}\n",
        markdown ? "\n" : "  ", m(o.requested_bytes - o.cached_free_bytes),
        !o.device_free_bytes ? std::string()
        : *o.device_free_bytes >= o.requested_bytes
            ? fmt::format("; the driver called {} MiB of the card free, enough, so the process was held to less "
                          "than the card (set_per_process_memory_fraction, or another process's memory)",
                          m(*o.device_free_bytes))
            : fmt::format("; the driver called {} MiB of the card free", m(*o.device_free_bytes)));
  if (o.limit_needed_bytes)
    out += fmt::format(
        "{}replayed through the caching allocator's rules, this history gets past the request with an allocator "
        "limit of {} MiB or more; were no free memory stranded, {} MiB (allocated + request)\n",
        markdown ? "\n" : "  ", m(*o.limit_needed_bytes), m(o.unstranded_need_bytes));
  out += fmt::format("{}the request: {}\n", markdown ? "\n" : "  ", shorten(o.moment, 160));
  out += markdown ? "\n" : "\nalive at the out-of-memory error:\n";
  out += terms_table(o.breakdown, o.reserved_bytes, markdown);
  if (!o.top_stacks.empty()) {
    out += markdown ? "\nLargest allocation stacks at the error:\n\n" : "\nlargest allocation stacks at the error:\n";
    out += stacks_table(o.top_stacks, markdown);
  }
  return out;
}

}  // namespace

std::string render_snapshot(const SnapshotReport& s, const PlanComparison* comparison, Format format) {
  if (format == Format::json || format == Format::html) {
    json j = {{"schema", "trainfit.trace/1"}, {"snapshot", snapshot_json(s)}};
    if (comparison) j["plan"] = comparison_json(*comparison);
    if (format == Format::html)
      return render_html_report("trace", fmt::format("trainfit trace --snapshot {}", s.source), j);
    return j.dump(2) + "\n";
  }
  const bool markdown = format == Format::markdown;
  std::string out = s.oom ? oom_text(*s.oom, markdown) + '\n' : std::string();
  out +=
      fmt::format("{}{}: peak allocated {} MiB (reserved {} MiB) at {:.3f} s of the history\n", markdown ? "### " : "",
                  std::filesystem::path(s.source).filename().string(), mib(static_cast<double>(s.peak_allocated_bytes)),
                  mib(static_cast<double>(s.reserved_at_peak_bytes)), s.peak_time_s);
  if (s.allocator_peak_allocated_bytes && *s.allocator_peak_allocated_bytes > 0)
    out += fmt::format("{}the allocator's own peak (max_memory_allocated): {} MiB ({:+.2f}%)\n", markdown ? "\n" : "",
                       mib(static_cast<double>(*s.allocator_peak_allocated_bytes)),
                       100.0 * static_cast<double>(s.peak_allocated_bytes - *s.allocator_peak_allocated_bytes) /
                           static_cast<double>(*s.allocator_peak_allocated_bytes));
  out += fmt::format("{}peak moment: {}\n", markdown ? "\n" : "",
                     shorten(s.peak_moment, markdown ? 160 : trainfit::detail::kTextColumns - std::string_view("peak moment: ").size()));
  out += markdown ? "\n" : "\nalive at the peak:\n";
  out += terms_table(s.breakdown, s.reserved_at_peak_bytes, markdown);
  out += fmt::format("\nfragmentation at the dump: {:.0f}% ({} MiB cached free, largest free block {} MiB)\n",
                     100.0 * s.fragmentation, mib(static_cast<double>(s.free_cached_bytes)),
                     mib(static_cast<double>(s.largest_free_block_bytes)));
  if (!s.top_stacks.empty()) {
    out += markdown ? "\nLargest allocation stacks:\n\n" : "\nlargest allocation stacks at the peak:\n";
    out += stacks_table(s.top_stacks, markdown);
  }
  for (const std::string& w : s.warnings) out += fmt::format("note: {}\n", w);
  if (comparison) out += comparison_text(*comparison, markdown);
  return markdown ? out : trainfit::detail::fitted_lines(out, 2);
}

std::string render_trace(const TraceReport& report, const SnapshotReport* snapshot, const PlanComparison* comparison,
                         Format format) {
  if (format == Format::json || format == Format::html) {
    json ranks = json::array();
    for (const RankTrace& r : report.ranks) ranks.push_back(rank_json(r));
    // The first rank's figures at the top level (the only one, for a single file), every rank under "ranks".
    json j = ranks.empty() ? json::object() : ranks.front();
    j["schema"] = "trainfit.trace/1";
    j["ranks"] = ranks;
    j["straggler"] = report.straggler >= 0
                         ? json{{"index", report.straggler},
                                {"rank", report.ranks[static_cast<std::size_t>(report.straggler)].rank},
                                {"evidence", report.straggler_evidence}}
                         : json(nullptr);
    if (report.ranks.size() > 1) j["straggler_check"] = report.straggler_evidence;
    j["skipped"] = report.skipped;
    if (snapshot) j["snapshot"] = snapshot_json(*snapshot);
    if (comparison) j["plan"] = comparison_json(*comparison);
    // The HTML report is the same document drawn by the page's charts (web/charts.js, renderTrace).
    if (format == Format::html)
      return render_html_report(
          "trace", fmt::format("trainfit trace {}", report.ranks.empty() ? std::string() : report.ranks.front().source),
          j);
    return j.dump(2) + "\n";
  }
  const bool markdown = format == Format::markdown;
  std::string out;
  for (std::size_t k = 0; k < report.ranks.size(); ++k) {
    if (k > 0) out += '\n';
    out += rank_text(report.ranks[k], markdown);
  }
  if (report.ranks.size() > 1) out += fmt::format("\nstraggler: {}\n", report.straggler_evidence);
  for (const std::string& note : report.skipped) out += fmt::format("{}skipped: {}\n", markdown ? "\n" : "", note);
  if (snapshot) out += '\n' + render_snapshot(*snapshot, nullptr, format);
  if (comparison) out += comparison_text(*comparison, markdown);
  return markdown ? out : trainfit::detail::fitted_lines(out, 2);
}

namespace {

// The snapshot's categories at the peak beside the plan's breakdown, and the peaks.
std::vector<TermComparison> memory_terms(const SnapshotReport* snapshot, const Plan& plan) {
  std::vector<TermComparison> out;
  if (!snapshot) return out;
  std::map<std::string, std::pair<double, double>> by_category;
  for (const MemoryTerm& m : snapshot->breakdown) by_category[m.category].first += static_cast<double>(m.bytes);
  for (const MemoryTerm& m : plan.memory.breakdown) by_category[m.category].second += static_cast<double>(m.bytes);
  out.push_back({"peak_allocated", static_cast<double>(snapshot->peak_allocated_bytes),
                 static_cast<double>(plan.memory.peak_allocated_bytes)});
  for (const auto& [category, values] : by_category) out.push_back({category, values.first, values.second});
  return out;
}

}  // namespace

PlanComparison compare_with_plan(const RankTrace& trace, const SnapshotReport* snapshot, const Plan& plan) {
  PlanComparison c;
  const auto median_over_steps = [&](auto figure) {
    std::vector<double> values;
    for (const StepTrace& s : trace.steps) values.push_back(figure(s));
    return detail::median_of(values);
  };
  const auto predicted = [&](std::initializer_list<std::string_view> terms) {
    double total = 0;
    for (const TimeTerm& t : plan.time.breakdown)
      if (std::find(terms.begin(), terms.end(), t.name) != terms.end()) total += t.seconds;
    return total;
  };
  const TimeEstimate& t = plan.time;
  c.predicted_verdict = to_string(plan.time.bottleneck);
  if (trace.steps.empty()) {  // a snapshot alone: memory only
    c.memory = memory_terms(snapshot, plan);
    return c;
  }
  c.time = {
      {"step", median_over_steps([](const StepTrace& s) { return s.wall_s; }), t.step_seconds},
      {"matmul", median_over_steps([](const StepTrace& s) { return category(s, KernelCategory::matmul); }),
       predicted({"matmul", "adapters_fp32"})},
      {"attention", median_over_steps([](const StepTrace& s) { return category(s, KernelCategory::attention); }),
       predicted({"attention"})},
      {"memory_traffic", median_over_steps([](const StepTrace& s) {
         return category(s, KernelCategory::elementwise) + category(s, KernelCategory::copy_d2d);
       }),
       predicted({"memory_traffic", "kernel_floor"})},
      {"optimizer", median_over_steps([](const StepTrace& s) { return category(s, KernelCategory::optimizer); }),
       predicted({"optimizer"})},
      {"communication", median_over_steps([](const StepTrace& s) { return s.communication_s; }),
       predicted({"communication"})},
      {"gpu_idle", median_over_steps([](const StepTrace& s) { return s.idle_s; }),
       std::max(0.0, t.step_seconds - t.gpu_seconds - t.communication_seconds)},
      {"input_wait", median_over_steps([](const StepTrace& s) { return s.input_wait_s; }), 0.0},
  };
  double worst = -1;
  for (const TermComparison& term : c.time) {
    if (term.term == "step") continue;
    const double gap = std::fabs(term.measured - term.predicted);
    if (gap > worst) {
      worst = gap;
      c.largest_disagreement =
          fmt::format("{} (measured {:.4f} s, predicted {:.4f} s a step)", term.term, term.measured, term.predicted);
    }
  }
  c.measured_verdict = verdict_name(trace.total.verdict);
  c.memory = memory_terms(snapshot, plan);
  return c;
}

}  // namespace trainfit::trace
