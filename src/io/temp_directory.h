// A directory made with mkdtemp and removed, with all it holds, when its
// owner goes: train's NVMe swap directory when none is given.
#pragma once

#include <string>

#include "tierflow/status.h"

namespace tierflow {

class TempDirectory {
 public:
  // Makes BASE/PREFIX-XXXXXX. Errors: errno's, naming the path and `what_to_do`.
  static StatusOr<TempDirectory> Create(const std::string& base, const std::string& prefix,
                                        const std::string& what_to_do);
  TempDirectory() = default;
  TempDirectory(TempDirectory&& o) noexcept;
  TempDirectory& operator=(TempDirectory&& o) noexcept;
  TempDirectory(const TempDirectory&) = delete;
  TempDirectory& operator=(const TempDirectory&) = delete;
  ~TempDirectory();

  const std::string& path() const { return path_; }  // "" when none was made

 private:
  std::string path_;
};

}  // namespace tierflow
