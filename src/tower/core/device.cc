#include "tower/core/device.h"

#include <dlfcn.h>

#include <charconv>
#include <fstream>
#include <sstream>

#include "tower/core/error.h"

namespace tower {

Device Device::parse(std::string_view text) {
  auto colon = text.find(':');
  std::string_view kind = text.substr(0, colon);
  Device d;
  if (kind == "cpu") {
    d.kind = DeviceKind::cpu;
  } else if (kind == "cuda" || kind == "gpu") {
    d.kind = DeviceKind::cuda;
  } else {
    fail("bad device '{}': expected 'cpu:N' or 'cuda:N' (e.g. cpu:0)", text);
  }
  if (colon == std::string_view::npos) return d;  // "cpu" means cpu:0
  std::string_view idx = text.substr(colon + 1);
  auto [ptr, ec] = std::from_chars(idx.data(), idx.data() + idx.size(), d.index);
  if (idx.empty() || ec != std::errc() || ptr != idx.data() + idx.size() || d.index < 0)
    fail("bad device '{}': the index after ':' must be a non-negative integer", text);
  return d;
}

std::string Device::to_string() const {
  return fmt::format("{}:{}", kind == DeviceKind::cpu ? "cpu" : "cuda", index);
}

std::vector<Device> parse_device_list(std::string_view text) {
  std::vector<Device> devices;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string_view item =
        text.substr(start, comma == std::string_view::npos ? comma : comma - start);
    if (item.empty()) fail("bad device list '{}': empty entry", text);
    devices.push_back(Device::parse(item));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  for (size_t i = 0; i < devices.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (devices[i] == devices[j])
        fail("bad device list '{}': {} is listed twice", text, devices[i].to_string());
  return devices;
}

CpuInfo cpu_info() {
  CpuInfo info;
  info.num_cores = 0;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) info.num_cores = CPU_COUNT(&set);
  if (info.num_cores <= 0) info.num_cores = 1;
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (info.model_name.empty() && line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      if (p != std::string::npos) info.model_name = line.substr(p + 2);
    }
    if (line.rfind("flags", 0) == 0) {
      std::istringstream words(line.substr(line.find(':') + 1));
      std::string w;
      while (words >> w) {
        info.avx2 |= w == "avx2";
        info.avx512f |= w == "avx512f";
        info.avx512_bf16 |= w == "avx512_bf16";
        info.amx |= w == "amx_tile";
      }
      break;
    }
  }
  return info;
}

std::vector<CudaDeviceInfo> cuda_devices() {
  // Ask the driver through dlopen so that a binary runs on machines without one.
  std::vector<CudaDeviceInfo> result;
  void* lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (lib == nullptr) return result;
  using InitFn = int (*)(unsigned);
  using CountFn = int (*)(int*);
  using GetFn = int (*)(int*, int);
  using NameFn = int (*)(char*, int, int);
  using MemFn = int (*)(size_t*, int);
  using AttrFn = int (*)(int*, int, int);
  auto init = reinterpret_cast<InitFn>(dlsym(lib, "cuInit"));
  auto count = reinterpret_cast<CountFn>(dlsym(lib, "cuDeviceGetCount"));
  auto get = reinterpret_cast<GetFn>(dlsym(lib, "cuDeviceGet"));
  auto name = reinterpret_cast<NameFn>(dlsym(lib, "cuDeviceGetName"));
  auto mem = reinterpret_cast<MemFn>(dlsym(lib, "cuDeviceTotalMem_v2"));
  auto attr = reinterpret_cast<AttrFn>(dlsym(lib, "cuDeviceGetAttribute"));
  constexpr int kMajor = 75, kMinor = 76;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR/MINOR
  int n = 0;
  if (init && count && get && name && mem && attr && init(0) == 0 && count(&n) == 0) {
    for (int i = 0; i < n; ++i) {
      int dev = 0;
      char buf[256] = {};
      CudaDeviceInfo info;
      info.index = i;
      if (get(&dev, i) != 0) continue;
      if (name(buf, sizeof(buf), dev) == 0) info.name = buf;
      mem(&info.total_memory, dev);
      attr(&info.major, kMajor, dev);
      attr(&info.minor, kMinor, dev);
      result.push_back(info);
    }
  }
  dlclose(lib);
  return result;
}

std::vector<int> split_cores(int total_threads, int num_devices) {
  if (num_devices <= 0) fail("number of devices must be >= 1, got {}", num_devices);
  std::vector<int> threads(static_cast<size_t>(num_devices), 1);
  if (total_threads > num_devices) {
    for (int i = 0; i < num_devices; ++i)
      threads[static_cast<size_t>(i)] =
          total_threads / num_devices + (i < total_threads % num_devices ? 1 : 0);
  }
  return threads;
}

}  // namespace tower
