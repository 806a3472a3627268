// A fresh temporary directory per test, removed afterwards (header-only test helper).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace tower::testing {

class TmpDir {
 public:
  TmpDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "tower_test_XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TmpDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TmpDir(const TmpDir&) = delete;
  TmpDir& operator=(const TmpDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace tower::testing
