// `trainfit advise`: a grid over the free settings, judged group by group. A group is one setup
// less its micro-batch, accumulation and checkpointing: its step's tensors and work are described
// once (detail::SetupGroup) and each (batch, accumulation, checkpointing) priced from them. Batch ascends within a
// group, and memory grows with it, so the first batch over the card ends the group's search.
#include "trainfit/advise.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "common/threshold_search.hpp"
#include "plan/setup_grid.hpp"
#include "trainfit/error.hpp"
#include "trainfit/prices.hpp"
#include "trainfit/settings.hpp"
#include "trainfit/units.hpp"

namespace trainfit {

AdviseGoal parse_advise_goal(std::string_view s) {
  if (s == "fastest") return AdviseGoal::fastest;
  if (s == "largest-batch") return AdviseGoal::largest_batch;
  if (s == "longest-seq") return AdviseGoal::longest_seq;
  if (s == "least-memory") return AdviseGoal::least_memory;
  if (s == "cheapest") return AdviseGoal::cheapest;
  if (s == "fewest-gpus") return AdviseGoal::fewest_gpus;
  throw InputError(fmt::format(
      "unknown goal '{}'; expected fastest, largest-batch, longest-seq, least-memory, cheapest or fewest-gpus", s));
}

std::string to_string(AdviseGoal g) {
  switch (g) {
    case AdviseGoal::fastest:
      return "fastest";
    case AdviseGoal::largest_batch:
      return "largest-batch";
    case AdviseGoal::longest_seq:
      return "longest-seq";
    case AdviseGoal::least_memory:
      return "least-memory";
    case AdviseGoal::cheapest:
      return "cheapest";
    case AdviseGoal::fewest_gpus:
      return "fewest-gpus";
  }
  return "?";
}

const std::vector<std::string>& advisable_settings() {
  static const std::vector<std::string> keys = {"method", "rank",  "lora_targets", "optimizer",
                                                "seq",    "batch", "grad_accum",   "grad_ckpt",
                                                "attn",   "gpus",  "parallel",     "gpu"};
  return keys;
}

// What changes the speed and memory of the same training: how the step is cut into micro-batches,
// recomputation, the attention kernel, the optimizer's state precision, and how GPUs share the
// work. What changes the training itself (method, rank, targets, sequence) is free only when asked.
const std::vector<std::string>& free_by_default() {
  static const std::vector<std::string> keys = {"batch",     "grad_accum", "grad_ckpt", "attn",
                                                "optimizer", "gpus",       "parallel"};
  return keys;
}

namespace {

using Clock = std::chrono::steady_clock;


// The layouts advise tries on several GPUs when `parallel` is free, from the one that stores the
// most on each GPU to the one that stores the least: each scheme (its row's advise_offloads) in the
// order of what it shards (optimizer states, then gradients, then parameters, a layer kept gathered
// through its backward before one that is not), the table's order among equals.
std::vector<std::pair<Parallel, Offload>> data_parallel_layouts() {
  const std::vector<const DataParallelScheme*> schemes = data_parallel_schemes();
  std::vector<std::size_t> order(schemes.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  const auto stored_less = [&](std::size_t i) {
    const DataParallelScheme& d = *schemes[i];
    return int{d.shards_optimizer} + int{d.shards_gradients} + 2 * int{d.shards_parameters} - int{d.keeps_gathered};
  };
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return stored_less(a) < stored_less(b); });
  std::vector<std::pair<Parallel, Offload>> layouts;
  for (const std::size_t i : order)
    for (const Offload o : schemes[i]->advise_offloads) layouts.emplace_back(static_cast<Parallel>(i), o);
  return layouts;
}

// Values each free setting takes in the grid. Ranks and sequences are powers of two, as people
// choose them; the optimizers are the ones that train the same way at different state precision.
// The attention projections are named as the model's family names them.
std::vector<std::vector<std::string>> lora_target_choices(const ModelSpec& model) {
  using R = ModuleRole;
  const auto name = [&](R role) { return module_name(model, role); };
  return {{"all-linear"},
          {name(R::attention_query), name(R::attention_key), name(R::attention_value), name(R::attention_output)},
          {name(R::attention_query), name(R::attention_value)}};
}
constexpr std::int64_t kRanks[] = {8, 16, 32, 64};
constexpr std::int64_t kMaxMicroBatch = 4096;
constexpr std::int64_t kShortestSeq = 256;

// One judged point, kept small: the group it belongs to and its (batch, accumulation).
struct Judged {
  std::uint32_t group = 0;
  std::int64_t seq = 0;
  bool grad_ckpt = false;
  std::int64_t batch = 1;
  std::int64_t grad_accum = 1;
  detail::SetupGroup::Point point;
};

struct Group {
  TrainingSetup setup;  // batch and grad_accum to be set
  const GpuSpec* gpu = nullptr;
  const GpuPrice* price = nullptr;
};

bool is_free(const AdviseRequest& r, std::string_view key) {
  return std::find(r.free.begin(), r.free.end(), key) != r.free.end();
}

// Powers of two from 1 up to and including `most`. Doubling stops before it passes `most`: past
// 2^62 it would overflow (undefined; in practice negative, and the loop never ended while the
// vector grew until allocation failed: `advise --tokens-per-step` near 2^63).
std::vector<std::int64_t> powers_of_two(std::int64_t most) {
  std::vector<std::int64_t> out;
  if (most < 1) return out;
  for (std::int64_t v = 1;; v *= 2) {
    out.push_back(v);
    if (v > most / 2) break;
  }
  return out;
}

// How far a setup is from fitting: its busiest GPU's peak over the card less the headroom, or its
// device use over the card (<= 0 when it fits): the figures the verdict is judged on.
double shortfall(const detail::SetupGroup::Point& p, const GpuSpec& gpu, double headroom) {
  const double cap = static_cast<double>(gpu.memory_bytes);
  return std::max(static_cast<double>(p.busiest_peak_allocated_bytes) - cap * (1.0 - headroom),
                  static_cast<double>(p.busiest_device_used_bytes) - cap);
}

class Search {
 public:
  Search(const ModelSpec& model, const AdviseRequest& r) : model_(model), r_(r) {}

