// Model files: a network as a JSON file (docs/model_file.md), for users of the command line who
// write no C++. `tower train --model_file net.json` registers the file's model under its name;
// checkpoints carry the file's text (ModelDef::source), so eval, bench and inspect work from a
// train dir alone.
#pragma once

#include <string>

#include "tower/models/model.h"

namespace tower {

// The model of a model file's text; `origin` (the path) names the file in errors. Every error
// names the layer (its index and name), the key and what was expected.
ModelDef parse_model_file(const std::string& text, const std::string& origin);

// Parses the text and registers its model (a name already taken by another model is an error;
// the same text again is not); returns the model's name.
std::string register_model_file(const std::string& text, const std::string& origin);
// Reads `path`, then register_model_file.
std::string load_model_file(const std::string& path);

}  // namespace tower
