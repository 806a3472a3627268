#include "tower/train/class_weights.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tower/core/error.h"

namespace tower {

std::vector<int64_t> examples_per_class(const Dataset& data) {
  std::vector<int64_t> counts(static_cast<size_t>(data.num_classes), 0);
  const int32_t* labels = data.labels.data<int32_t>();
  for (int64_t i = 0; i < data.size(); ++i)
    if (labels[i] >= 0 && labels[i] < data.num_classes) ++counts[static_cast<size_t>(labels[i])];
  return counts;
}

std::string class_counts_line(const Dataset& data, bool weighted) {
  const std::vector<int64_t> counts = examples_per_class(data);
  auto name = [&](size_t c) {
    return c < data.class_names.size() ? data.class_names[c] : std::to_string(c);
  };
  std::string line = fmt::format("{} classes: ", counts.size());
  const auto [lo, hi] = std::minmax_element(counts.begin(), counts.end());
  if (counts.size() <= 10) {
    for (size_t c = 0; c < counts.size(); ++c)
      line += fmt::format("{}{} {}", c ? ", " : "", name(c), counts[c]);
  } else {
    line += fmt::format("{} to {} examples each (fewest: {}, most: {})", *lo, *hi,
                        name(static_cast<size_t>(lo - counts.begin())),
                        name(static_cast<size_t>(hi - counts.begin())));
  }
  if (!weighted && *hi > 2 * std::max<int64_t>(*lo, 1))
    line += "; imbalanced: --class_weights balanced weighs each class's loss by N / (K n_c)";
  return line;
}

std::vector<float> class_weights(const std::string& spec, const Dataset& data) {
  if (spec.empty()) return {};
  const std::vector<int64_t> counts = examples_per_class(data);
  std::vector<float> weights(counts.size(), 1.0f);
  if (spec == "balanced") {
    const double total = static_cast<double>(data.size()), k = static_cast<double>(counts.size());
    for (size_t c = 0; c < counts.size(); ++c)
      weights[c] =
          counts[c] > 0 ? static_cast<float>(total / (k * static_cast<double>(counts[c]))) : 0.0f;
    return weights;
  }
  std::ifstream in(spec);
  if (!in) fail("--class_weights '{}': expected balanced or a readable JSON file", spec);
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("--class_weights '{}': not valid JSON ({})", spec, e.what());
  }
  if (!json.is_object())
    fail("--class_weights '{}': expected a JSON object {{\"class\": weight, ...}}", spec);
  for (const auto& [key, value] : json.items()) {
    auto it = std::find(data.class_names.begin(), data.class_names.end(), key);
    size_t c = static_cast<size_t>(it - data.class_names.begin());
    if (it == data.class_names.end()) {
      const bool index = !key.empty() && std::all_of(key.begin(), key.end(), ::isdigit) &&
                         key.size() < 10 && std::stoul(key) < counts.size();
      if (!index)
        fail("--class_weights '{}': key '{}' is not a class of {} (its classes: {})", spec, key,
             data.name, fmt::join(data.class_names, ", "));
      c = std::stoul(key);
    }
    if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < 0 ||
        value.get<double>() > 1e6)
      fail("--class_weights '{}': key '{}' is {}, expected a weight from 0 to 1e6", spec, key,
           value.dump());
    weights[c] = value.get<float>();
  }
  return weights;
}

}  // namespace tower
