// libFuzzer target: IDX decoding (plain and gzip), building a data set from an image and a label
// file, and running one batch of it through the input pipeline. Input layout: a mode byte (bit 0:
// images are gzip, bit 1: labels are gzip), a big-endian u16 length of the image file, the image
// file, then the label file. Any input must either work or throw tower::Error.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "tower/data/file_io.h"
#include "tower/data/idx.h"
#include "tower/data/input_pipeline.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const int mode = data[0];
  const size_t split = std::min<size_t>((size_t{data[1]} << 8) | data[2], size - 3);
  std::span<const uint8_t> images_bytes(data + 3, split),
      labels_bytes(data + 3 + split, size - 3 - split);
  try {
    std::vector<uint8_t> images_plain, labels_plain;
    if (mode & 1) {
      images_plain = tower::gunzip(images_bytes, "images.gz");
      images_bytes = images_plain;
    }
    if (mode & 2) {
      labels_plain = tower::gunzip(labels_bytes, "labels.gz");
      labels_bytes = labels_plain;
    }
    tower::IdxArray images = tower::decode_idx(images_bytes, 3, "images");
    tower::IdxArray labels = tower::decode_idx(labels_bytes, 1, "labels");
    auto dataset = std::make_shared<const tower::Dataset>(
        tower::idx_dataset(images, "images", labels, "labels", tower::kIdxNumClasses, "fuzz"));
    tower::PipelineOptions options{.batch_size = 2,
                                   .seed = 1,
                                   .drop_remainder = false,
                                   .num_workers = 0,
                                   .transform = tower::pad_crop_flip_transform(1)};
    options.transform.standardize = true;
    tower::InputPipeline pipeline(dataset, options);
    tower::Batch batch = pipeline.next();
    if (batch.labels.numel() < 1 || batch.labels.numel() > 2) __builtin_trap();
  } catch (const tower::Error&) {
  }
  return 0;
}
