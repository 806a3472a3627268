// libFuzzer target: .npy parsing. Any input must either parse (and then describe exactly the bytes
// given) or throw tower::Error.
#include <cstddef>
#include <cstdint>
#include <span>

#include "tower/core/error.h"
#include "tower/data/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    tower::NpyArray a = tower::parse_npy(std::span<const uint8_t>(data, size), "fuzz.npy");
    if (a.data.data() < data || a.data.data() + a.data.size() > data + size) __builtin_trap();
  } catch (const tower::Error&) {
  }
  return 0;
}
