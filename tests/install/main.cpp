// Links the installed trainfit library (tests/install/CMakeLists.txt). Each call pulls in a part
// of the static library with its own private dependency, so that a dependency the package's
// config fails to bring fails the link: the planner (fmt), experiment plans (toml++), the
// /metrics server (threads; and its HTTP module, loaded at run time through the run path the
// package gives). Exit 0 when the answers are the library's known ones.
#include <cstdio>
#include <exception>

#include "trainfit/bench.hpp"
#include "trainfit/trainfit.hpp"

int main() {
  try {
    const trainfit::ModelSpec model = trainfit::load_model("qwen2.5-0.5b");  // built in: no data folder
    const trainfit::ParameterCounts counts = trainfit::count_parameters(model);
    const trainfit::bench::ExperimentPlan plan = trainfit::bench::parse_experiment_plan(
        "name = 'install'\n[matrix]\nmodel = 'qwen2.5-0.5b'\nseq = [512, 1024]\n", "install-check");
    const auto configs = trainfit::bench::expand_matrix(plan);
    trainfit::telemetry::MetricsServer server({"127.0.0.1", 0});
    std::printf("qwen2.5-0.5b: %lld parameters; a plan of %zu configs; /metrics served on port %d\n",
                static_cast<long long>(counts.total), configs.size(), server.port());
    if (counts.total != 494'032'768 || configs.size() != 2 || server.port() <= 0) {
      std::fprintf(stderr, "install_check: wrong answers from the installed library\n");
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "install_check: %s\n", e.what());
    return 1;
  }
}
