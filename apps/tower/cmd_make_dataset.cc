// `tower make-dataset`: writes a small learnable synthetic data set in a real file format.
#include <fmt/format.h>

#include "command.h"
#include "tower/data/make_dataset.h"

namespace tower::cli {
namespace {

struct MakeDatasetArgs {
  std::string format = "cifar10";
  std::string out;
  int64_t num_train = 5000;
  int64_t num_test = 1000;
  uint64_t seed = 0;
  bool plain = false;
};

void run_make_dataset(const MakeDatasetArgs& args) {
  MakeDatasetOptions options;
  options.format = parse_dataset_format(args.format);
  options.dir = args.out;
  options.num_train = args.num_train;
  options.num_test = args.num_test;
  options.seed = args.seed;
  options.idx_compression = args.plain ? IdxCompression::none : IdxCompression::gzip;
  std::string spec = make_dataset(options);
  fmt::print("wrote {} training and {} test examples to {} (data set spec: {})\n", args.num_train,
             args.num_test, args.out, spec);
}

CommandRegistrar registrar{
    {"make-dataset",
     "Write a small learnable synthetic data set (CIFAR-10, CIFAR-100 or "
     "IDX format)",
     [](CLI::App& app) {
       static MakeDatasetArgs args;
       app.add_option("--format", args.format, "File format: cifar10, cifar100 or idx")
           ->check(CLI::IsMember({"cifar10", "cifar100", "idx"}))
           ->capture_default_str();
       app.add_option("--out", args.out, "Directory to write (created if missing)")->required();
       app.add_option("--num_train", args.num_train, "Training examples")
           ->check(positive)
           ->capture_default_str();
       app.add_option("--num_test", args.num_test, "Test examples")
           ->check(positive)
           ->capture_default_str();
       app.add_option("--seed", args.seed, "Seed of the patterns and noise")->capture_default_str();
       app.add_flag("--plain", args.plain, "IDX only: write uncompressed files instead of .gz");
       app.callback([] { run_make_dataset(args); });
     }}};

}  // namespace
}  // namespace tower::cli
