#pragma once
// Inside the bench: reading what a runner reported into a row (the orchestrator, from the runner's
// file; bench_row.cpp, from a line of results.jsonl).
#include "trainfit/bench.hpp"

namespace trainfit::bench {

// Reads row.reported (the runner's "measured" object) into row.measured. A runner's row is outside
// input: one whose fields have the wrong types, or that has no status, makes the row an error
// saying why, and the runner's own "error" value, if any, is kept beside as "error_reported".
void read_reported_measurement(BenchRow& row);

}  // namespace trainfit::bench
