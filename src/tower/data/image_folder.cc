#include "tower/data/image_folder.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <thread>

#include "tower/core/crc32c.h"
#include "tower/core/hash.h"
#include "tower/data/file_io.h"
#include "tower/data/image_decode.h"

namespace tower {
namespace {

namespace fs = std::filesystem;

bool is_image_file(const fs::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

// The class folders of `root` (sorted, hidden ones left out).
std::vector<std::string> class_folders(const fs::path& root) {
  std::vector<std::string> classes;
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory() && e.path().filename().string()[0] != '.')
      classes.push_back(e.path().filename().string());
  std::sort(classes.begin(), classes.end());
  return classes;
}

// The images under root/<class>/ for each class (recursively, sorted), relative to `base`.
std::vector<FolderEntry> list_classes(const fs::path& root, const fs::path& base,
                                      const std::vector<std::string>& classes, int64_t& ignored,
                                      bool allow_empty) {
  std::vector<FolderEntry> entries;
  for (size_t c = 0; c < classes.size(); ++c) {
    const fs::path dir = root / classes[c];
    std::vector<FolderEntry> found;
    if (fs::is_directory(dir))
      for (const auto& e : fs::recursive_directory_iterator(dir)) {
        if (!e.is_regular_file()) continue;
        if (!is_image_file(e.path())) {
          ++ignored;
          continue;
        }
        struct stat st {};
        if (::stat(e.path().c_str(), &st) != 0) fail("cannot read '{}'", e.path().string());
        found.push_back(
            {fs::relative(e.path(), base).generic_string(), static_cast<int32_t>(c),
             static_cast<uint64_t>(st.st_size),
             static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec});
      }
    if (found.empty() && !allow_empty)
      fail("class folder '{}' holds no JPEG or PNG image", dir.string());
    std::sort(found.begin(), found.end(),
              [](const FolderEntry& a, const FolderEntry& b) { return a.path < b.path; });
    entries.insert(entries.end(), found.begin(), found.end());
  }
  return entries;
}

// The cache file's layout (little-endian; docs/data.md): a 64-byte header, the class names, the
// bad images left out (why each is bad), the labels (i32) from a 64-byte boundary, a CRC-32C of
// each image from the next one, each image's file size (width, height: u32 each) from the next,
// then the pixels (u8, N x C x H x W) from the next one.
struct CacheHeader {
  char magic[8];  // "TOWERIMG"
  uint32_t version;
  uint32_t channels, height, width;
  uint64_t count;
  uint64_t key;
  uint32_t num_classes;
  uint32_t names_bytes;  // the class names: each a u32 length then its bytes
  uint32_t bad;          // images that failed to decode, left out (--skip_bad_images)
  uint32_t bad_bytes;    // their reasons, after the names: each a u32 length then its bytes
  uint32_t labels_crc;   // CRC-32C of the labels
  uint32_t reserved;
};
static_assert(sizeof(CacheHeader) == 64);
// Version 2: checksums, the bad images recorded (one cache for runs with and without
// --skip_bad_images), and the standard FNV-1a basis (other splits than version 1's).
constexpr uint32_t kCacheVersion = 2;
size_t align64(size_t n) { return (n + 63) / 64 * 64; }

// Where the parts of a cache of `h` lie.
struct CacheLayout {
  size_t labels, crcs, sizes, pixels, end;
};
CacheLayout cache_layout(const CacheHeader& h) {
  CacheLayout l;
  l.labels = align64(sizeof h + h.names_bytes + h.bad_bytes);
  l.crcs = align64(l.labels + h.count * 4);
  l.sizes = align64(l.crcs + h.count * 4);
  l.pixels = align64(l.sizes + h.count * 8);
  l.end = l.pixels + h.count * h.channels * h.height * h.width;
  return l;
}

// Length-prefixed strings (u32 length, then the bytes) from [at, end); nothing if they overrun.
std::optional<std::vector<std::string>> read_strings(const uint8_t* base, size_t at, size_t end,
                                                     uint32_t count) {
  std::vector<std::string> out;
  for (uint32_t c = 0; c < count; ++c) {
    uint32_t n = 0;
    if (at + 4 > end) return std::nullopt;
    std::memcpy(&n, base + at, 4);
    if (at + 4 + n > end) return std::nullopt;
    out.emplace_back(reinterpret_cast<const char*>(base + at + 4), n);
    at += 4 + n;
  }
  return out;
}
std::string write_strings(const std::vector<std::string>& strings) {
  std::string out;
  for (const std::string& s : strings) {
    const auto n = static_cast<uint32_t>(s.size());
    out.append(reinterpret_cast<const char*>(&n), 4);
    out += s;
  }
  return out;
}

// The key says which images, of what size: one cache serves runs with and without
// --skip_bad_images (it records the bad images).
uint64_t cache_key(const std::vector<FolderEntry>& entries, const FolderOptions& o) {
  uint64_t h = fnv1a(o.image_shape.to_string());
  for (const FolderEntry& e : entries) {
    h = fnv1a(e.path, h);
    h = fnv1a(&e.label, sizeof e.label, h);
    h = fnv1a(&e.bytes, sizeof e.bytes, h);
    h = fnv1a(&e.mtime_ns, sizeof e.mtime_ns, h);
  }
  return h;
}

// A split as decoded: its data set and the images left out (--skip_bad_images), each reason
// naming its file.
struct Decoded {
  Dataset data;
  std::vector<std::string> bad;
  std::vector<uint32_t> sizes;  // each kept image's file size: width, height
};

// "files of 53x57 to 108x125 pixels (median 99x77)": the sizes by area.
std::string describe_sizes(const std::vector<uint32_t>& sizes) {
  std::vector<std::pair<int64_t, int64_t>> wh;
  for (size_t i = 0; i + 1 < sizes.size(); i += 2) wh.emplace_back(sizes[i], sizes[i + 1]);
  return wh.empty() ? "" : "files of " + size_range(std::move(wh));
}

// The first of the kept images whose pixels fail their checksum, or -1.
int64_t failing_image(const uint8_t* pixels, const uint8_t* crcs, int64_t n, size_t image_bytes) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t crc = 0;
    std::memcpy(&crc, crcs + 4 * i, 4);
    if (crc32c(pixels + static_cast<size_t>(i) * image_bytes, image_bytes) != crc) return i;
  }
  return -1;
}