  Advice run() {
    const auto start = Clock::now();
    build_groups();
    for (std::uint32_t g = 0; g < groups_.size(); ++g) search_group(g);
    Advice out = finish();
    out.judged = judged_;
    out.searched = searched_;
    if (judged_ == 0) out.refusal = refusal_;
    out.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return out;
  }

 private:
  // Every combination of the free settings other than batch and accumulation, on every card.
  void build_groups() {
    if (r_.cards.empty()) {
      cards_.push_back(resolve_card(r_.base));
    } else {
      for (const std::string& id : r_.cards) cards_.push_back(find_gpu(id));
    }
    std::vector<std::function<std::vector<TrainingSetup>(const TrainingSetup&)>> axes;
    const auto axis = [&](std::string_view key, auto&& values) {
      if (is_free(r_, key)) axes.emplace_back(values);
    };
    axis("method", [](const TrainingSetup& s) {
      std::vector<TrainingSetup> out;
      for (const Method m : {Method::full, Method::lora, Method::qlora}) {
        TrainingSetup t = s;
        // The reference follows the method when it was the old method's default (plan's changes do the same).
        if (t.reference == default_reference(t.objective, t.method)) t.reference = default_reference(t.objective, m);
        t.method = m;
        t.weights = m == Method::qlora ? DType::nf4 : DType::bf16;
        t.amp.reset();
        out.push_back(t);
      }
      return out;
    });
    axis("rank", [](const TrainingSetup& s) {
      std::vector<TrainingSetup> out;
      for (const std::int64_t rank : kRanks) {
        TrainingSetup t = s;
        t.lora.rank = rank;
        t.lora.alpha = 2.0 * static_cast<double>(rank);  // the table's derived default: twice the rank
        out.push_back(t);
      }
      return out;
    });
    axis("lora_targets", [&](const TrainingSetup& s) {
      std::vector<TrainingSetup> out;
      for (const auto& targets : lora_target_choices(model_)) {
        TrainingSetup t = s;
        t.lora.targets = targets;
        out.push_back(t);
      }
      return out;
    });
    axis("optimizer", [](const TrainingSetup& s) {
      std::vector<TrainingSetup> out;
      for (const Optimizer o : {Optimizer::adamw, Optimizer::adamw_8bit}) {
        TrainingSetup t = s;
        t.optimizer = o;
        out.push_back(t);
      }
      return out;
    });
    // Checkpointing is not an axis of groups: a group describes its step once for both
    // (SetupGroup::at takes it), which halves the groups to build.
    checkpointing_ = is_free(r_, "grad_ckpt") ? std::vector<bool>{false, true} : std::vector<bool>{r_.base.grad_ckpt};
    axis("attn", [](const TrainingSetup& s) {
      TrainingSetup sdpa = s, eager = s;
      sdpa.attention = Attention::sdpa;
      eager.attention = Attention::eager;
      return std::vector<TrainingSetup>{sdpa, eager};
    });
    const bool gpus_free = is_free(r_, "gpus");
    const bool layout_free = is_free(r_, "parallel");
    const std::vector<std::pair<Parallel, Offload>> layouts = data_parallel_layouts();
    axes.emplace_back([&, layouts](const TrainingSetup& s) {
      std::vector<TrainingSetup> out;
      const std::vector<std::int64_t> counts =
          gpus_free ? powers_of_two(std::max<std::int64_t>(1, r_.gpus_max)) : std::vector<std::int64_t>{s.gpus};
      for (const std::int64_t n : counts) {
        TrainingSetup t = s;
        t.gpus = n;
        if (n == 1) {
          t.parallel = Parallel::ddp;  // the layout means nothing on one GPU
          out.push_back(t);
          continue;
        }
        if (!layout_free) {
          out.push_back(t);
          continue;
        }
        // The data-parallel layouts, from the one that stores the most to the one that stores the
        // least (a layout the setup cannot run, QLoRA under FSDP, is skipped when its group is priced).
        for (const auto& [p, offload] : layouts) {
          t.parallel = p;
          t.offload = offload;
          out.push_back(t);
        }
        t.offload = s.offload;
      }
      return out;
    });
    std::vector<TrainingSetup> setups = {r_.base};
    for (const auto& a : axes) {
      std::vector<TrainingSetup> next;
      for (const TrainingSetup& s : setups)
        for (TrainingSetup& t : a(s)) next.push_back(std::move(t));
      setups = std::move(next);
    }
    for (const GpuSpec& card : cards_) {
      const GpuPrice* price = r_.prices != nullptr ? r_.prices->find(card.id) : nullptr;
      if (r_.goal == AdviseGoal::cheapest && price == nullptr) continue;  // a cost is what it ranks by
      for (const TrainingSetup& s : setups) {
        Group g;
        g.setup = s;
        if (!r_.cards.empty()) {  // a catalogue card of the list; else the card as the user named it
          g.setup.gpu = card.id;
          g.setup.vram_bytes.reset();
          g.setup.gpu_spec.clear();
        }
        g.gpu = &card;
        g.price = price;
        groups_.push_back(std::move(g));
      }
    }
    if (groups_.empty())
      throw InputError(
          "--goal cheapest: none of the cards searched has a price (`trainfit gpus --for` lists "
          "them; --prices FILE adds yours)");
  }

