// `tower data SPEC`: what a data set holds (data/data_summary.h).
#include <fmt/format.h>

#include "command.h"
#include "tower/data/data_summary.h"

namespace tower::cli {
namespace {

struct DataFlags {
  std::string data, list;
  double test_fraction = 0.1;
};

CommandRegistrar registrar{
    {"data", "Show a data set's classes, split sizes and images (a folder's files with --list)",
     [](CLI::App& app) {
       static DataFlags flags;
       app.add_option("data", flags.data, "As --data of tower train: folder:DIR, npy:DIR, ...")
           ->required();
       app.add_option("--test_fraction", flags.test_fraction,
                      "An image folder's held-out fraction (without train/ and test/)")
           ->capture_default_str();
       app.add_option("--list", flags.list, "train | test: list that split's files and classes");
       app.callback([] {
         DatasetSpec spec = parse_dataset_spec(flags.data);
         spec.test_fraction = flags.test_fraction;
         fmt::print("{}", summarize_dataset(spec, flags.list));
       });
     }}};

}  // namespace
}  // namespace tower::cli