// The data set in the cache file, or nothing (with the reason) when it is missing, truncated,
// for another folder or size, or fails a checksum (`entries` name a failing image when none was
// left out).
std::optional<Decoded> map_cache(const std::string& file, uint64_t key, const Shape& shape,
                                 const std::vector<FolderEntry>& entries, std::string& why) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    why = "no cache yet";
    return std::nullopt;
  }
  struct stat st {};
  ::fstat(fd, &st);
  const size_t size = static_cast<size_t>(st.st_size);
  // MAP_POPULATE: the pages are read in now, not faulted in one by one during the first epoch.
  void* map = size >= sizeof(CacheHeader)
                  ? ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0)
                  : MAP_FAILED;
  ::close(fd);
  if (map == MAP_FAILED) {
    why = "the cache is truncated";
    return std::nullopt;
  }
  std::shared_ptr<void> mapping(map, [size](void* p) { ::munmap(p, size); });
  const auto* base = static_cast<const uint8_t*>(map);
  CacheHeader h;
  std::memcpy(&h, base, sizeof h);
  if (std::memcmp(h.magic, "TOWERIMG", 8) != 0 || h.version != kCacheVersion) {
    why = "the cache is not a tower image cache of this version";
    return std::nullopt;
  }
  if (h.key != key || h.channels != shape[0] || h.height != shape[1] || h.width != shape[2]) {
    why = "the folder or the image size changed";
    return std::nullopt;
  }
  const CacheLayout l = cache_layout(h);
  if (size != l.end) {
    why = "the cache is truncated";
    return std::nullopt;
  }
  const size_t names_end = sizeof h + h.names_bytes;
  auto names = read_strings(base, sizeof h, names_end, h.num_classes);
  auto bad = read_strings(base, names_end, l.labels, h.bad);
  if (!names || !bad) {
    why = "the cache's class names or list of bad images are damaged";
    return std::nullopt;
  }
  const auto n = static_cast<int64_t>(h.count);
  if (crc32c(base + l.labels, static_cast<size_t>(n) * 4) != h.labels_crc) {
    why = "the cache's labels fail their checksum";
    return std::nullopt;
  }
  const size_t image_bytes = static_cast<size_t>(shape.numel());
  if (const int64_t i = failing_image(base + l.pixels, base + l.crcs, n, image_bytes); i >= 0) {
    why = fmt::format("image {} of the cache{} fails its checksum", i,
                      bad->empty() && i < static_cast<int64_t>(entries.size())
                          ? fmt::format(" ({})", entries[static_cast<size_t>(i)].path)
                          : "");
    return std::nullopt;
  }
  Decoded d{.bad = std::move(*bad)};
  d.sizes.resize(static_cast<size_t>(n) * 2);
  std::memcpy(d.sizes.data(), base + l.sizes, d.sizes.size() * 4);
  d.data.class_names = std::move(*names);
  d.data.num_classes = static_cast<int>(h.num_classes);
  d.data.labels = Tensor::wrap(const_cast<uint8_t*>(base + l.labels), Shape{n}, DType::i32);
  for (int64_t i = 0; i < n; ++i)
    if (d.data.labels.data<int32_t>()[i] < 0 ||
        d.data.labels.data<int32_t>()[i] >= d.data.num_classes) {
      why = "the cache's labels are out of range";
      return std::nullopt;
    }
  d.data.images = Tensor::wrap(const_cast<uint8_t*>(base + l.pixels),
                               Shape{n, shape[0], shape[1], shape[2]}, DType::u8);
  d.data.backing = std::move(mapping);
  return d;
}