  const TimeProfile& profile_for(const GpuSpec& gpu) {
    if (r_.profile) return *r_.profile;
    auto it = profiles_.find(gpu.id);
    if (it == profiles_.end()) it = profiles_.emplace(gpu.id, default_profile(gpu)).first;
    return it->second;
  }

  // The (batch, accumulation) pairs of a group, in ascending batch.
  // The (micro-batch, accumulation) pairs of a group; under grpo only those whose generation
  // batch holds whole groups of completions (validate's rule, which TRL enforces).
  std::vector<std::pair<std::int64_t, std::int64_t>> batches(const TrainingSetup& s) const {
    auto out = batches_in_range(s);
    if (s.objective != Objective::grpo) return out;
    const std::int64_t dp = data_parallel_degree(s);
    std::erase_if(out, [&](const auto& p) { return (p.first * p.second * dp) % s.generations != 0; });
    return out;
  }

  void refuse(std::string why) {
    if (refusal_.empty()) refusal_ = std::move(why);
  }

  // The largest value a setting takes (its row's maximum).
  static std::int64_t max_of(std::string_view key) {
    const Setting* s = find_setting(key);
    return s != nullptr && s->maximum ? static_cast<std::int64_t>(*s->maximum)
                                      : std::numeric_limits<std::int64_t>::max();
  }

