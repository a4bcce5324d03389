#pragma once
// The words and numbers every renderer of src/report/ writes the same way, so that a plan, a
// comparison of plans and a ranking of cards say a setup, a size and a time alike.
#include <cstdint>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "common/text.hpp"
#include "trainfit/plan.hpp"
#include "trainfit/setup.hpp"

namespace trainfit::detail {

std::string gib(std::int64_t bytes);              // "9.21 GiB"
std::string pct(double fraction);                 // "42%"
std::string params_text(std::int64_t n);          // "7.62B", "40.4M"
// "LoRA r16 (q_proj,v_proj) over bf16 base weights, adamw, seq 512 x batch 1, no checkpointing, sdpa attention"
std::string setup_text(const TrainingSetup& s);
std::string model_text(const Plan& p);            // "qwen2.5-7b (7.62B parameters, 40.4M trainable)"
std::string seconds_text(double s);               // "21.7 s", "0.425 s", "8.3 ms"
// Rows (the first the headers) as a text table: each column as wide as its widest cell, two spaces
// apart, after `indent`; a column whose cells are all empty is left out; the columns `left` marks
// are left-aligned, the others (figures) right-aligned; no trailing spaces.
std::string aligned_table(const std::vector<std::vector<std::string>>& rows, const std::vector<bool>& left,
                          std::string_view indent = "");
// `trainfit plan ARGS` at `indent`, broken between arguments with the shell's line continuation so
// that every line fits kTextColumns and still pastes as one command; a flag keeps its value.
std::string plan_command_lines(const std::vector<std::string>& args, std::string_view indent);

}  // namespace trainfit::detail
