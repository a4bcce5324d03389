#pragma once
// Inside the bench: reading what a runner reported into a row (the orchestrator, from the runner's
// file; bench_row.cpp, from a line of results.jsonl).
#include <string>
#include <string_view>

#include "trainfit/bench.hpp"

namespace trainfit::bench {

// Reads row.reported (the runner's "measured" object) into row.measured. A runner's row is outside
// input: one whose fields have the wrong types, or that has no status, makes the row an error
// saying why, and the runner's own "error" value, if any, is kept beside as "error_reported".
void read_reported_measurement(BenchRow& row);

// Whether a row (its JSON) was run on a multimodal config's text model alone, before the
// vision_tower setting existed: its config does not name the setting and its measured model_class
// is a ...ForCausalLM (the runner built the ForCausalLM of text_config). Such a row is read as a row
// of vision_tower dropped, by the bench's rows and by `validate` alike.
bool built_text_model_alone(const nlohmann::json& row);
// That, applied to what the row's "config" (or its "bench.key") reads as, its key made again.
void read_built_model_class(BenchConfig& config, const nlohmann::json& row);

// A file a data file names by a relative path that is not there from here but is beside the data
// file (a data folder that carries the configs it ran, such as a layer sweep's cut-down models, or
// the card files of published runs): that path, so the file validates from any directory. Any
// other path as it is.
std::string beside_the_file(const std::string& path, std::string_view data_file);

}  // namespace trainfit::bench