  // The (micro-batch, accumulation) pairs of a sequence length, within the settings' ranges: a
  // token budget of 2^62 would otherwise advise billions of accumulation steps.
  std::vector<std::pair<std::int64_t, std::int64_t>> batches_in_range(const TrainingSetup& s) const {
    auto out = all_batches(s);
    const std::int64_t most_batch = max_of("batch"), most_accum = max_of("grad_accum");
    std::erase_if(out, [&](const auto& p) { return p.first > most_batch || p.second > most_accum; });
    return out;
  }

  std::vector<std::pair<std::int64_t, std::int64_t>> all_batches(const TrainingSetup& s) const {
    std::vector<std::pair<std::int64_t, std::int64_t>> out;
    const bool batch_free = is_free(r_, "batch"), accum_free = is_free(r_, "grad_accum");
    if (r_.goal == AdviseGoal::longest_seq) return {{r_.base.batch, r_.base.grad_accum}};
    if (r_.goal == AdviseGoal::largest_batch) {
      if (!batch_free) return {{r_.base.batch, r_.base.grad_accum}};
      for (const std::int64_t b : powers_of_two(kMaxMicroBatch)) out.emplace_back(b, r_.base.grad_accum);
      return out;
    }
    if (!batch_free && !accum_free) return {{r_.base.batch, r_.base.grad_accum}};
    // Hold the tokens of an optimizer step: sequences per step, shared by the GPUs.
    const std::int64_t tokens = tokens_per_step();
    if (tokens % (s.seq * s.gpus) != 0) return out;
    const std::int64_t per_gpu = tokens / (s.seq * s.gpus);
    if (!batch_free) {
      if (per_gpu % r_.base.batch == 0) out.emplace_back(r_.base.batch, per_gpu / r_.base.batch);
      return out;
    }
    for (const std::int64_t b : powers_of_two(per_gpu)) {
      if (per_gpu % b != 0) continue;
      const std::int64_t accum = per_gpu / b;
      if (!accum_free && accum != r_.base.grad_accum) continue;
      out.emplace_back(b, accum);
    }
    return out;
  }

  std::int64_t tokens_per_step() const {
    if (r_.tokens_per_step > 0) return r_.tokens_per_step;
    return r_.base.seq * r_.base.batch * r_.base.grad_accum * r_.base.gpus;
  }

  // The sequence lengths of a group: its own, or with the sequence free (and for the longest-seq
  // goal) every power of two from 256 up to the model's context (search_group then searches every
  // length between the last that fits and the first that does not, for the longest-seq goal).
  std::vector<std::int64_t> sequences(const TrainingSetup& s) const {
    if (r_.goal != AdviseGoal::longest_seq && !is_free(r_, "seq")) return {s.seq};
    std::vector<std::int64_t> out;
    const std::int64_t longest = model_.max_position_embeddings > 0 ? model_.max_position_embeddings : 131072;
    // Up to the longest sequence a setup takes, too: a config's context of 2^62 would overflow.
    const std::int64_t most = std::min<std::int64_t>(longest, static_cast<std::int64_t>(*find_setting("seq")->maximum));
    for (std::int64_t q = kShortestSeq; q <= most; q *= 2) out.push_back(q);
    return out;
  }

  void search_group(std::uint32_t index) {
    Group& g = groups_[index];
    std::int64_t last_fitting_seq = 0;
    for (const std::int64_t seq : sequences(g.setup)) {
      if (judge_sequence(index, seq)) {
        last_fitting_seq = seq;
        continue;
      }
      // Memory grows with the sequence: past the first that fits at no batch, none will. For the
      // longest sequence, every length between the last that fit and this one is searched
      // (halving the gap): the boundary is rarely a power of two.
      if (r_.goal == AdviseGoal::longest_seq && last_fitting_seq > 0) {
        std::int64_t lo = last_fitting_seq, hi = seq;
        while (hi - lo > 1) {
          const std::int64_t mid = lo + (hi - lo) / 2;
          (judge_sequence(index, mid) ? lo : hi) = mid;
        }
      }
      break;
    }
  }

