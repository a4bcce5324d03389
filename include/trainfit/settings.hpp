#pragma once
// The vocabulary of a training setup, defined once. Each setting is one row of a table: its JSON
// key, CLI flag, type, allowed values or range, default, one line of documentation and where it
// lives in TrainingSetup. Everything else derives from the table: the flags of `trainfit plan` and
// their --help, JSON reading and writing of a setup (plans, bench rows, probe rows, `validate`
// input), bench matrix fields, canonical keys and labels, the criteria language's field names,
// `trainfit schema` (a JSON Schema that the Python runner reads). Adding a setting is one row here
// plus the model terms that use it.
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainfit/setup.hpp"

namespace trainfit {

enum class SettingType {
  choice,   // one name of a fixed list ("lora"); aliases are accepted and canonicalised
  integer,  // a whole number in a range
  number,   // a real number in a range
  boolean,  // on or off; the flag also has a --no- form
  list,     // comma-separated names ("q,v"), a JSON array
  text,     // a free name or path
  bytes,    // a memory size: 17179869184, or "16GiB" / "24GB"
};
std::string to_string(SettingType t);

// A condition on another setting, earlier in the table: its canonical text is one of `one_of`, or
// none of `none_of`, or its number is at least `at_least` (the conditions given must all hold).
struct SettingCondition {
  std::string setting;
  std::vector<std::string> one_of;
  std::vector<std::string> none_of;
  std::optional<double> at_least;
};

// A default that depends on another setting: `value` when `when` holds, or `factor` times the
// number of the setting `times`, or the value of the first of `cases` whose condition holds (a
// default that depends on several settings: the reference on the objective, then on the method).
// When nothing holds, the row's own default.
struct DerivedDefault {
  std::optional<SettingCondition> when;
  SettingValue value;
  std::string times;
  double factor = 1;
  struct Case {
    SettingCondition when;
    SettingValue value;
  };
  std::vector<Case> cases;
  // A default that depends on the model the setup names (the first setting): `value` when its
  // config.json's model_type is one of these (a function: the family table may grow), the row's
  // own default otherwise (the rules above unused).
  std::function<std::vector<std::string>()> model_types;
};

struct Setting {
  std::string key;          // JSON key, query parameter, bench matrix field and criteria field
  std::string flag;         // CLI flag ("--grad-accum"); a boolean also takes "--no-<name>"
  SettingType type = SettingType::text;
  std::string description;  // one line
  // Where the page shows its control: rows of one group together, in the table's order ("model and
  // card", "method", "precision", "step", "objective", "layout", "judging"). Empty: "other".
  std::string group;
  std::vector<std::string> choices;  // choice: the canonical names
  bool nullable = false;             // choice: "none" (JSON null) is a value: the default when set
  std::optional<double> minimum, maximum;  // integer, number, bytes
  bool exclusive_minimum = false, exclusive_maximum = false;
  std::string default_rule;  // the default in words when it depends on other settings
  bool in_matrix = true;     // a bench matrix may vary it (false: set once for a run, e.g. the card)
  // How a bench label shows the value: a format with {} for the value ("r{}"), or a word for a
  // boolean that is on ("ckpt"); empty: never shown. Shown when it differs from its default, or
  // whenever the setting applies with label_always.
  std::string label;
  bool label_always = false;

  // Whether the setting means anything for this setup (LoRA settings without LoRA do not); JSON
  // and labels leave out what does not apply. Absent: always.
  std::optional<SettingCondition> applies_when;
  // A default that depends on settings earlier in the table (weights: nf4 under qlora; LoRA alpha:
  // twice the rank). Absent: the default is TrainingSetup's own.
  std::optional<DerivedDefault> derived_default;

