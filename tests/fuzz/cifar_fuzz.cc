// libFuzzer target: CIFAR-10 / CIFAR-100 record decoding. Any input must either decode or throw
// tower::Error; anything else (crash, ASan report, other exception) is a bug.
#include <cstddef>
#include <cstdint>
#include <span>

#include "tower/data/cifar.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> bytes(data, size);
  for (const tower::CifarLayout& layout :
       {tower::cifar10_layout(), tower::cifar100_layout(tower::Cifar100Label::fine),
        tower::cifar100_layout(tower::Cifar100Label::coarse)}) {
    std::vector<uint8_t> images;
    std::vector<int32_t> labels;
    try {
      tower::decode_cifar_records(bytes, layout, "fuzz.bin", images, labels);
      if (images.size() != labels.size() * tower::kCifarImageBytes) __builtin_trap();
      for (int32_t label : labels)
        if (label < 0 || label >= layout.num_classes) __builtin_trap();
    } catch (const tower::Error&) {
    }
  }
  return 0;
}
