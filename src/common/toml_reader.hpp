#pragma once
// Reading the TOML files people write by hand (GPU specs, the GPU catalogue's cards, time
// profiles, experiment plans). One parser and one set of typed getters, so that every TOML input
// reports a mistake the same way, naming the file, the line and the field:
//
//   my-card.toml:3: memory_bandwidth: expected a string, got an integer
//   profile.toml:2: matmul_efficiency: must be above 0 and at most 1
//   plan.toml:7: invalid TOML: ...
//
// A getter checks the node it is given; whether a field may be absent, and what its absence
// means, is the caller's business (`fail(nullptr, field, "missing: ...")` says so without a line).
#include <toml++/toml.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace trainfit::detail {

// The text as a TOML table, or an InputError "<source>:<line>: invalid TOML: <why>".
toml::table parse_toml(std::string_view text, std::string_view source);

// What a node holds, for "expected X, got Y": "a string", "an integer", "a float", ...
std::string_view toml_type_name(const toml::node& node);

class TomlReader {
 public:
  // `source` names the input in every error: a path, or "data/gpus/h200.toml" for built-in text.
  explicit TomlReader(std::string_view source);

  // Throws InputError "<source>:<line>: <field>: <why>", where the line is `at`'s; without
  // "<line>:" when `at` is null or was not parsed from text (a missing field, a whole-file check).
  [[noreturn]] void fail(const toml::node* at, std::string_view field, std::string_view why) const;

  // A string ("expected a string, got an integer" otherwise).
  std::string text(const toml::node& n, std::string_view field) const;
  // An integer; the caller checks the range (with its own words for it).
  std::int64_t integer(const toml::node& n, std::string_view field) const;
  // An integer in [lo, hi].
  std::int64_t integer(const toml::node& n, std::string_view field, std::int64_t lo, std::int64_t hi) const;
  // An integer or a float, finite; the caller checks the range (with its own words for it).
  double number(const toml::node& n, std::string_view field) const;
  // An integer or a float in [lo, hi].
  double number(const toml::node& n, std::string_view field, double lo, double hi) const;
  // An integer or a float in (lo, hi]: rates and fractions, where lo itself means nothing.
  double number_above(const toml::node& n, std::string_view field, double lo, double hi) const;
  // A string, or a list of strings; an element that is not a string is named by its own line.
  std::vector<std::string> strings(const toml::node& n, std::string_view field) const;
  // A byte count: a size as `parse_bytes` reads it ("24GiB", "16303MiB", "16 GB": positive, exact)
  // or an integer count of bytes (any integer: the caller checks the range).
  std::int64_t bytes(const toml::node& n, std::string_view field) const;
  // The same in [lo, hi].
  std::int64_t bytes(const toml::node& n, std::string_view field, std::int64_t lo, std::int64_t hi) const;

  // Fails on the first key of `table` that is not in `known`, naming it as `<prefix><key>` (a
  // prefix such as "run." names keys of a sub-table) and listing the known ones: a typo is an
  // error, not a silently ignored field.
  void reject_unknown(const toml::table& table, std::string_view prefix,
                      std::initializer_list<std::string_view> known) const;

  const std::string& source() const { return source_; }

 private:
  std::string source_;
};

}  // namespace trainfit::detail
