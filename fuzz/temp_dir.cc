// The per-process temporary directory of the file-based entry points.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "fuzz/entry_points.h"
#include "fuzz/fuzz_check.h"

namespace tierflow::fuzz {
namespace {

struct TempDir {
  std::string path;
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tierflow-fuzz-XXXXXX").string();
    FUZZ_CHECK(mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

}  // namespace

const std::string& FuzzTempDir() {
  static TempDir dir;
  return dir.path;
}

std::string WriteFuzzFile(std::string_view name, std::string_view data) {
  const std::string path = FuzzTempDir() + "/" + std::string(name);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  out.close();
  FUZZ_CHECK(out.good());
  return path;
}

}  // namespace tierflow::fuzz
