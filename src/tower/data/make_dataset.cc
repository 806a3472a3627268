#include "tower/data/make_dataset.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <vector>

#include "tower/core/error.h"
#include "tower/core/philox.h"
#include "tower/data/cifar.h"
#include "tower/data/file_io.h"
#include "tower/data/idx.h"

namespace tower {
namespace {

constexpr uint64_t kGenerate = 0x47454e45ull;  // "GENE"
constexpr int kBlobs = 3;

struct Blob {
  float cy, cx, sigma;
  std::vector<float> amplitude;  // per channel
};

struct Geometry {
  int channels, height, width, num_classes;
};

// Each class: kBlobs Gaussian blobs with random centres (kept in the middle half, so a 24x24
// crop of a 32x32 image still sees them), sizes and signed per-channel amplitudes.
std::vector<std::vector<Blob>> class_patterns(const Geometry& g, uint64_t seed) {
  std::vector<std::vector<Blob>> classes(static_cast<size_t>(g.num_classes));
  for (int k = 0; k < g.num_classes; ++k) {
    Philox rng(seed, philox_stream(kGenerate, 0, static_cast<uint64_t>(k)));
    uint64_t i = 0;
    for (int b = 0; b < kBlobs; ++b) {
      Blob blob;
      blob.cy = g.height * (0.25f + 0.5f * rng.uniform(i++));
      blob.cx = g.width * (0.25f + 0.5f * rng.uniform(i++));
      blob.sigma = g.height * (0.08f + 0.1f * rng.uniform(i++));
      for (int c = 0; c < g.channels; ++c)
        blob.amplitude.push_back(100 * (2 * rng.uniform(i++) - 1));
      classes[static_cast<size_t>(k)].push_back(std::move(blob));
    }
  }
  return classes;
}

// Example `index` of a split: its class pattern shifted by up to 2 pixels, plus noise.
void render(const Geometry& g, const std::vector<Blob>& pattern, const Philox& rng, uint8_t* chw) {
  const float dy = static_cast<float>(rng.below(0, 5)) - 2,
              dx = static_cast<float>(rng.below(1, 5)) - 2;
  uint64_t noise_index = 16;
  for (int c = 0; c < g.channels; ++c)
    for (int y = 0; y < g.height; ++y)
      for (int x = 0; x < g.width; ++x) {
        float v = 128;
        for (const Blob& b : pattern) {
          float ry = (y - b.cy - dy) / b.sigma, rx = (x - b.cx - dx) / b.sigma;
          v += b.amplitude[static_cast<size_t>(c)] * std::exp(-0.5f * (ry * ry + rx * rx));
        }
        v += 20 * rng.normal(noise_index++);
        *chw++ = static_cast<uint8_t>(std::clamp(std::lround(v), 0l, 255l));
      }
}

struct Examples {
  std::vector<uint8_t> images;  // n x C x H x W
  std::vector<int32_t> labels;
};

Examples generate(const Geometry& g, const std::vector<std::vector<Blob>>& patterns, int64_t n,
                  uint64_t seed, Split split) {
  Examples e;
  const size_t image_bytes = static_cast<size_t>(g.channels) * g.height * g.width;
  e.images.resize(static_cast<size_t>(n) * image_bytes);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t label = static_cast<int32_t>(i % g.num_classes);
    e.labels.push_back(label);
    Philox rng(seed,
               philox_stream(kGenerate, split == Split::train ? 1 : 2, static_cast<uint64_t>(i)));
    render(g, patterns[static_cast<size_t>(label)], rng, e.images.data() + i * image_bytes);
  }
  return e;
}

// Records [begin, end) of `e` as a CIFAR file; CIFAR-100 records carry (coarse, fine), with the
// 100 fine classes grouped 5 by 5 into 20 coarse ones as in the real data set.
std::vector<uint8_t> cifar_records(const Examples& e, int64_t begin, int64_t end, bool cifar100) {
  std::vector<uint8_t> out;
  for (int64_t i = begin; i < end; ++i) {
    const int label = e.labels[static_cast<size_t>(i)];
    if (cifar100) out.push_back(static_cast<uint8_t>(label / 5));
    out.push_back(static_cast<uint8_t>(label));
    const uint8_t* image = e.images.data() + i * kCifarImageBytes;
    out.insert(out.end(), image, image + kCifarImageBytes);
  }
  return out;
}

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}

void write_idx(const std::string& path, const std::vector<uint32_t>& dims,
               const std::vector<uint8_t>& data, IdxCompression compression) {
  std::vector<uint8_t> bytes = {0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) put_u32(bytes, d);
  bytes.insert(bytes.end(), data.begin(), data.end());
  if (compression == IdxCompression::gzip) {
    write_file(path + ".gz", gzip(bytes));
  } else {
    write_file(path, bytes);
  }
}

}  // namespace

DatasetFormat parse_dataset_format(std::string_view name) {
  if (name == "cifar10") return DatasetFormat::cifar10;
  if (name == "cifar100") return DatasetFormat::cifar100;
  if (name == "idx") return DatasetFormat::idx;
  fail("unknown data set format '{}'; expected cifar10, cifar100 or idx", name);
}

std::string make_dataset(const MakeDatasetOptions& o) {
  if (o.dir.empty()) fail("make_dataset: no output directory given");
  if (o.num_train < 1 || o.num_test < 1)
    fail("make_dataset: num_train ({}) and num_test ({}) must be at least 1", o.num_train,
         o.num_test);
  if (o.format == DatasetFormat::cifar10 && o.num_train < 5)
    fail("make_dataset: num_train {} is too small for CIFAR-10's 5 training files; use at least 5",
         o.num_train);
  std::error_code ec;
  std::filesystem::create_directories(o.dir, ec);
  if (ec) fail("cannot create directory {}: {}", o.dir, ec.message());

  if (o.format == DatasetFormat::idx) {
    Geometry g{1, 28, 28, kIdxNumClasses};
    auto patterns = class_patterns(g, o.seed);
    for (Split split : {Split::train, Split::test}) {
      const int64_t n = split == Split::train ? o.num_train : o.num_test;
      const std::string prefix = o.dir + (split == Split::train ? "/train" : "/t10k");
      Examples e = generate(g, patterns, n, o.seed, split);
      std::vector<uint8_t> labels(e.labels.begin(), e.labels.end());
      write_idx(prefix + "-images-idx3-ubyte", {static_cast<uint32_t>(n), 28, 28}, e.images,
                o.idx_compression);
      write_idx(prefix + "-labels-idx1-ubyte", {static_cast<uint32_t>(n)}, labels,
                o.idx_compression);
    }
    return "idx:" + o.dir;
  }

  const bool cifar100 = o.format == DatasetFormat::cifar100;
  Geometry g{kCifarChannels, kCifarHeight, kCifarWidth, cifar100 ? 100 : 10};
  auto patterns = class_patterns(g, o.seed);
  for (Split split : {Split::train, Split::test}) {
    const int64_t n = split == Split::train ? o.num_train : o.num_test;
    Examples e = generate(g, patterns, n, o.seed, split);
    std::vector<std::string> files = cifar_file_names(o.format, split);
    const int64_t num_files = static_cast<int64_t>(files.size());
    for (int64_t f = 0; f < num_files; ++f)
      write_file(o.dir + "/" + files[static_cast<size_t>(f)],
                 cifar_records(e, f * n / num_files, (f + 1) * n / num_files, cifar100));
  }
  return (cifar100 ? "cifar100:" : "cifar10:") + o.dir;
}

}  // namespace tower
