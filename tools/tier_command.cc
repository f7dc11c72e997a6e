// `tierflow tier`: inspect, verify, move, clean and export offloaded state
// (swap sets, checkpoints) — see src/tier/. Exit status: 0 on success, 1 on
// errors, 2 when `verify` finds corruption.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "common/cancel.h"
#include "common/checked_math.h"
#include "common/units.h"
#include "io/json_util.h"
#include "tier/tier_clean.h"
#include "tier/tier_export.h"
#include "tier/tier_json.h"
#include "tier/tier_ls.h"
#include "tier/tier_migrate.h"
#include "tier/tier_verify.h"
#include "tierflow/nvme_io.h"
#include "tools/commands.h"
#include "tools/flag_checks.h"

namespace tierflow::cli {
namespace {

constexpr int kExitCorrupt = 2;

int Fail(const Status& s) {
  std::fprintf(stderr, "tierflow tier: %s\n", s.ToString().c_str());
  return 1;
}

int RunLs(const std::string& path, bool verify, bool json) {
  auto listing = tier::ListTier(path, verify);
  if (!listing.ok()) return Fail(listing.status());
  if (json) {
    std::printf("%s\n", JsonOutput(tier::TierListingToJson(*listing, verify)).c_str());
    return 0;
  }
  if (listing->checkpoints.empty() && listing->swap_sets.empty() &&
      listing->final_model_dir.empty()) {
    std::printf("%s: no checkpoints, swap sets or model found\n", path.c_str());
    return 0;
  }
  if (!listing->checkpoints.empty()) std::printf("checkpoints:\n");
  for (const auto& c : listing->checkpoints) {
    std::string status = !c.info.problem.empty() ? "INCOMPLETE/CORRUPT: " + c.info.problem
                         : verify                ? "complete, verified"
                                                 : "complete (not verified; use --verify)";
    std::printf("  %s  step %lld  %s layout  %zu units  %s  %s\n", c.info.path.c_str(),
                static_cast<long long>(c.step),
                c.layout ? std::string(OffloadPlacementName(*c.layout)).c_str() : "?", c.num_units,
                FormatBytes(c.num_bytes).c_str(), status.c_str());
    if (c.layout == OffloadPlacement::kNvme) {
      std::printf("    swap set %s in", c.swap_set.run_id.c_str());
      for (const auto& d : c.swap_set.directories) std::printf(" %s", d.c_str());
      std::printf("\n");
    }
  }
  if (!listing->swap_sets.empty()) std::printf("swap sets:\n");
  for (const auto& s : listing->swap_sets) {
    std::string owner;
    if (!s.checkpoint.empty()) {
      owner = s.checkpoint_uses_it ? "  (optimizer state of checkpoint " + s.checkpoint + ")"
                                   : "  (left by a migration of " + s.checkpoint + "; not in use)";
    }
    std::printf("  %s  %s  %u files  %s on disk  %zu tensors  %s data%s\n", s.info.path.c_str(),
                std::string(offload::SwapSetStateName(s.info.state)).c_str(), s.info.num_files,
                FormatBytes(s.info.num_bytes).c_str(), s.tensors.size(),
                FormatBytes(s.data_bytes).c_str(), owner.c_str());
    if (!s.problem.empty()) std::printf("    problem: %s\n", s.problem.c_str());
    size_t shown = 0;
    for (const auto& t : s.tensors) {
      if (shown++ == 8) {
        std::printf("    ... %zu more tensors\n", s.tensors.size() - 8);
        break;
      }
      std::printf("    %-40s %s\n", t.name.c_str(), FormatBytes(t.num_bytes).c_str());
    }
  }
  if (!listing->final_model_dir.empty()) {
    std::printf("final model: %s  %s\n", listing->final_model_dir.c_str(),
                FormatBytes(listing->final_model_bytes).c_str());
  }
  return 0;
}

int RunVerify(const std::string& path, bool json) {
  auto report = tier::VerifyTierPath(path);
  if (!report.ok()) return Fail(report.status());
  if (json) {
    std::printf("%s\n", JsonOutput(tier::VerifyReportToJson(*report)).c_str());
    return report->ok() ? 0 : kExitCorrupt;
  }
  size_t bad = 0;
  for (const auto& item : report->items) {
    std::printf("%-7s %s %s  (%s)\n", item.ok ? "OK" : "CORRUPT", item.kind.c_str(),
                item.path.c_str(), item.detail.c_str());
    for (const auto& p : item.problems) std::printf("        %s\n", p.c_str());
    if (!item.ok) ++bad;
  }
  std::printf("%zu checked, %zu corrupt\n", report->items.size(), bad);
  return bad == 0 ? 0 : kExitCorrupt;
}

// The flags of every `tier` subcommand (one is run).
struct TierFlags {
  std::string path, to, out, block_size = "1MiB";
  std::vector<std::string> nvme_paths;
  bool verify = false, dry_run = false, nvme_buffered = false, json = false;
};

// The options `tier migrate` is given; a usage error exits 2, as the other
// flag checks give, the rest 1.
StatusOr<tier::MigrateOptions> MigrateOptionsOf(const TierFlags& flags, int* usage_exit) {
  tier::MigrateOptions o;
  auto to = ParseOffloadPlacement("--to", flags.to);
  if (to.ok() && *to == OffloadPlacement::kAuto) {
    to = InvalidArgumentError("--to: a checkpoint has one layout, host or nvme, not auto");
  }
  if (!to.ok()) {
    *usage_exit = 2;
    return to.status();
  }
  o.to = *to;
  o.nvme_paths = flags.nvme_paths;
  o.nvme_buffered = flags.nvme_buffered;
  TF_ASSIGN_OR_RETURN(const uint64_t bs, ParseByteSize(flags.block_size));
  TF_ASSIGN_OR_RETURN(o.block_size_bytes, CheckedNarrow<uint32_t>(bs, "--block-size"));
  return o;
}

int RunMigrate(const TierFlags& flags) {
  int usage_exit = 1;
  auto o = MigrateOptionsOf(flags, &usage_exit);
  if (!o.ok()) {
    Fail(o.status());
    return usage_exit;
  }
  auto r = tier::MigrateCheckpoint(flags.path, *o);
  if (!r.ok()) return Fail(r.status());
  for (const auto& n : r->notes) std::printf("%s\n", n.c_str());
  if (r->from != r->to) {
    const bool to_nvme = r->to == OffloadPlacement::kNvme;
    std::printf("migrated %s: %s -> %s, %s of optimizer state, verified%s%s\n", flags.path.c_str(),
                std::string(OffloadPlacementName(r->from)).c_str(),
                std::string(OffloadPlacementName(r->to)).c_str(),
                FormatBytes(r->state_bytes).c_str(), to_nvme ? "; swap set " : "",
                to_nvme ? r->run_id.c_str() : "");
  }
  return 0;
}

int RunClean(const std::string& path, bool dry_run) {
  auto r = tier::CleanTier(path, dry_run);
  if (!r.ok()) return Fail(r.status());
  const char* verb = dry_run ? "would remove" : "removed";
  for (const auto& e : r->removed) {
    std::printf("%s %s (%s): %s\n", verb, e.path.c_str(), FormatBytes(e.num_bytes).c_str(),
                e.why.c_str());
  }
  for (const auto& e : r->kept)
    std::printf("kept %s (%s): %s\n", e.path.c_str(), FormatBytes(e.num_bytes).c_str(),
                e.why.c_str());
  std::printf("%s %zu item(s), %s %s\n", verb, r->removed.size(),
              FormatBytes(r->freed_bytes).c_str(), dry_run ? "would be freed" : "freed");
  return 0;
}

int RunExport(const std::string& ckpt, const std::string& out) {
  auto r = tier::ExportCheckpoint(ckpt, out);
  if (!r.ok()) return Fail(r.status());
  std::printf("wrote %s: %llu tensors, %s (from the %s layout)\n", out.c_str(),
              static_cast<unsigned long long>(r->num_tensors), FormatBytes(r->num_bytes).c_str(),
              std::string(OffloadPlacementName(r->layout)).c_str());
  return 0;
}

// ls --verify, verify, migrate and export check for cancellation per unit
// and per file, so SIGINT/SIGTERM end them with a clear error (and migrate
// keeps the checkpoint as it was); clean keeps the default action.
void AddInspect(CLI::App& tier, const std::shared_ptr<TierFlags>& flags, int* exit_code) {
  CLI::App* ls = tier.add_subcommand(
      "ls", "Runs, swap sets and checkpoints under PATH: tensors, sizes, tier, step, completeness");
  ls->add_option("PATH", flags->path, "Training output dir, checkpoint dir or swap directory")
      ->required();
  ls->add_flag("--verify", flags->verify, "Verify every checkpoint's checksums (reads everything)");
  ls->add_flag("--json", flags->json, "Print one JSON object");
  ls->callback([flags, exit_code] {
    InstallCancelSignalHandlers();
    *exit_code = RunLs(flags->path, flags->verify, flags->json);
  });

  CLI::App* verify = tier.add_subcommand(
      "verify", "Check every header and block checksum under PATH (exit 2 on corruption)");
  verify->add_option("PATH", flags->path, "Training output dir, checkpoint dir or swap directory")
      ->required();
  verify->add_flag("--json", flags->json, "Print one JSON object (exit status as without)");
  verify->callback([flags, exit_code] {
    InstallCancelSignalHandlers();
    *exit_code = RunVerify(flags->path, flags->json);
  });
}

void AddMigrate(CLI::App& tier, const std::shared_ptr<TierFlags>& flags, int* exit_code) {
  CLI::App* migrate = tier.add_subcommand(
      "migrate", "Move a checkpoint's optimizer state between host files and NVMe swap files");
  migrate->add_option("CKPT", flags->path, "Checkpoint directory (OUT/checkpoints/step-N)")
      ->required();
  migrate->add_option("--to", flags->to, "host or nvme")->required();
  migrate->add_option("--nvme-path", flags->nvme_paths,
                      "Directory on an NVMe drive (repeat for several drives); the set goes to "
                      "DIR/tierflow-checkpoints");
  migrate->add_flag("--nvme-buffered", flags->nvme_buffered)
      ->description("Page-cache I/O (for file systems without O_DIRECT)");
  migrate->add_option("--block-size", flags->block_size, "Swap block size (I/O and checksum unit)")
      ->check(ByteSizeAtLeast(kNvmeIoMinBlockBytes))
      ->capture_default_str();
  migrate->callback([flags, exit_code] {
    InstallCancelSignalHandlers();
    *exit_code = RunMigrate(*flags);
  });
}

void AddCleanAndExport(CLI::App& tier, const std::shared_ptr<TierFlags>& flags, int* exit_code) {
  CLI::App* clean = tier.add_subcommand(
      "clean", "Remove stale swap sets and leftovers of crashed runs (never a live run's)");
  clean->add_option("PATH", flags->path, "Training output dir, checkpoint dir or swap directory")
      ->required();
  clean->add_flag("--dry-run", flags->dry_run, "Only say what would be removed");
  clean->callback([flags, exit_code] { *exit_code = RunClean(flags->path, flags->dry_run); });

  CLI::App* exp =
      tier.add_subcommand("export", "Write a checkpoint's optimizer state as one safetensors file");
  exp->add_option("CKPT", flags->path, "Checkpoint directory")->required();
  exp->add_option("--out", flags->out, "FILE.safetensors")->required();
  exp->callback([flags, exit_code] {
    InstallCancelSignalHandlers();
    *exit_code = RunExport(flags->path, flags->out);
  });
}

}  // namespace

void AddTier(CLI::App& app, int* exit_code) {
  CLI::App* tier =
      app.add_subcommand("tier", "Inspect, verify, move, clean and export offloaded state");
  tier->require_subcommand(1);
  auto flags = std::make_shared<TierFlags>();
  AddInspect(*tier, flags, exit_code);
  AddMigrate(*tier, flags, exit_code);
  AddCleanAndExport(*tier, flags, exit_code);
}

}  // namespace tierflow::cli
