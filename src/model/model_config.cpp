// Reads the shape of a decoder-only transformer from a Hugging Face config.json.
//
// Each family is read the way transformers' own Config and modeling classes read it:
// the same field names, the same defaults when a field is absent or null, and bias /
// norm layouts that mirror the nn.Module tree, so that count_parameters() equals
// sum(p.numel() for p in model.parameters()) exactly.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainfit/error.hpp"
#include "trainfit/model.hpp"

namespace trainfit {
namespace {

using nlohmann::json;

constexpr std::string_view kSupportedFamilies =
    "llama, qwen2, qwen3, mistral, gemma, gemma2, phi3, mixtral, qwen2_moe, qwen3_moe";

// Upper bounds well beyond any real model; past them the config is a typo or an attack,
// and keeping every shape small enough rules out int64 overflow in the products below.
constexpr std::int64_t kMaxHidden = 1'000'000;
constexpr std::int64_t kMaxLayers = 10'000;
constexpr std::int64_t kMaxVocab = 10'000'000;
constexpr std::int64_t kMaxHeads = 100'000;
constexpr std::int64_t kMaxHeadDim = 100'000;
constexpr std::int64_t kMaxIntermediate = 10'000'000;
constexpr std::int64_t kMaxExperts = 100'000;
constexpr std::int64_t kMaxPositions = 1'000'000'000;
// More parameters than this (a quadrillion) is not a model anyone trains.
constexpr std::int64_t kMaxTotalParameters = 1'000'000'000'000'000;

// A short, non-recursive rendering of a value for error messages: a config can hold
// anything, and echoing a megabyte or a deeply nested array back would not help.
std::string describe(const json& v) {
  switch (v.type()) {
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::null: return "null";
    case json::value_t::string: {
      const auto& s = v.get_ref<const std::string&>();
      std::string shown = s.size() > 40 ? s.substr(0, 40) + "..." : s;
      return json(shown).dump(-1, ' ', false, json::error_handler_t::replace);
    }
    default: return v.dump(-1, ' ', false, json::error_handler_t::replace);
  }
}

class ConfigReader {
 public:
  ConfigReader(const json& config, std::string_view source) : config_(config), source_(source) {}

  [[noreturn]] void fail(const std::string& message) const {
    throw InputError(std::string(source_) + ": " + message);
  }

  // nullptr when the field is absent or null: transformers treats both as "use the default".
  const json* find(std::string_view field) const {
    auto it = config_.find(field);
    if (it == config_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  std::int64_t require_int(std::string_view field, std::int64_t min, std::int64_t max) const {
    const json* v = find(field);
    if (v == nullptr) fail("missing required field \"" + std::string(field) + "\"");
    return to_int(field, *v, min, max);
  }

  std::int64_t optional_int(std::string_view field, std::int64_t fallback, std::int64_t min,
                            std::int64_t max) const {
    const json* v = find(field);
    return v == nullptr ? fallback : to_int(field, *v, min, max);
  }

  bool optional_bool(std::string_view field, bool fallback) const {
    const json* v = find(field);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) {
      fail("field \"" + std::string(field) + "\" must be true or false (got " + describe(*v) + ")");
    }
    return v->get<bool>();
  }

  std::string optional_string(std::string_view field, const std::string& fallback) const {
    const json* v = find(field);
    if (v == nullptr) return fallback;
    if (!v->is_string()) {
      fail("field \"" + std::string(field) + "\" must be a string (got " + describe(*v) + ")");
    }
    return v->get<std::string>();
  }

  double optional_nonnegative_number(std::string_view field, double fallback) const {
    const json* v = find(field);
    if (v == nullptr) return fallback;
    if (!v->is_number() || !std::isfinite(v->get<double>()) || v->get<double>() < 0.0) {
      fail("field \"" + std::string(field) + "\" must be a non-negative number (got " + describe(*v) +
           ")");
    }
    return v->get<double>();
  }

  // Indices of mlp_only_layers that fall inside [0, layers); transformers ignores the rest.
  std::vector<bool> layer_set(std::string_view field, std::int64_t layers) const {
    std::vector<bool> in_set(static_cast<std::size_t>(layers), false);
    const json* v = find(field);
    if (v == nullptr) return in_set;
    if (!v->is_array()) {
      fail("field \"" + std::string(field) + "\" must be a list of layer indices (got " + describe(*v) +
           ")");
    }
    for (const json& item : *v) {
      if (!item.is_number_integer()) {
        fail("field \"" + std::string(field) + "\" must be a list of layer indices (got an element " +
             describe(item) + ")");
      }
      if (item.is_number_unsigned() ? item.get<std::uint64_t>() < static_cast<std::uint64_t>(layers)
                                    : (item.get<std::int64_t>() >= 0 && item.get<std::int64_t>() < layers)) {
        in_set[static_cast<std::size_t>(item.get<std::int64_t>())] = true;
      }
    }
    return in_set;
  }

 private:
  std::int64_t to_int(std::string_view field, const json& v, std::int64_t min, std::int64_t max) const {
    const std::string name = "field \"" + std::string(field) + "\"";
    const std::string kind = min > 0 ? "a positive integer" : "a non-negative integer";
    if (!v.is_number_integer()) fail(name + " must be " + kind + " (got " + describe(v) + ")");
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(max)) {
      fail(name + " must be at most " + std::to_string(max) + " (got " + describe(v) + ")");
    }
    const auto value = v.get<std::int64_t>();
    if (value < min) fail(name + " must be " + kind + " (got " + describe(v) + ")");
    if (value > max) fail(name + " must be at most " + std::to_string(max) + " (got " + describe(v) + ")");
    return value;
  }