// Writes the data set to the cache file atomically (a temporary file renamed over it). A folder
// that cannot be written only costs the next run a decode: a warning, no error.
void write_cache(const std::string& file, uint64_t key, const Decoded& decoded, bool report) {
  auto cannot_write = [&] {
    if (report)
      fmt::print(stderr, "warning: cannot write the image cache '{}': the next run decodes again\n",
                 file);
  };
  const Dataset& d = decoded.data;
  std::error_code ec;
  fs::create_directories(fs::path(file).parent_path(), ec);
  const std::string tmp = file + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    const std::string names = write_strings(d.class_names), bad = write_strings(decoded.bad);
    const Shape image = d.image_shape();
    CacheHeader h{};
    std::memcpy(h.magic, "TOWERIMG", 8);
    h.version = kCacheVersion;
    h.channels = static_cast<uint32_t>(image[0]);
    h.height = static_cast<uint32_t>(image[1]);
    h.width = static_cast<uint32_t>(image[2]);
    h.count = static_cast<uint64_t>(d.size());
    h.key = key;
    h.num_classes = static_cast<uint32_t>(d.class_names.size());
    h.names_bytes = static_cast<uint32_t>(names.size());
    h.bad = static_cast<uint32_t>(decoded.bad.size());
    h.bad_bytes = static_cast<uint32_t>(bad.size());
    h.labels_crc = crc32c(d.labels.raw_data(), d.labels.nbytes());
    const size_t image_bytes = static_cast<size_t>(image.numel());
    std::vector<uint32_t> crcs(static_cast<size_t>(d.size()));
    for (size_t i = 0; i < crcs.size(); ++i)
      crcs[i] = crc32c(d.images.data<uint8_t>() + i * image_bytes, image_bytes);
    const CacheLayout l = cache_layout(h);
    const std::string pad(64, '\0');
    size_t at = 0;
    const auto put = [&](const void* data, size_t bytes, size_t from) {
      out.write(pad.data(), static_cast<std::streamsize>(from - at));
      out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
      at = from + bytes;
    };
    put(&h, sizeof h, 0);
    put(names.data(), names.size(), at);
    put(bad.data(), bad.size(), at);
    put(d.labels.raw_data(), d.labels.nbytes(), l.labels);
    put(crcs.data(), crcs.size() * 4, l.crcs);
    put(decoded.sizes.data(), decoded.sizes.size() * 4, l.sizes);
    put(d.images.raw_data(), d.images.nbytes(), l.pixels);
    out.flush();
    if (!out) {
      out.close();
      fs::remove(tmp, ec);
      cannot_write();
      return;
    }
  }
  fs::rename(tmp, file, ec);
  if (ec) {
    fs::remove(tmp, ec);
    cannot_write();
  }
}

