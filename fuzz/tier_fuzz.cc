// Fuzz entry point for the tier commands' inputs: a checkpoint directory
// whose trainer_state.json is the input, read by `tier ls`, `tier verify` and
// `tier export`. The fixture around it holds what a crafted state could try to
// reach: a unit file outside the checkpoint, and a symlink inside it that
// points out. The invariants: nothing under the fixture changes except the
// export's own output; a state that verifies or exports names only units
// whose names are plain file names; and no command reads through the link.
#include <sys/stat.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>

#include "checkpoint/checkpoint_verify.h"
#include "checkpoint/optimizer_state.h"
#include "common/path_component.h"
#include "fuzz/entry_points.h"
#include "fuzz/fuzz_check.h"
#include "tier/tier_export.h"
#include "tier/tier_ls.h"
#include "tier/tier_verify.h"

namespace tierflow::fuzz {
namespace {
namespace fs = std::filesystem;

// A host-layout unit file of 2 parameters; fuzz/make_seeds.py builds the same
// bytes (safetensors(..., pad=2)) to give the seeds matching CRC32Cs.
std::string UnitFile() {
  const std::string header =
      "{\"master\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}, "
      "\"exp_avg\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 16]}, "
      "\"exp_avg_sq\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [16, 24]}}  ";
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += header;
  const float data[6] = {1, 2, 0.5f, 0.25f, 4, 8};
  out.append(reinterpret_cast<const char*>(data), sizeof(data));
  return out;
}

// Layout under FuzzTempDir()/tier:
//   out/checkpoints/step-00000001/   the checkpoint (trainer_state.json = input)
//     model/config.json              "{}"
//     optimizer/u.safetensors        UnitFile()
//     optimizer/link.safetensors     -> ../../../../outside/u.safetensors
//   outside/u.safetensors            UnitFile(), what an escaping name reaches
//   export/                          the export's output (emptied per input)
struct Fixture {
  std::string root, ckpt, export_file;
};

const Fixture& GetFixture() {
  static const Fixture f = [] {
    Fixture x;
    x.root = FuzzTempDir() + "/tier";
    x.ckpt = x.root + "/out/checkpoints/step-00000001";
    x.export_file = x.root + "/export/state.safetensors";
    fs::create_directories(x.ckpt + "/model");
    fs::create_directories(x.ckpt + "/optimizer");
    fs::create_directories(x.root + "/outside");
    fs::create_directories(x.root + "/export");
    WriteFuzzFile("tier/out/checkpoints/step-00000001/model/config.json", "{}");
    WriteFuzzFile("tier/out/checkpoints/step-00000001/optimizer/u.safetensors", UnitFile());
    WriteFuzzFile("tier/outside/u.safetensors", UnitFile());
    fs::create_symlink("../../../../outside/u.safetensors", x.ckpt + "/optimizer/link.safetensors");
    return x;
  }();
  return f;
}

// Every entry under `dir` (not following links) with its size and mtime,
// but for `skip` (the export's directory, which it writes).
std::map<std::string, std::pair<uint64_t, int64_t>> Snapshot(const std::string& dir,
                                                             const std::string& skip) {
  std::map<std::string, std::pair<uint64_t, int64_t>> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->path().string().rfind(skip, 0) == 0) continue;
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0) continue;
    out[it->path().string()] = {
        static_cast<uint64_t>(st.st_size),
        static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
  }
  return out;
}

// The contract of a state a tier command accepted: its unit names are plain
// file names, none is the symlinked unit, and its sizes fit the files.
void CheckAcceptedState(const std::string& ckpt) {
  auto state = CheckpointOptimizerState::Open(ckpt);
  FUZZ_CHECK(state.ok());
  for (const auto& unit : (*state)->units()) {
    FUZZ_CHECK(PathComponent::Parse(unit.name.str(), "unit").ok());
    FUZZ_CHECK(unit.name.str() != "link");
    FUZZ_CHECK(unit.num_params <= 2);  // what u.safetensors holds
  }
}

}  // namespace

void FuzzTierCheckpoint(std::string_view data) {
  const Fixture& f = GetFixture();
  WriteFuzzFile("tier/out/checkpoints/step-00000001/trainer_state.json", data);
  const std::string export_dir = f.root + "/export";
  const auto before = Snapshot(f.root, export_dir);

  // tier ls (both kinds of path), tier verify, tier export.
  (void)tier::ListTier(f.root + "/out", /*verify=*/false);
  // Both may fail on a swap directory the state names (unreadable, say);
  // the checkpoint's own verdict must agree wherever both give one.
  auto listed = tier::ListTier(f.ckpt, /*verify=*/true);
  auto report = tier::VerifyTierPath(f.ckpt);
  const bool verified = VerifyCheckpoint(f.ckpt).verified;
  if (listed.ok()) {
    FUZZ_CHECK(listed->checkpoints.size() == 1);
    FUZZ_CHECK(listed->checkpoints[0].info.verified == verified);
  }
  if (report.ok()) {
    FUZZ_CHECK(!report->items.empty() && report->items[0].kind == "checkpoint");
    FUZZ_CHECK(report->items[0].ok == verified);
  }
  if (verified) CheckAcceptedState(f.ckpt);
  auto exported = tier::ExportCheckpoint(f.ckpt, f.export_file);
  if (exported.ok()) {
    CheckAcceptedState(f.ckpt);
    FUZZ_CHECK(exported->num_bytes <= 2 * 4 * exported->num_tensors);  // <= 2 floats each
  }

  // Nothing changed but the export's output.
  std::error_code ec;
  fs::remove(f.export_file, ec);
  FUZZ_CHECK(Snapshot(f.root, export_dir) == before);
}

}  // namespace tierflow::fuzz
