#pragma once
// Recipes: the training configuration files people launch runs from, read in their own field
// names into trainfit's settings (`--recipe FILE`; docs/setup.md, "Recipes"): a TRL CLI config
// (`trl sft --config recipe.yaml`: TrainingArguments, the trainer's config and TRL's ModelConfig in
// one flat YAML or JSON object), a LLaMA-Factory recipe (`llamafactory-cli train`) or an axolotl one
// (`axolotl train`), each read with its project's defaults for what it leaves out. Every key either
// sets a setting, is ignored because it changes neither memory nor time (learning rate, logging,
// datasets...), or is refused with an error that names it.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trainfit/settings.hpp"
#include "trainfit/setup.hpp"

namespace trainfit {

enum class RecipeKind { trl, axolotl, llama_factory };
std::string to_string(RecipeKind k);

struct Recipe {
  RecipeKind kind = RecipeKind::trl;
  std::string source;                  // the file it was read from
  std::vector<GivenSetting> settings;  // what the recipe and its library's defaults set
  std::vector<std::string> ignored;    // its keys that change neither memory nor time, in file order
  std::vector<std::string> notes;      // readings a user should know of ("dtype auto read as bf16")
};

// Reads a recipe (YAML, of which JSON is a subset) and tells which kind it is from its keys.
// `objective`: the trainer a TRL config is for, as `trl <trainer>` names it (sft when not given);
// axolotl and LLaMA-Factory recipes name their own. Throws InputError (unreadable, not a mapping,
// a kind not read yet) or SettingError naming the recipe's key, in the recipe's words.
Recipe parse_recipe(std::string_view text, std::string_view source, std::optional<Objective> objective = {});
Recipe load_recipe(const std::string& path, std::optional<Objective> objective = {});
// What a plan of the recipe warns of: its readings, then its ignored keys in one line.
std::vector<std::string> recipe_warnings(const Recipe& recipe);

// The keys a recipe of this kind may hold, each with what trainfit does with it: "setting" (and
// which), "ignored" or "refused". For the docs and their test.
struct RecipeKeyUse {
  std::string key;
  std::string use;   // "setting", "ignored", "refused"
  std::string what;  // the setting it sets, or why it is ignored or refused
};
std::vector<RecipeKeyUse> recipe_keys(RecipeKind kind);

}  // namespace trainfit
