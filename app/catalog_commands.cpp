// `trainfit gpus`, `trainfit models` and `trainfit schema`: the catalogues, and the vocabulary of a setup.
#include <iostream>
#include <memory>
#include <string>

#include "commands.hpp"
#include "trainfit/trainfit.hpp"

namespace trainfit::cli {

void add_catalog_commands(CLI::App& app, int& exit_code) {
  auto gpus_format = std::make_shared<std::string>("table");
  auto* gpus = app.add_subcommand("gpus", "List the GPU catalogue (docs/gpus.md)");
  gpus->add_option("--format", *gpus_format, "table | json | markdown")->capture_default_str();
  gpus->callback([gpus_format, &exit_code] {
    std::cout << render_gpu_catalog(gpu_catalog(), parse_format(*gpus_format));
    exit_code = 0;
  });

  auto models_format = std::make_shared<std::string>("table");
  auto* models = app.add_subcommand("models", "List the built-in models (docs/models.md)");
  models->add_option("--format", *models_format, "table | json | markdown")->capture_default_str();
  models->callback([models_format, &exit_code] {
    std::cout << render_model_catalog(parse_format(*models_format));
    exit_code = 0;
  });

  auto* schema = app.add_subcommand("schema",
                                    "Print the JSON Schema of a training setup: every setting's JSON key, flag (x-flag), "
                                    "type, allowed values, default and description");
  schema->callback([&exit_code] {
    std::cout << setup_schema().dump(2) << "\n";
    exit_code = 0;
  });
}

}  // namespace trainfit::cli
