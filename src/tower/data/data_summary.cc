#include "tower/data/data_summary.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "tower/data/file_io.h"
#include "tower/data/image_decode.h"
#include "tower/data/image_folder.h"

namespace tower {
namespace {

// A table of the classes with their counts in each split.
std::string class_table(const std::vector<std::string>& classes, const std::vector<int64_t>& train,
                        const std::vector<int64_t>& test) {
  size_t width = 5;
  for (const std::string& c : classes) width = std::max(width, c.size());
  std::string text = fmt::format("  {:<{}}  {:>8}  {:>8}\n", "class", width, "train", "test");
  for (size_t c = 0; c < classes.size(); ++c)
    text += fmt::format("  {:<{}}  {:>8}  {:>8}\n", classes[c], width, train[c], test[c]);
  return text;
}

std::vector<int64_t> counts(const Dataset& d) {
  std::vector<int64_t> n(static_cast<size_t>(d.num_classes), 0);
  for (int64_t i = 0; i < d.size(); ++i) ++n[static_cast<size_t>(d.labels.data<int32_t>()[i])];
  return n;
}

// The files' sizes (smallest, median and largest by area) and formats, from their headers.
std::string file_sizes(const std::string& dir, const FolderListing& listing) {
  std::vector<std::pair<int64_t, int64_t>> sizes;  // (width, height)
  std::map<std::string, int64_t> formats;
  int64_t unreadable = 0;
  for (const auto* split : {&listing.train, &listing.test})
    for (const FolderEntry& e : *split) {
      const std::string file = (std::filesystem::path(dir) / e.path).string();
      try {
        const ImageInfo info = image_info(read_file(file), file);
        sizes.emplace_back(info.width, info.height);
        ++formats[info.format];
      } catch (const Error&) {
        ++unreadable;
      }
    }
  if (sizes.empty()) return "  no readable image\n";
  std::string text = fmt::format("  files: {}, ", size_range(std::move(sizes)));
  for (const auto& [format, n] : formats) text += fmt::format("{} {}, ", n, format);
  text.resize(text.size() - 2);
  if (unreadable > 0) text += fmt::format("; {} without a readable header", unreadable);
  return text + "\n";
}

std::string summarize_folder(const DatasetSpec& spec, const std::string& list) {
  const FolderListing listing = list_image_folder(spec.dir, spec.test_fraction);
  const auto by_class = [&](const std::vector<FolderEntry>& entries) {
    std::vector<int64_t> n(listing.classes.size(), 0);
    for (const FolderEntry& e : entries) ++n[static_cast<size_t>(e.label)];
    return n;
  };
  const bool given = std::filesystem::is_directory(std::filesystem::path(spec.dir) / "train");
  std::string text =
      fmt::format("{}: {} classes, {} training and {} test images ({}){}\n", spec.text,
                  listing.classes.size(), listing.train.size(), listing.test.size(),
                  given ? "the train/ and test/ folders"
                        : fmt::format("{:g} held out by FNV-1a of each path, --test_fraction",
                                      spec.test_fraction),
                  listing.ignored > 0 ? fmt::format("; {} other file{} ignored", listing.ignored,
                                                    listing.ignored == 1 ? "" : "s")
                                      : "");
  text += class_table(listing.classes, by_class(listing.train), by_class(listing.test));
  text += file_sizes(spec.dir, listing);
  if (list.empty()) return text;
  for (const FolderEntry& e : list == "train" ? listing.train : listing.test)
    text += fmt::format("{}\t{}\n", e.path, listing.classes[static_cast<size_t>(e.label)]);
  return text;
}

}  // namespace

std::string summarize_dataset(const DatasetSpec& spec, const std::string& list) {
  if (!list.empty() && list != "train" && list != "test")
    fail("--list must be train or test, got '{}'", list);
  if (spec.format == DatasetFormat::folder) return summarize_folder(spec, list);
  if (!list.empty()) fail("--list lists the files of an image folder; {} has none", spec.text);
  const Dataset train = open_dataset(spec, Split::train), test = open_dataset(spec, Split::test);
  std::string text =
      fmt::format("{}: {} classes, {} training and {} test images of {}\n", spec.text,
                  train.num_classes, train.size(), test.size(), train.image_shape().to_string());
  std::vector<int64_t> test_counts = counts(test);
  test_counts.resize(static_cast<size_t>(train.num_classes), 0);
  return text + class_table(train.class_names, counts(train), test_counts);
}

}  // namespace tower
