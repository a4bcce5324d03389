#include "common/toml_reader.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "trainfit/error.hpp"
#include "trainfit/units.hpp"

namespace trainfit::detail {

toml::table parse_toml(std::string_view text, std::string_view source) {
  // toml++ reports errors by exception or by result, as it was configured; both end the same way.
#if TOML_EXCEPTIONS
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw InputError(fmt::format("{}:{}: invalid TOML: {}", source, e.source().begin.line, e.description()));
  }
#else
  toml::parse_result result = toml::parse(text, source);
  if (!result) {
    throw InputError(fmt::format("{}:{}: invalid TOML: {}", source, result.error().source().begin.line,
                                 result.error().description()));
  }
  return std::move(result).table();
#endif
}

std::string_view toml_type_name(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::date:
    case toml::node_type::time:
    case toml::node_type::date_time:
      return "a date/time";
    case toml::node_type::none:
      break;
  }
  return "nothing";
}

TomlReader::TomlReader(std::string_view source) : source_(source) {}

void TomlReader::fail(const toml::node* at, std::string_view field, std::string_view why) const {
  if (at != nullptr && at->source().begin.line > 0)
    throw InputError(fmt::format("{}:{}: {}: {}", source_, at->source().begin.line, field, why));
  throw InputError(fmt::format("{}: {}: {}", source_, field, why));
}

std::string TomlReader::text(const toml::node& n, std::string_view field) const {
  if (const auto* s = n.as_string()) return s->get();
  fail(&n, field, fmt::format("expected a string, got {}", toml_type_name(n)));
}

std::int64_t TomlReader::integer(const toml::node& n, std::string_view field) const {
  const auto* i = n.as_integer();
  if (i == nullptr) fail(&n, field, fmt::format("expected an integer, got {}", toml_type_name(n)));
  return i->get();
}

std::int64_t TomlReader::integer(const toml::node& n, std::string_view field, std::int64_t lo, std::int64_t hi) const {
  const std::int64_t v = integer(n, field);
  if (v < lo || v > hi) fail(&n, field, fmt::format("must be between {} and {} (got {})", lo, hi, v));
  return v;
}

double TomlReader::number(const toml::node& n, std::string_view field) const {
  double v = 0;
  if (const auto* i = n.as_integer()) {
    v = static_cast<double>(i->get());
  } else if (const auto* f = n.as_floating_point()) {
    v = f->get();
  } else {
    fail(&n, field, fmt::format("expected a number, got {}", toml_type_name(n)));
  }
  if (!std::isfinite(v)) fail(&n, field, "must be a finite number");
  return v;
}

double TomlReader::number(const toml::node& n, std::string_view field, double lo, double hi) const {
  const double v = number(n, field);
  if (v < lo || v > hi) fail(&n, field, fmt::format("must be between {} and {} (got {})", lo, hi, v));
  return v;
}

double TomlReader::number_above(const toml::node& n, std::string_view field, double lo, double hi) const {
  const double v = number(n, field);
  if (!(v > lo) || v > hi) fail(&n, field, fmt::format("must be above {} and at most {} (got {})", lo, hi, v));
  return v;
}

std::vector<std::string> TomlReader::strings(const toml::node& n, std::string_view field) const {
  std::vector<std::string> out;
  if (const auto* s = n.as_string()) {
    out.push_back(s->get());
    return out;
  }
  const auto* a = n.as_array();
  if (a == nullptr) fail(&n, field, fmt::format("expected a string or a list of strings, got {}", toml_type_name(n)));
  for (const auto& e : *a) out.push_back(text(e, field));
  return out;
}

std::int64_t TomlReader::bytes(const toml::node& n, std::string_view field) const {
  if (const auto* i = n.as_integer()) return i->get();
  const auto* s = n.as_string();
  if (s == nullptr)
    fail(&n, field, fmt::format("expected a size such as \"24GiB\" or a byte count, got {}", toml_type_name(n)));
  try {
    return parse_bytes(s->get());
  } catch (const InputError& e) {
    fail(&n, field, e.what());
  }
}

std::int64_t TomlReader::bytes(const toml::node& n, std::string_view field, std::int64_t lo, std::int64_t hi) const {
  const std::int64_t v = bytes(n, field);
  if (v < lo || v > hi) {
    // Echoed as written: "2GiB" as such, a bare count as bytes.
    const std::string got = n.is_string() ? fmt::format("\"{}\"", text(n, field)) : fmt::format("{} bytes", v);
    fail(&n, field, fmt::format("must be between {} and {} (got {})", format_bytes(lo), format_bytes(hi), got));
  }
  return v;
}

void TomlReader::reject_unknown(const toml::table& table, std::string_view prefix,
                                std::initializer_list<std::string_view> known) const {
  for (const auto& [key, node] : table) {
    if (std::find(known.begin(), known.end(), key.str()) != known.end()) continue;
    fail(&node, fmt::format("{}{}", prefix, key.str()), fmt::format("unknown field (known: {})", fmt::join(known, ", ")));
  }
}

}  // namespace trainfit::detail
