#include "io/temp_directory.h"

#include <stdlib.h>

#include <cerrno>
#include <filesystem>
#include <utility>

namespace tierflow {

StatusOr<TempDirectory> TempDirectory::Create(const std::string& base, const std::string& prefix,
                                              const std::string& what_to_do) {
  std::string tmpl = base + "/" + prefix + "-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    return ErrnoStatus(errno, "create a temporary directory " + tmpl + " (" + what_to_do + ")");
  }
  TempDirectory d;
  d.path_ = tmpl;
  return d;
}

TempDirectory::TempDirectory(TempDirectory&& o) noexcept : path_(std::move(o.path_)) {
  o.path_.clear();
}

TempDirectory& TempDirectory::operator=(TempDirectory&& o) noexcept {
  std::swap(path_, o.path_);
  return *this;
}

TempDirectory::~TempDirectory() {
  if (!path_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
}

}  // namespace tierflow
