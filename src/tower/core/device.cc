#include "tower/core/device.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <optional>
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

namespace {

struct CpuModel {
  std::string name;
  bool amd = false;
  CpuIsa isa = CpuIsa::baseline;
};

CpuModel read_cpu_model() {
  CpuModel model;
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  bool avx2 = false, fma = false, bf16 = false, amx = false;
  int avx512_parts = 0;
  while (std::getline(in, line)) {
    if (model.name.empty() && line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      if (p != std::string::npos) model.name = line.substr(p + 2);
    }
    if (line.rfind("vendor_id", 0) == 0)
      model.amd |= line.find("AuthenticAMD") != std::string::npos;
    if (line.rfind("flags", 0) == 0) {
      std::istringstream words(line.substr(line.find(':') + 1));
      std::string w;
      while (words >> w) {
        avx2 |= w == "avx2";
        fma |= w == "fma";
        // oneDNN's avx512_core: F, BW, VL and DQ.
        avx512_parts += w == "avx512f" || w == "avx512bw" || w == "avx512vl" || w == "avx512dq";
        bf16 |= w == "avx512_bf16";
        amx |= w == "amx_tile";
      }
      break;
    }
  }
  const bool avx512 = avx512_parts == 4;
  if (avx2 && fma) model.isa = CpuIsa::avx2;
  if (model.isa == CpuIsa::avx2 && avx512) model.isa = CpuIsa::avx512;
  if (model.isa == CpuIsa::avx512 && bf16) model.isa = CpuIsa::avx512_bf16;
  if (model.isa == CpuIsa::avx512_bf16 && amx) model.isa = CpuIsa::amx;
  return model;
}

const CpuModel& cpu_model() {
  static const CpuModel model = read_cpu_model();
  return model;
}

constexpr CpuIsa kLevels[] = {CpuIsa::baseline, CpuIsa::avx2, CpuIsa::avx512, CpuIsa::avx512_bf16,
                              CpuIsa::amx};

std::optional<CpuIsa> set_cap;  // set_max_cpu_isa()'s
std::atomic<bool> isa_fixed{false};

// The cap set for the process, else the one oneDNN's own environment variable sets, if any.
std::optional<CpuIsa> isa_cap() {
  if (set_cap) return set_cap;
  // oneDNN's own switch caps its kernels; tower's follow it (unknown values: no cap, as oneDNN).
  for (const char* name : {"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"}) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') continue;
    std::string text(v);
    for (char& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (text == "SSE41" || text == "AVX") return CpuIsa::baseline;
    if (text.rfind("AVX2", 0) == 0) return CpuIsa::avx2;
    if (text == "AVX512_CORE" || text == "AVX512_CORE_VNNI") return CpuIsa::avx512;
    if (text == "AVX512_CORE_BF16") return CpuIsa::avx512_bf16;
    return std::nullopt;  // ALL, AMX levels, and names of other CPUs
  }
  return std::nullopt;
}

}  // namespace

std::string_view cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::baseline:
      return "baseline";
    case CpuIsa::avx2:
      return "avx2";
    case CpuIsa::avx512:
      return "avx512";
    case CpuIsa::avx512_bf16:
      return "avx512_bf16";
    case CpuIsa::amx:
      return "amx";
  }
  return "?";
}

CpuIsa cpu_native_isa() { return cpu_model().isa; }

CpuIsa parse_cpu_isa(std::string_view name, std::string_view what) {
  std::string text(name);
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (CpuIsa isa : kLevels)
    if (text == cpu_isa_name(isa)) return isa;
  fail("{}={}: expected one of avx2, avx512, avx512_bf16, amx (or baseline)", what, name);
}

void set_max_cpu_isa(CpuIsa cap) {
  TOWER_CHECK_MSG(!isa_fixed.load(), "set_max_cpu_isa after the level was fixed");
  set_cap = cap;
}

CpuIsa cpu_isa() {
  static const CpuIsa isa = [] {
    isa_fixed = true;
    const std::optional<CpuIsa> cap = isa_cap();
    return cap ? std::min(*cap, cpu_native_isa()) : cpu_native_isa();
  }();
  return isa;
}

CpuInfo cpu_info() {
  CpuInfo info;
  info.num_cores = 0;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) info.num_cores = CPU_COUNT(&set);
  if (info.num_cores <= 0) info.num_cores = 1;
  info.model_name = cpu_model().name;
  info.amd = cpu_model().amd;
  const CpuIsa isa = cpu_isa();
  info.avx2 = isa >= CpuIsa::avx2;
  info.avx512f = isa >= CpuIsa::avx512;
  info.avx512_bf16 = isa >= CpuIsa::avx512_bf16;
  info.amx = isa >= CpuIsa::amx;
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

void check_precision_supported(Precision precision, const Device& device) {
  if (precision != Precision::bf16) return;
  if (device.kind == DeviceKind::cuda) {
    for (const CudaDeviceInfo& gpu : cuda_devices())
      if (gpu.index == device.index && gpu.major < 8)
        fail(
            "--precision bf16 needs a GPU of compute capability 8.0 or later (bf16 tensor cores), "
            "and {} ({}) is {}.{}: use --precision fp32",
            device.to_string(), gpu.name, gpu.major, gpu.minor);
    return;
  }
  const CpuInfo cpu = cpu_info();
  if (!cpu.avx512_bf16 && !cpu.amx)
    fail(
        "--precision bf16 needs a CPU with AVX512-BF16 or AMX instructions, and this one ({}) has "
        "neither{}: use --precision fp32",
        cpu.model_name.empty() ? std::string("unknown") : cpu.model_name,
        cpu_isa() < cpu_native_isa()
            ? fmt::format(" at the level in use ({})", cpu_isa_name(cpu_isa()))
            : std::string());
}

}  // namespace tower