  const json& config_;
  std::string_view source_;
};

bool is_family(std::string_view t) {
  constexpr std::string_view families[] = {"llama",   "qwen2",  "qwen3", "mistral",   "gemma",
                                           "gemma2",  "phi3",   "mixtral", "qwen2_moe", "qwen3_moe"};
  return std::find(std::begin(families), std::end(families), t) != std::end(families);
}

void read_attention(const ConfigReader& r, ModelSpec& m) {
  m.num_heads = r.require_int("num_attention_heads", 1, kMaxHeads);
  m.num_kv_heads = r.optional_int("num_key_value_heads", m.num_heads, 1, kMaxHeads);
  if (m.num_kv_heads > m.num_heads || m.num_heads % m.num_kv_heads != 0) {
    r.fail("field \"num_key_value_heads\" (" + std::to_string(m.num_kv_heads) +
           ") must divide \"num_attention_heads\" (" + std::to_string(m.num_heads) + ")");
  }
  // Gemma and Qwen3 configs default head_dim to a constant; everyone else divides.
  std::int64_t default_head_dim = m.hidden_size / m.num_heads;
  if (m.model_type == "gemma" || m.model_type == "gemma2") default_head_dim = 256;
  if (m.model_type == "qwen3") default_head_dim = 128;
  m.head_dim = r.optional_int("head_dim", default_head_dim, 1, kMaxHeadDim);
  if (m.head_dim == 0) {
    r.fail("field \"num_attention_heads\" (" + std::to_string(m.num_heads) + ") exceeds \"hidden_size\" (" +
           std::to_string(m.hidden_size) + "), which leaves no head dimension; give \"head_dim\"");
  }
  if (m.num_heads * m.head_dim > kMaxIntermediate) {
    r.fail("field \"head_dim\" (" + std::to_string(m.head_dim) + ") times \"num_attention_heads\" (" +
           std::to_string(m.num_heads) + ") must be at most " + std::to_string(kMaxIntermediate));
  }

  const std::string& t = m.model_type;
  if (t == "qwen2") {
    m.attention_bias = true;  // Qwen2Attention hard-codes bias on q/k/v and none on o
  } else if (t == "qwen2_moe") {
    m.attention_bias = r.optional_bool("qkv_bias", true);
  } else if (t == "llama" || t == "qwen3" || t == "qwen3_moe" || t == "gemma" || t == "gemma2") {
    m.attention_bias = r.optional_bool("attention_bias", false);
    m.attention_out_bias = m.attention_bias;
  }
  // mistral, mixtral and phi3 build every projection with bias=False whatever the config says.
  m.mlp_bias = t == "llama" && r.optional_bool("mlp_bias", false);
  m.qk_norm = t == "qwen3" || t == "qwen3_moe";
  m.fused_qkv = t == "phi3";
}

void read_experts(const ConfigReader& r, ModelSpec& m) {
  const std::string& t = m.model_type;
  if (t == "mixtral") {
    m.num_experts = r.require_int("num_local_experts", 1, kMaxExperts);
    m.moe_intermediate_size = m.intermediate_size;  // Mixtral's experts are full-size MLPs
  } else {
    m.num_experts = r.require_int("num_experts", 1, kMaxExperts);
    m.moe_intermediate_size = r.require_int("moe_intermediate_size", 1, kMaxIntermediate);
    if (t == "qwen2_moe") {
      m.shared_expert_intermediate_size = r.require_int("shared_expert_intermediate_size", 1, kMaxIntermediate);
    }
  }
  m.experts_per_token = r.require_int("num_experts_per_tok", 1, kMaxExperts);
  if (m.experts_per_token > m.num_experts) {
    r.fail("field \"num_experts_per_tok\" (" + std::to_string(m.experts_per_token) +
           ") must not exceed the number of experts (" + std::to_string(m.num_experts) + ")");
  }
  if (t == "mixtral") return;

  // Qwen MoE decoder layer i is sparse when i is not in mlp_only_layers and (i+1) % step == 0.
  const std::int64_t step = r.optional_int("decoder_sparse_step", 1, 1, kMaxLayers);
  const std::vector<bool> mlp_only = r.layer_set("mlp_only_layers", m.num_layers);
  for (std::int64_t i = 0; i < m.num_layers; ++i) {
    if (mlp_only[static_cast<std::size_t>(i)] || (i + 1) % step != 0) ++m.dense_layers;
  }
  if (m.dense_layers > 0 && m.intermediate_size == 0) {
    r.fail("missing required field \"intermediate_size\" (the dense layers need it)");
  }
}

}  // namespace

ModelSpec parse_model_config(std::string_view json_text, std::string_view source_name) {
  json config;
  try {
    config = json::parse(json_text.begin(), json_text.end());
  } catch (const json::exception& e) {
    // nlohmann prefixes its messages with "[json.exception.parse_error.101] "; the byte position matters, the tag does not.
    std::string what = e.what();
    if (auto pos = what.find("] "); pos != std::string::npos) what.erase(0, pos + 2);
    throw InputError(std::string(source_name) + ": not valid JSON: " + what);
  }
  const ConfigReader r(config, source_name);
  if (!config.is_object()) r.fail("expected a JSON object at the top level (got " + describe(config) + ")");

  ModelSpec m;
  m.name = std::string(source_name);
  const json* type = r.find("model_type");
  if (type == nullptr) r.fail("missing required field \"model_type\" (supported: " + std::string(kSupportedFamilies) + ")");
  if (!type->is_string() || !is_family(type->get_ref<const std::string&>())) {
    r.fail("model_type " + describe(*type) + " is not supported (supported: " + std::string(kSupportedFamilies) + ")");
  }
  m.model_type = type->get<std::string>();
  const std::string& t = m.model_type;
  const bool qwen_moe = t == "qwen2_moe" || t == "qwen3_moe";

  m.hidden_size = r.require_int("hidden_size", 1, kMaxHidden);
  m.num_layers = r.require_int("num_hidden_layers", 1, kMaxLayers);
  m.vocab_size = r.require_int("vocab_size", 1, kMaxVocab);
  // An all-sparse Qwen MoE never builds its dense MLP, so only there may intermediate_size be absent.
  m.intermediate_size = qwen_moe ? r.optional_int("intermediate_size", 0, 1, kMaxIntermediate)
                                 : r.require_int("intermediate_size", 1, kMaxIntermediate);
  read_attention(r, m);
  if (t == "mixtral" || qwen_moe) read_experts(r, m);

  const bool gemma = t == "gemma" || t == "gemma2";
  m.tie_word_embeddings = r.optional_bool("tie_word_embeddings", gemma);
  m.norms_per_layer = t == "gemma2" ? 4 : 2;
  // Gemma names its activation hidden_activation (hidden_act is a legacy duplicate).
  const std::string default_act = gemma ? "gelu_pytorch_tanh" : "silu";
  m.hidden_act = gemma ? r.optional_string("hidden_activation", r.optional_string("hidden_act", default_act))
                       : r.optional_string("hidden_act", default_act);
  if (t == "gemma2") {
    // Absent means Gemma2Config's default of 30; an explicit null turns the cap off.
    const auto cap = config.find("final_logit_softcapping");
    const bool disabled = cap != config.end() && cap->is_null();
    m.final_logit_softcapping = disabled ? 0.0 : r.optional_nonnegative_number("final_logit_softcapping", 30.0);
  }
  m.max_position_embeddings = r.optional_int("max_position_embeddings", 0, 0, kMaxPositions);

  // The per-field bounds keep each product in range, but their combination can still be absurd.
  std::int64_t total = kMaxTotalParameters + 1;
  try {
    total = count_parameters(m).total;
  } catch (const InputError&) {
    // Only overflow throws here, and that is certainly past the bound.
  }
  if (total > kMaxTotalParameters) {
    r.fail("the shapes describe more than " + std::to_string(kMaxTotalParameters) +
           " parameters; check \"hidden_size\", \"num_hidden_layers\", \"vocab_size\" and the expert counts");
  }
  return m;
}

}  // namespace trainfit
