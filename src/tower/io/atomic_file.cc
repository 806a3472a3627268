#include "tower/io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "tower/core/error.h"

namespace tower {
namespace {

// Writes all of `bytes`, retrying short writes; returns false with errno set on failure.
bool write_all(int fd, std::span<const uint8_t> bytes) {
  const uint8_t* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  return true;
}

void sync_directory_of(const std::string& path) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    fail("cannot open directory '{}' to sync '{}': {}", dir.string(), path, std::strerror(errno));
  // Some file systems cannot fsync a directory (EINVAL); the rename is then as durable as it gets.
  if (::fsync(fd) != 0 && errno != EINVAL) {
    int err = errno;
    ::close(fd);
    fail("cannot sync directory '{}' after writing '{}': {}", dir.string(), path,
         std::strerror(err));
  }
  ::close(fd);
}

}  // namespace

void atomic_write_file(const std::string& path,
                       const std::vector<std::span<const uint8_t>>& pieces) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot write '{}': cannot create '{}': {}", path, tmp, std::strerror(errno));
  auto give_up = [&](const char* what) {
    int err = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    fail("cannot write '{}': {} failed: {} (the previous file, if any, is unchanged)", path, what,
         std::strerror(err));
  };
  for (std::span<const uint8_t> piece : pieces)
    if (!write_all(fd, piece)) give_up("write");
  if (::fsync(fd) != 0) give_up("fsync");
  int closed = ::close(fd);
  fd = -1;
  if (closed != 0) give_up("close");
  if (::rename(tmp.c_str(), path.c_str()) != 0) give_up("rename");
  sync_directory_of(path);
}

void atomic_write_file(const std::string& path, std::string_view text) {
  atomic_write_file(
      path, {std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size())});
}

}  // namespace tower
