// Starting from weights trained before, and training part of a model (--init_from, --freeze):
// - a tower checkpoint of any data, class count or layout (its moving averages of the weights
//   where it kept them), or a safetensors file in tower's names or in another tool's (a model's
//   foreign_names: torchvision's, timm's);
// - the classifier, whose shape follows the class count, re-initialized where it does not fit
//   (timm's rule); any other missing or misshapen tensor is an error, or with --init_partial a
//   listed exception;
// - frozen scopes: variables that get no gradient, no optimizer state and no update, and batch
//   norms that run as in inference (Scope::with_frozen).
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "tower/core/tensor.h"
#include "tower/models/model.h"

namespace tower {

// A variable the run starts from the file, as the model builds it.
struct InitVariable {
  std::string name;
  Shape shape;
  bool head = false;  // in the classifier (head_variables)
};

struct InitFrom {
  std::string file;    // the tensors file read
  std::string sha256;  // of that file
  std::string source;  // what it is: "a tower checkpoint of ...", "torchvision's names", ...
  std::map<std::string, Tensor> values;  // by variable name, in this model's layout (f32)
  // Lines of the report: the variables left as initialized and why, the file's tensors unused.
  std::vector<std::string> reinitialized, missing, ignored;
  size_t loaded = 0;  // variables taken from the file (values may be freed once copied)
  // Tensors with no use in a new run: a checkpoint's optimizer slots, and the raw weights beside
  // the averages taken; batch counters (PyTorch's num_batches_tracked).
  int64_t skipped = 0, counters = 0;

  // The block a run prints: what was loaded, re-initialized and ignored.
  std::string report(size_t variables) const;
};

// Reads `path`: a tower checkpoint (a prefix, its .safetensors or .json, or a train dir: the
// latest) or a safetensors file. A tower::Error names the file and every tensor that does not fit
// (unless `partial`), and the flag that would allow it.
InitFrom read_init_from(const std::string& path, const ModelDef& model,
                        const std::vector<InitVariable>& variables, bool partial);

// A weights file in another tool's names (a model's foreign_names) as the model's variables,
// transposed where that tool stores them so, when that naming finds more of them than tower's
// own; the tensors no variable takes are left as they are. Returns the naming used. (tower eval
// of a torchvision file.)
std::string to_model_names(std::map<std::string, Tensor>& tensors, const ModelDef& model);

// The variables of `model` built for `input` (C, H, W), in creation order, each with its shape.
std::vector<InitVariable> model_variables(const ModelDef& model, const Shape& input,
                                          int num_classes);

// --freeze: a comma-separated list of variable scopes ("conv1,layer1"; a '.' counts as '/', so
// torchvision's "features.0" works too), or "backbone": every top scope but the classifier's.
// An empty spec freezes nothing; a scope that holds no variable is an error naming the scopes
// the model has.
std::vector<std::string> resolve_freeze(const std::string& spec,
                                        const std::vector<InitVariable>& variables);

// When frozen scopes thaw (--unfreeze_after_epochs): step < 0, never.
struct Thaw {
  int64_t step = -1;
  double epochs = 0;
  float lr_factor = 1;
};
// The line a run prints of its frozen scopes ("frozen: conv1, layer1 (34 variables, 1204224
// values): no gradient, ...; they thaw at step 94 (epoch 2), ..."); empty without any.
std::string frozen_line(const std::vector<std::string>& scopes,
                        const std::vector<InitVariable>& variables, const Thaw& thaw);

}  // namespace tower