// A file of about `expected` bytes, into a buffer of the calling thread (images are small: stdio's
// buffers and a fresh vector per file cost as much as decoding a 32x32 JPEG).
std::span<const uint8_t> read_small_file(const std::string& file, uint64_t expected) {
  thread_local std::vector<uint8_t> buffer;
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open {}: {}", file, std::strerror(errno));
  size_t size = 0;
  for (;;) {
    if (buffer.size() < size + expected + 1) buffer.resize(size + expected + 4096);
    const ssize_t n = ::read(fd, buffer.data() + size, buffer.size() - size);
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      fail("cannot read {}: {}", file, std::strerror(err));
    }
    if (n == 0) break;
    size += static_cast<size_t>(n);
  }
  ::close(fd);
  return {buffer.data(), size};
}

// Decodes the entries into a data set of `shape`, on `threads` threads, with progress on stderr
// after the first second.
Decoded decode_entries(const std::string& dir, const std::string& what,
                       std::vector<FolderEntry> entries, const FolderOptions& o) {
  const Shape& shape = o.image_shape;
  const int64_t n = static_cast<int64_t>(entries.size()), image_bytes = shape.numel();
  Tensor all(Shape{n, shape[0], shape[1], shape[2]}, DType::u8);  // decoded in place
  uint8_t* pixels = all.data<uint8_t>();
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<uint32_t> sizes(static_cast<size_t>(2 * n), 0);
  std::atomic<int64_t> next{0}, done{0};
  const auto start = std::chrono::steady_clock::now();
  auto work = [&] {
    for (int64_t i; (i = next.fetch_add(1)) < n; done.fetch_add(1)) {
      const FolderEntry& e = entries[static_cast<size_t>(i)];
      const std::string file = (fs::path(dir) / e.path).string();
      try {
        const std::span<const uint8_t> bytes = read_small_file(file, e.bytes);
        const ImageInfo info = image_info(bytes, file);
        sizes[static_cast<size_t>(2 * i)] = static_cast<uint32_t>(info.width);
        sizes[static_cast<size_t>(2 * i + 1)] = static_cast<uint32_t>(info.height);
        decode_to_size(bytes, file, shape[0], shape[1], shape[2], pixels + i * image_bytes);
      } catch (const std::exception& err) {
        errors[static_cast<size_t>(i)] = err.what();
      }
    }
  };
  const int threads = o.threads > 0 ? o.threads : std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  std::thread progress([&] {
    bool shown = false;
    while (o.report && done.load() < n) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (s < 1 || static_cast<int64_t>(s * 10) % 10 != 0) continue;
      const double rate = static_cast<double>(done.load()) / s;
      fmt::print(stderr, "\rdecoding {}: {}/{} images, {:.0f} images/s, {:.0f} s left   ", what,
                 done.load(), n, rate,
                 rate > 0 ? static_cast<double>(n - done.load()) / rate : 0.0);
      shown = true;
    }
    if (shown) fmt::print(stderr, "\n");
  });
  work();
  for (std::thread& t : pool) t.join();
  progress.join();

  Decoded decoded;
  for (size_t i = 0; i < errors.size(); ++i)
    if (!errors[i].empty()) {
      if (!o.skip_bad_images) fail("{} (--skip_bad_images skips such images)", errors[i]);
      decoded.bad.push_back(errors[i]);
    }
  const auto bad = static_cast<int64_t>(decoded.bad.size());
  Dataset& d = decoded.data;
  const int64_t kept = n - bad;
  d.labels = Tensor(Shape{kept}, DType::i32);
  if (bad > 0) {  // the good images only
    d.images = Tensor(Shape{kept, shape[0], shape[1], shape[2]}, DType::u8);
  } else {
    d.images = std::move(all);
    pixels = d.images.data<uint8_t>();
  }
  int64_t k = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!errors[static_cast<size_t>(i)].empty()) continue;
    if (bad > 0)
      std::memcpy(d.images.data<uint8_t>() + k * image_bytes, pixels + i * image_bytes,
                  static_cast<size_t>(image_bytes));
    d.labels.data<int32_t>()[k++] = entries[static_cast<size_t>(i)].label;
    decoded.sizes.push_back(sizes[static_cast<size_t>(2 * i)]);
    decoded.sizes.push_back(sizes[static_cast<size_t>(2 * i + 1)]);
  }
  return decoded;
}

}  // namespace

std::string size_range(std::vector<std::pair<int64_t, int64_t>> sizes) {
  if (sizes.empty()) return "";
  std::sort(sizes.begin(), sizes.end(),
            [](const auto& a, const auto& b) { return a.first * a.second < b.first * b.second; });
  const auto show = [](const auto& s) { return fmt::format("{}x{}", s.first, s.second); };
  return fmt::format("{} to {} pixels (median {})", show(sizes.front()), show(sizes.back()),
                     show(sizes[sizes.size() / 2]));
}

