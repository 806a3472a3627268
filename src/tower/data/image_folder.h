// A folder of JPEG and PNG images in class folders (`--data folder:DIR`), as torchvision's
// ImageFolder and Keras' image_dataset_from_directory read it:
//
//   DIR/<class>/**/<image>.{jpg,jpeg,png}       classes: the sub-folder names, sorted, from 0
//   DIR/train/<class>/... + DIR/test/<class>/...  (or DIR/val): the splits as given
//
// Without train/ and test/, a fixed fraction of the images is the test split, chosen by a hash of
// each image's path relative to DIR, so adding images moves no other image between the splits.
// Other files are ignored (and counted). The images are decoded once (in parallel, with progress
// on stderr), brought to the data set's size (image_decode.h) and written to a cache,
// DIR/.tower-cache/<split>-<C>x<H>x<W>.bin, that later runs memory-map instead of decoding; the
// cache is keyed by every image's path, size and modification time and by the size, so a changed
// folder is decoded again. docs/data.md describes the cache's format.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "tower/data/dataset.h"

namespace tower {

struct FolderOptions {
  Shape image_shape;             // (C, H, W) the images are brought to; C is 1 or 3
  double test_fraction = 0.1;    // without train/ and test/ folders
  bool skip_bad_images = false;  // warn and skip corrupt images instead of stopping
  int threads = 0;               // decoding threads; 0: the cores
  bool report = true;            // progress and warnings on stderr (under MPI: rank 0's only)
};

// The images of one class folder or split, relative to DIR, with their labels.
struct FolderEntry {
  std::string path;  // relative to DIR, '/'-separated
  int32_t label = 0;
  uint64_t bytes = 0;
  int64_t mtime_ns = 0;
};
struct FolderListing {
  std::vector<std::string> classes;
  std::vector<FolderEntry> train, test;
  int64_t ignored = 0;  // files that are not JPEG or PNG
};
// Lists DIR as described above; an empty class folder, a single class or a missing folder is an
// error naming it.
FolderListing list_image_folder(const std::string& dir, double test_fraction);

// "53x57 to 108x125 pixels (median 99x77)": image sizes (width, height), smallest, largest and
// median by area; empty for none.
std::string size_range(std::vector<std::pair<int64_t, int64_t>> sizes);

// The split of DIR, from the cache when it matches, else decoded (and cached).
Dataset read_image_folder(const std::string& dir, Split split, const FolderOptions& options);

}  // namespace tower