  // Judges a group's setups at one sequence length; true when any fits.
  bool judge_sequence(std::uint32_t index, std::int64_t seq) {
    Group& g = groups_[index];
    TrainingSetup s = with_seq(g.setup, seq);
    s.batch = 1;
    s.grad_accum = 1;
    const auto pairs = batches(s);
    searched_ += pairs.size() * checkpointing_.size();
    if (pairs.empty()) {
      refuse(fmt::format("{} tokens a step is no whole number of micro-batches of {} tokens on {} GPU(s) with a "
                         "micro-batch of at most {} and at most {} accumulation steps",
                         tokens_per_step(), seq, s.gpus, max_of("batch"), max_of("grad_accum")));
      return false;
    }
    std::optional<detail::SetupGroup> priced;
    try {
      priced.emplace(model_, s, *g.gpu, profile_for(*g.gpu));  // validates the setup
    } catch (const InputError& e) {
      refuse(e.what());
      return false;  // a combination the setup does not allow (QLoRA with FSDP, targets the model lacks)
    }
    // Offloading needs the host memory to hold what it moves there (docs/advise.md).
    if (priced->host_bytes() > kTypicalHostBytesPerGpu * static_cast<double>(s.gpus / s.nodes)) {
      refuse(fmt::format("offloading needs {} of a host's memory, past the {} a host typically has for its {} GPU(s)",
                         format_bytes(count_of(priced->host_bytes())),
                         format_bytes(count_of(kTypicalHostBytesPerGpu * static_cast<double>(s.gpus / s.nodes))),
                         s.gpus / s.nodes));
      return false;
    }
    bool any_fits = false;
    for (const bool ckpt : checkpointing_) {
      std::int64_t last_fitting_batch = 0;
      const auto judge = [&](std::int64_t batch, std::int64_t accum) {
        const detail::SetupGroup::Point p = priced->at(batch, accum, ckpt);
        ++judged_;
        const Judged j{index, seq, ckpt, batch, accum, p};
        if (p.verdict == Verdict::fits) {
          fits_.push_back(j);
          return true;
        }
        const double over = shortfall(p, *g.gpu, s.headroom);
        if (!nearest_ || over < nearest_over_) {
          nearest_ = j;
          nearest_over_ = over;
        }
        return false;
      };
      for (const auto& [batch, accum] : pairs) {
        if (judge(batch, accum)) {
          any_fits = true;
          last_fitting_batch = batch;
          continue;
        }
        // Memory grows with the micro-batch: every larger one is further over. For the largest
        // batch, every micro-batch between the last that fit and this one is judged (halving the
        // gap), not powers of two only.
        if (r_.goal == AdviseGoal::largest_batch && last_fitting_batch > 0)
          detail::last_holding(last_fitting_batch, batch,
                               [&judge, a = accum](std::int64_t mid) { return judge(mid, a); });
        break;
      }
    }
    return any_fits;
  }

  TrainingSetup setup_of(const Judged& j) const {
    TrainingSetup s = with_seq(groups_[j.group].setup, j.seq);
    s.grad_ckpt = j.grad_ckpt;
    s.batch = j.batch;
    s.grad_accum = j.grad_accum;
    return s;
  }

  std::int64_t seq_of(std::size_t fit_index) const { return fits_[fit_index].seq; }

  // How many settings of a fitting point differ from the user's setup.
  int changes(std::size_t fit_index) const {
    const Judged& j = fits_[fit_index];
    const TrainingSetup& s = groups_[j.group].setup;
    const TrainingSetup& b = r_.base;
    return (s.method != b.method) + (s.lora.rank != b.lora.rank) + (s.lora.targets != b.lora.targets) +
           (s.optimizer != b.optimizer) + (j.grad_ckpt != b.grad_ckpt) + (s.attention != b.attention) +
           (s.gpus != b.gpus) + (s.parallel != b.parallel) + (s.offload != b.offload) + (s.gpu != b.gpu) + (seq_of(fit_index) != b.seq) +
           (j.batch != b.batch) + (j.grad_accum != b.grad_accum);
  }

  // The ranking key of a fitting point under the goal: smaller is better.
  double cost_of(const Judged& j) const {
    const Group& g = groups_[j.group];
    if (g.price == nullptr || j.point.tokens_per_second <= 0) return std::numeric_limits<double>::infinity();
    return static_cast<double>(g.setup.gpus) * g.price->usd_per_hour / j.point.tokens_per_second;
  }