FolderListing list_image_folder(const std::string& dir, double test_fraction) {
  const fs::path root(dir);
  if (!fs::is_directory(root)) fail("image folder '{}' does not exist or is not a directory", dir);
  FolderListing listing;
  const fs::path train = root / "train";
  fs::path test = root / "test";
  if (!fs::is_directory(test)) test = root / "val";
  if (fs::is_directory(train) && fs::is_directory(test)) {
    listing.classes = class_folders(train);
    for (const std::string& c : class_folders(test))
      if (!std::binary_search(listing.classes.begin(), listing.classes.end(), c))
        fail("class folder '{}' has no counterpart in '{}'", (test / c).string(), train.string());
    if (listing.classes.size() < 2)
      fail("image folder '{}' holds {} class folder{}: at least 2 are needed", train.string(),
           listing.classes.size(), listing.classes.size() == 1 ? "" : "s");
    listing.train = list_classes(train, root, listing.classes, listing.ignored, false);
    listing.test = list_classes(test, root, listing.classes, listing.ignored, true);
  } else {
    for (const auto& e : fs::directory_iterator(root))
      listing.ignored += e.is_regular_file() ? 1 : 0;
    listing.classes = class_folders(root);
    if (listing.classes.size() < 2)
      fail("image folder '{}' holds {} class folder{} (DIR/<class>/<image>): at least 2 are needed",
           dir, listing.classes.size(), listing.classes.size() == 1 ? "" : "s");
    // A hash of the relative path, as a number in [0, 1), puts each image in a split for good.
    for (FolderEntry& e : list_classes(root, root, listing.classes, listing.ignored, false)) {
      const double u = static_cast<double>(fnv1a(e.path) >> 11) / 9007199254740992.0;
      (u < test_fraction ? listing.test : listing.train).push_back(std::move(e));
    }
  }
  if (listing.train.empty()) fail("image folder '{}' leaves no image for training", dir);
  return listing;
}

Dataset read_image_folder(const std::string& dir, Split split, const FolderOptions& o) {
  const Shape& shape = o.image_shape;
  if (shape.rank() != 3 || (shape[0] != 1 && shape[0] != 3) || shape[1] < 1 || shape[2] < 1)
    fail("image folder '{}': images are brought to (1 or 3, H, W), not {}", dir, shape.to_string());
  FolderListing listing = list_image_folder(dir, o.test_fraction);
  if (listing.ignored > 0 && split == Split::train && o.report)
    fmt::print(stderr, "{}: ignored {} file{} that are neither JPEG nor PNG\n", dir,
               listing.ignored, listing.ignored == 1 ? "" : "s");
  std::vector<FolderEntry>& entries = split == Split::train ? listing.train : listing.test;
  const std::string name =
      fmt::format("{}-{}x{}x{}", split_name(split), shape[0], shape[1], shape[2]);
  const std::string file = (fs::path(dir) / ".tower-cache" / (name + ".bin")).string();
  const uint64_t key = cache_key(entries, o);
  const std::string what = fmt::format("{} ({})", dir, split_name(split));
  std::string why;
  std::optional<Decoded> cached = map_cache(file, key, shape, entries, why);
  if (!cached) {
    if (why != "no cache yet" && o.report)
      fmt::print(stderr, "{}: {}: decoding the images again\n", file, why);
    cached = decode_entries(dir, what, std::move(entries), o);
    cached->data.class_names = listing.classes;
    cached->data.num_classes = static_cast<int>(listing.classes.size());
    write_cache(file, key, *cached, o.report);
  }
  const std::vector<std::string>& bad = cached->bad;
  if (!bad.empty() && !o.skip_bad_images)  // a cache a run with --skip_bad_images wrote
    fail("{} (--skip_bad_images skips such images; {} of {} are bad)", bad[0], bad.size(), what);
  if (!bad.empty() && o.report)
    fmt::print(stderr, "warning: skipped {} bad image{} of {} (--skip_bad_images), the first: {}\n",
               bad.size(), bad.size() == 1 ? "" : "s", what, bad[0]);
  cached->data.origin = describe_sizes(cached->sizes);
  return std::move(cached->data);
}

}  // namespace tower
