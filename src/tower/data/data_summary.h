// `tower data`: what a data set holds, as a run reads it, without training: its classes with the
// images of each in each split, the images' size; for an image folder also how its test split is
// chosen, the sizes and formats of its files (read from their headers, nothing decoded), and the
// files of a split.
#pragma once

#include <string>

#include "tower/data/dataset.h"

namespace tower {

// The summary as text. `list`: "" (none), "train" or "test": that split's files, one a line with
// its class (image folders only; other formats are an error naming the flag).
std::string summarize_dataset(const DatasetSpec& spec, const std::string& list = "");

}  // namespace tower
