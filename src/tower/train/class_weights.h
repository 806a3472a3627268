// Class imbalance: the examples per class of a training set, and the loss weights that even it
// out (--class_weights).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tower/data/dataset.h"

namespace tower {

std::vector<int64_t> examples_per_class(const Dataset& data);

// One line for the start of a run: "3 classes: coat 540, pullover 540, shirt 540" (with many
// classes, the fewest and the most), and a hint when the largest class has more than twice the
// examples of the smallest and no weights are given.
std::string class_counts_line(const Dataset& data, bool weighted);

// --class_weights: "" (none: empty), "balanced" (N / (K n_c), scikit-learn's and Keras' usual
// choice; a class without examples gets 0), or a JSON file {"class name or index": weight, ...}
// (classes not named get 1). Errors name the flag, the file and the key.
std::vector<float> class_weights(const std::string& spec, const Dataset& data);

}  // namespace tower
