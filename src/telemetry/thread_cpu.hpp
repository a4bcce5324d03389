#pragma once
// The calling thread's CPU time: how the sampler measures its own cost (SamplerCost), and what the
// gpu tests of the driver's reads measure with.

namespace trainfit::telemetry::detail {

// User plus system seconds of the calling thread so far (CLOCK_THREAD_CPUTIME_ID).
double thread_cpu_seconds();

}  // namespace trainfit::telemetry::detail