  // A fitting point's place in the ranking, computed once: the goal's own measure (smaller is
  // better), then speed, then how many of the user's settings it changes, then memory. Speeds and
  // costs within 0.2% of each other share a bucket, a tie: the model is not that precise.
  struct RankKey {
    double goal = 0;
    double speed = 0;  // minus the speed bucket
    int changes = 0;
    std::int64_t peak = 0;
    std::size_t index = 0;
    auto operator<=>(const RankKey&) const = default;
  };

  static double bucket(double v) {
    return v > 0 && std::isfinite(v) ? std::floor(std::log(v) / std::log1p(0.002)) : std::numeric_limits<double>::max();
  }

  RankKey rank_key(std::size_t i) const {
    const Judged& j = fits_[i];
    RankKey k;
    switch (r_.goal) {
      case AdviseGoal::fastest:
        break;
      case AdviseGoal::largest_batch:
        k.goal = -static_cast<double>(j.batch);
        break;
      case AdviseGoal::longest_seq:
        k.goal = -static_cast<double>(j.seq);
        break;
      case AdviseGoal::least_memory:
        k.goal = static_cast<double>(j.point.peak_allocated_bytes);
        break;
      case AdviseGoal::cheapest:
        k.goal = bucket(cost_of(j));
        break;
      case AdviseGoal::fewest_gpus:
        k.goal = static_cast<double>(groups_[j.group].setup.gpus);
        break;
    }
    k.speed = -bucket(j.point.tokens_per_second);
    k.changes = changes(i);
    k.peak = j.point.peak_allocated_bytes;
    k.index = i;
    return k;
  }

  // A judged setup planned on its own, exactly as `trainfit plan` plans its arguments.
  AdvisedSetup materialise(const TrainingSetup& s, const Group& g) {
    PlanOptions o;
    o.suggest = false;
    o.profile = profile_for(*g.gpu);
    const Plan p = make_plan(model_, s, *g.gpu, o);
    AdvisedSetup a;
    a.setup = s;
    a.args = setup_to_args(s);
    a.gpu = *g.gpu;
    a.peak_allocated_bytes = p.memory.peak_allocated_bytes;
    a.device_used_bytes = p.memory.device_used_bytes;
    a.verdict = p.verdict;
    a.headroom_fraction = p.headroom_fraction;
    if (p.time.predicted) {
      a.step_seconds = p.time.step_seconds;
      a.tokens_per_second = p.time.tokens_per_second;
    }
    if (g.price != nullptr) a.usd_per_hour = g.price->usd_per_hour;
    if (r_.tokens > 0 && a.tokens_per_second > 0) {
      const RunCost c = run_cost(a.tokens_per_second, s.gpus, r_.tokens, g.price);
      a.hours = c.hours;
      a.cost = c.usd;
    }
    return a;
  }

  std::string why(const AdvisedSetup& a, const AdvisedSetup* first, std::size_t rank) const {
    const std::string free_pct = fmt::format("{:.0f}% of the card free", 100.0 * a.headroom_fraction);
    if (rank == 0) {
      switch (r_.goal) {
        case AdviseGoal::fastest:
          return fmt::format("the most tokens/s of {} fitting setups; {}", fits_.size(), free_pct);
        case AdviseGoal::largest_batch:
          return fmt::format("the largest micro-batch that fits ({}); {}", a.setup.batch, free_pct);
        case AdviseGoal::longest_seq:
          return fmt::format("the longest sequence that fits ({}); {}", a.setup.seq, free_pct);
        case AdviseGoal::least_memory:
          return fmt::format("the least memory of {} fitting setups; {}", fits_.size(), free_pct);
        case AdviseGoal::cheapest:
          return fmt::format("the lowest cost for the tokens of {} fitting setups; {}", fits_.size(), free_pct);
        case AdviseGoal::fewest_gpus:
          return fmt::format("the fewest GPUs that fit ({}), the fastest layout on them; {}", a.setup.gpus, free_pct);
      }
    }
    std::vector<std::string> parts;
    if (first->tokens_per_second > 0 && a.tokens_per_second > 0)
      parts.push_back(fmt::format("{:.0f}% of #1's tokens/s", 100.0 * a.tokens_per_second / first->tokens_per_second));
    const double mem = static_cast<double>(a.peak_allocated_bytes - first->peak_allocated_bytes) / (1024.0 * 1024.0);
    parts.push_back(fmt::format("{:+.0f} MiB against #1", mem));
    if (a.cost && first->cost) parts.push_back(fmt::format("{:.2f}x #1's cost", *a.cost / *first->cost));
    return fmt::format("{}", fmt::join(parts, ", "));
  }