  // Where the value lives. `set` receives a value already checked against the row (type, choices,
  // range); `get` returns it in the same form. A row added with add_setting may leave both empty:
  // its value then lives in TrainingSetup::extensions, with `extension_default` as its default.
  std::function<SettingValue(const TrainingSetup&)> get;
  std::function<void(TrainingSetup&, const SettingValue&)> set;
  SettingValue extension_default;
  // choice and list: the canonical spelling of what a user wrote (aliases, shorthands), or an
  // InputError saying why it is not a value. Empty: the text must be one of `choices` as written.
  std::function<SettingValue(std::string_view)> canonical;
};

// The table, in canonical order (the order a bench matrix nests its axes: the last varies fastest).
const std::vector<Setting>& settings();
const Setting* find_setting(std::string_view key);
const Setting* find_setting_by_flag(std::string_view flag);  // "--rank" or "--no-grad-ckpt"
// Adds a row at the end of the table: a setting a program embedding trainfit needs (or a test).
// Its values live in TrainingSetup::extensions unless the row brings its own get/set. Throws
// InputError when its key or flag is taken or the row is incomplete.
void add_setting(Setting row);

bool applies(const Setting& s, const TrainingSetup& setup);
// The value the setting takes when it is not given, once the settings before it are known.
SettingValue default_value(const Setting& s, const TrainingSetup& so_far);

// A value as a user gave it (a flag's or query parameter's text; a JSON or TOML value), checked
// against the row and turned into its canonical form. Throws SettingError naming the setting; a
// range error echoes `as_written` (the value's text in the user's file) when given.
SettingValue parse_setting_text(const Setting& s, std::string_view text);
SettingValue check_setting_value(const Setting& s, const SettingValue& raw, std::string_view as_written = {});
// A canonical value (what `get` returns) inside its row's range or choices: the check validate()
// makes of a setup built in code, without re-reading names. Throws SettingError.
void check_setting_in_bounds(const Setting& s, const SettingValue& value);
// The canonical text of a value: what a flag takes back ("q,v", "bf16", "none", "16GiB").
std::string setting_text(const Setting& s, const SettingValue& value);

// Settings as a front end received them, each at most once, values checked.
struct GivenSetting {
  GivenSetting() = default;
  // A constructor rather than aggregate initialisation: GCC 12 warns falsely (maybe-uninitialized)
  // about a variant holding a vector inside a braced temporary.
  GivenSetting(const Setting* s, SettingValue v) : setting(s), value(std::move(v)) {}
  const Setting* setting = nullptr;
  SettingValue value;
};
// The setup these settings describe: each given value, each other setting's (derived) default,
// then validate(). Throws SettingError.
TrainingSetup resolve_setup(const std::vector<GivenSetting>& given);
// One line for each given setting that does not apply to the setup it resolved to (its row's
// applies_when does not hold), so a value the plan leaves out is not dropped without a word:
// "--nodes is ignored: it applies only when --gpus is at least 2".
std::vector<std::string> ignored_settings(const std::vector<GivenSetting>& given, const TrainingSetup& setup);

// ---- JSON: where a setup is read or written ----------------------------------------------------
nlohmann::json setting_value_to_json(const SettingValue& v);
SettingValue setting_value_from_json(const nlohmann::json& j);  // a scalar or an array of strings

struct SetupJsonOptions {
  bool matrix_only = false;  // only the settings a bench matrix can vary (a bench config)
};
// Every setting that applies, with its value; unset names and sizes are left out.
nlohmann::json setup_to_json(const TrainingSetup& setup, const SetupJsonOptions& options = {});
// The settings an object holds, checked one by one (no defaults, no validation of the whole):
// what setup_from_json resolves, and what a command line lays its own flags over. `other_key` as
// for setup_from_json. Throws SettingError.
std::vector<GivenSetting> given_from_json(const nlohmann::json& object,
                                          const std::function<bool(std::string_view key)>& other_key = {});
// The settings of a setup file (`--setup FILE`): the "setup" object trainfit writes (a plan's
// JSON, whole, or that object alone), or any object of settings by their JSON keys. A key that is
// no setting is an error naming it. Throws InputError (unreadable, not JSON) or SettingError.
std::vector<GivenSetting> load_setup_file(const std::string& path);
// Reads the settings an object holds (missing ones take their defaults) and validates the setup.
// Keys that are not settings are passed to `other_key`: true accepts them (the caller reads them),
// false makes them an error; without it they are ignored. Throws SettingError.
TrainingSetup setup_from_json(const nlohmann::json& object,
                              const std::function<bool(std::string_view key)>& other_key = {});

// The arguments of `trainfit plan` that reproduce the setup: every setting that applies and
// differs from its default ("--model", "qwen2.5-7b", "--grad-ckpt", ...).
std::vector<std::string> setup_to_args(const TrainingSetup& setup);
// A short label for tables ("qwen2.5-7b qlora r16 q,v s512 b1 ckpt"), from the rows' label forms.
std::string setup_label(const TrainingSetup& setup);

// `trainfit schema`: a JSON Schema (draft 2020-12) of a setup: `properties` keyed by JSON key, each
// with its type, allowed values or range, `default`, `description` and `x-flag`.
nlohmann::json setup_schema();

namespace detail {
// A value added to a choice setting's allowed values: a table the setting reads its choices from
// grew a row (add_data_parallel_scheme). Settings that apply under the value `like` apply under the
// new one too. InputError when no setting has the key.
void add_setting_choice(std::string_view key, const std::string& choice, std::string_view like);
}  // namespace detail

}  // namespace trainfit
