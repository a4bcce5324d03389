#pragma once
// Renders plans as text. Returns strings; printing is the caller's business.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainfit/hardware.hpp"
#include "trainfit/plan.hpp"

namespace trainfit {

enum class Format { table, json, markdown };
Format parse_format(std::string_view s);

nlohmann::json plan_to_json(const Plan& plan);  // schema "trainfit.plan/1"
std::string render_plan(const Plan& plan, Format format);
// "trainfit plan --model qwen2.5-7b --seq 2048": arguments (setup_to_args) as one shell command,
// each word quoted when the shell would split or expand it.
std::string plan_command(const std::vector<std::string>& args);
std::string shell_word(std::string_view word);
// Several plans side by side (the seed scenario: one row per model and setup).
std::string render_plan_comparison(const std::vector<Plan>& plans, Format format, const std::string& title);
std::string render_gpu_catalog(const std::vector<GpuSpec>& gpus, Format format);
std::string render_model_catalog(Format format);

}  // namespace trainfit
