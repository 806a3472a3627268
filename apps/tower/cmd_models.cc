// `tower models`: the built-in models with their parameter counts and training recipes.
#include <fmt/format.h>

#include "command.h"
#include "tower/models/model.h"

namespace tower::cli {
namespace {

CommandRegistrar registrar{{"models", "List the built-in models", [](CLI::App& app) {
                              app.callback([] {
                                for (const std::string& name : model_names()) {
                                  const ModelDef& m = get_model(name);
                                  // (ImageNet's 1,000 classes: torchvision's counts)
                                  fmt::print(
                                      "{:<12} {:>10} parameters (10 classes), {:>10} (1,000)  "
                                      "input {}  {}\n",
                                      name, count_parameters(m, m.default_input, 10),
                                      count_parameters(m, m.default_input, 1000),
                                      m.default_input.to_string(), m.description);
                                  fmt::print("{:<12} recipe: {}\n", "", to_string(m.recipe));
                                }
                              });
                            }}};

}  // namespace
}  // namespace tower::cli