  Advice finish() {
    Advice out;
    // Only the best few are ordered: a search may keep a million fitting points.
    std::vector<RankKey> order(fits_.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = rank_key(i);
    const std::size_t head = std::min(order.size(), 8 * r_.top);  // room for the same command reached twice
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(head), order.end());
    std::set<std::vector<std::string>> shown;
    for (std::size_t k = 0; k < order.size() && out.results.size() < r_.top; ++k) {
      if (k == head) std::sort(order.begin() + static_cast<std::ptrdiff_t>(head), order.end());
      const std::size_t i = order[k].index;
      const TrainingSetup s = setup_of(fits_[i]);
      if (!shown.insert(setup_to_args(s)).second) continue;  // the same command reached twice
      out.results.push_back(materialise(s, groups_[fits_[i].group]));
    }
    for (std::size_t k = 0; k < out.results.size(); ++k)
      out.results[k].why = why(out.results[k], &out.results.front(), k);
    // The boundary itself beside the recommendation: with all else as #1, where the step stops
    // running, and where it runs only with the allocator under pressure (docs/model.md).
    if (!out.results.empty() && (r_.goal == AdviseGoal::largest_batch || r_.goal == AdviseGoal::longest_seq)) {
      const AdvisedSetup& first = out.results.front();
      PlanOptions o;
      o.suggest = false;
      o.profile = profile_for(first.gpu);
      o.largest = r_.goal == AdviseGoal::largest_batch ? "batch" : "seq";
      out.boundary = make_plan(model_, first.setup, first.gpu, o).boundary;
    }
    // The Pareto front of memory against speed: by memory ascending, each point faster than all before.
    std::vector<std::size_t> by_memory(fits_.size());
    for (std::size_t i = 0; i < by_memory.size(); ++i) by_memory[i] = i;
    std::stable_sort(by_memory.begin(), by_memory.end(), [&](std::size_t a, std::size_t b) {
      const auto& x = fits_[a].point;
      const auto& y = fits_[b].point;
      if (x.peak_allocated_bytes != y.peak_allocated_bytes) return x.peak_allocated_bytes < y.peak_allocated_bytes;
      return x.tokens_per_second > y.tokens_per_second;
    });
    double fastest_so_far = -1;
    for (const std::size_t i : by_memory) {
      if (fits_[i].point.tokens_per_second <= fastest_so_far) continue;
      fastest_so_far = fits_[i].point.tokens_per_second;
      out.pareto.push_back(materialise(setup_of(fits_[i]), groups_[fits_[i].group]));
    }
    if (out.results.empty() && nearest_) {
      out.nearest = materialise(setup_of(*nearest_), groups_[nearest_->group]);
      out.nearest_over_bytes = count_of(std::ceil(nearest_over_));
    }
    return out;
  }

  const ModelSpec& model_;
  const AdviseRequest& r_;
  std::vector<GpuSpec> cards_;
  std::vector<bool> checkpointing_;  // the values of grad_ckpt searched
  std::vector<Group> groups_;
  std::map<std::string, TimeProfile> profiles_;
  std::vector<Judged> fits_;
  std::optional<Judged> nearest_;
  double nearest_over_ = 0;
  std::size_t judged_ = 0, searched_ = 0;
  std::string refusal_;  // why the first setup the search could not judge was refused
};

}  // namespace

Advice advise(const ModelSpec& model, const AdviseRequest& request) {
  for (const std::string& key : request.free)
    if (std::find(advisable_settings().begin(), advisable_settings().end(), key) == advisable_settings().end())
      throw InputError(
          fmt::format("advise cannot vary '{}'; it varies {}", key, fmt::join(advisable_settings(), ", ")));
  if (request.goal == AdviseGoal::cheapest && (request.prices == nullptr || request.tokens <= 0))
    throw InputError("--goal cheapest needs the tokens to train (--tokens N, or --epochs E --dataset-tokens N)");
  if (request.top == 0) throw InputError("--top must be at least 1");
  return Search(model, request).run();
}

}  // namespace trainfit
