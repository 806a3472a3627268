// Devices (cpu:N logical CPU devices, cuda:N GPUs) and what the machine offers: cores, the
// instruction-set level the CPU kernels use (and its cap), GPUs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tower/core/dtype.h"

namespace tower {

enum class DeviceKind : uint8_t { cpu, cuda };

// A device a tower runs on: "cpu:0", "cpu:1", ... (logical CPU devices) or "cuda:0", ...
struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;

  static Device parse(std::string_view text);  // throws tower::Error on a malformed string
  std::string to_string() const;
  bool operator==(const Device&) const = default;
};

// Parses "cpu:0,cpu:1" into devices; throws naming the bad entry.
std::vector<Device> parse_device_list(std::string_view text);

// The x86 instruction-set levels that the CPU kernels tell apart, in order. Each level's kernels
// sum in their own order, so bits are the same only on the same level.
enum class CpuIsa : uint8_t { baseline, avx2, avx512, avx512_bf16, amx };
std::string_view cpu_isa_name(CpuIsa isa);  // "baseline", "avx2", "avx512", "avx512_bf16", "amx"
// The level a name gives (any case); otherwise an Error "<what>=<name>: expected one of ...".
CpuIsa parse_cpu_isa(std::string_view name, std::string_view what);
// Caps this process's level (the CLI's TOWER_MAX_CPU_ISA); call before the first cpu_isa().
void set_max_cpu_isa(CpuIsa cap);
// The level the kernels use: the CPU's own, capped by set_max_cpu_isa() or else by oneDNN's own
// ONEDNN_MAX_CPU_ISA (AVX2, AVX512_CORE, AVX512_CORE_BF16), so that one machine runs the kernels
// of a smaller one, oneDNN's and tower's own alike. Fixed at the first call.
CpuIsa cpu_isa();
CpuIsa cpu_native_isa();  // the CPU's own level, uncapped

// What the machine offers. The instruction-set flags are those of cpu_isa() (capped).
struct CpuInfo {
  int num_cores = 1;       // hardware threads tower may use
  std::string model_name;  // from /proc/cpuinfo, or "" if unknown
  bool avx2 = false, avx512f = false, avx512_bf16 = false, amx = false;
  bool amd = false;  // an AMD CPU (vendor_id AuthenticAMD): some kernel choices follow the vendor
};
CpuInfo cpu_info();

struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  size_t total_memory = 0;
  int major = 0, minor = 0;  // compute capability (8.0 and later multiply bf16 on tensor cores)
};
// CUDA GPUs visible through the driver; empty (never an error) when there is no driver or GPU.
std::vector<CudaDeviceInfo> cuda_devices();

// Refuses a precision the device's hardware lacks (bf16: a CPU with AVX512-BF16 or AMX at the
// level in use, a GPU of compute capability 8.0 or later), naming the device and --precision.
void check_precision_supported(Precision precision, const Device& device);

// Splits `total_threads` cores among `num_devices` logical CPU devices as evenly as possible;
// device i gets result[i] threads (at least 1 each).
std::vector<int> split_cores(int total_threads, int num_devices);

}  // namespace tower
