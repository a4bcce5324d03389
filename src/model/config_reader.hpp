#pragma once
// Reading a Hugging Face config.json object the way transformers' Config classes read it: a
// field absent or null takes the default, every number is checked against a bound well past any
// real model, and an error names the field as the file spells it ("text_config.hidden_size").
// Shared by the decoder reader (model_config.cpp) and the vision towers (vision_towers.cpp).
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainfit/error.hpp"

namespace trainfit::detail {

using nlohmann::json;

namespace config_bounds {
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
}  // namespace config_bounds

// A short, non-recursive rendering of a value for error messages: a config can hold
// anything, and echoing a megabyte or a deeply nested array back would not help.
inline std::string describe(const json& v) {
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
  // `prefix` names where `config` sits in the file ("text_config."), for messages.
  ConfigReader(const json& config, std::string_view source, std::string prefix = {})
      : config_(config), source_(source), prefix_(std::move(prefix)) {}

  // A field's name as messages show it: "\"text_config.hidden_size\"".
  std::string quoted(std::string_view field) const { return "\"" + prefix_ + std::string(field) + "\""; }

  // Whether the field is present with an explicit null, which some fields distinguish from absent
  // (transformers keeps an explicit None where an absent field takes the default).
  bool is_explicit_null(std::string_view field) const {
    auto it = config_.find(field);
    return it != config_.end() && it->is_null();
  }

  const json& object() const { return config_; }
  std::string_view source() const { return source_; }

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
    if (v == nullptr) fail("missing required field " + quoted(field));
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
      fail("field " + quoted(field) + " must be true or false (got " + describe(*v) + ")");
    }
    return v->get<bool>();
  }

  std::string optional_string(std::string_view field, const std::string& fallback) const {
    const json* v = find(field);
    if (v == nullptr) return fallback;
    if (!v->is_string()) {
      fail("field " + quoted(field) + " must be a string (got " + describe(*v) + ")");
    }
    return v->get<std::string>();
  }

  double optional_nonnegative_number(std::string_view field, double fallback) const {
    const json* v = find(field);
    if (v == nullptr) return fallback;
    if (!v->is_number() || !std::isfinite(v->get<double>()) || v->get<double>() < 0.0) {
      fail("field " + quoted(field) + " must be a non-negative number (got " + describe(*v) + ")");
    }
    return v->get<double>();
  }

  // Indices of mlp_only_layers that fall inside [0, layers); transformers ignores the rest.
  std::vector<bool> layer_set(std::string_view field, std::int64_t layers) const {
    std::vector<bool> in_set(static_cast<std::size_t>(layers), false);
    const json* v = find(field);
    if (v == nullptr) return in_set;
    if (!v->is_array()) {
      fail("field " + quoted(field) + " must be a list of layer indices (got " + describe(*v) + ")");
    }
    for (const json& item : *v) {
      if (!item.is_number_integer()) {
        fail("field " + quoted(field) + " must be a list of layer indices (got an element " + describe(item) + ")");
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
    const std::string name = "field " + quoted(field);
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
  std::string prefix_;
};

}  // namespace trainfit::detail
