// Start-up checks of a run's outputs (train/run_outputs.h).
#include "train/run_outputs.h"

#include <filesystem>
#include <system_error>
#include <utility>
#include <vector>

#include "io/output_path.h"
#include "train/final_model.h"

namespace tierflow {
namespace {
namespace fs = std::filesystem;

struct Named {
  std::string path;
  std::string what;  // its flag or role, for errors
};

bool Exists(const std::string& p) {
  std::error_code ec;
  return !p.empty() && fs::exists(p, ec);
}

// What the run reads, where it is a path on disk.
std::vector<Named> Inputs(const TrainConfig& c, const std::string& resume_path) {
  std::vector<Named> in;
  if (Exists(c.model)) in.push_back({c.model, "--model"});
  if (Exists(c.data)) in.push_back({c.data, "--data"});
  if (Exists(c.tokenizer)) in.push_back({c.tokenizer, "--tokenizer"});
  if (Exists(c.profile)) in.push_back({c.profile, "--profile"});
  if (!resume_path.empty()) in.push_back({resume_path, "the checkpoint resumed from,"});
  return in;
}

// `output` is neither an input nor inside one, nor inside the directories
// of OUT that the run replaces (model/) or prunes (checkpoints/).
Status CheckOutsideInputs(const std::string& output, const std::string& what,
                          const std::vector<Named>& inputs, const std::string& out_dir) {
  for (const Named& in : inputs) TF_RETURN_IF_ERROR(CheckNotInside(output, what, in.path, in.what));
  for (const char* sub : {"model", "checkpoints"}) {
    const std::string dir = (fs::path(out_dir) / sub).string();
    if (IsPathInside(output, dir)) {
      return InvalidArgumentError(what + " " + output + " is inside " + dir +
                                  ", which the run replaces or prunes as a whole: name a path "
                                  "outside it");
    }
  }
  return Status::Ok();
}

}  // namespace

std::string TracePathOfRank(const std::string& trace_path, int rank) {
  return rank == 0 ? trace_path : trace_path + ".rank" + std::to_string(rank);
}

std::string MetricsPathOf(const TrainConfig& config, const std::string& out_dir) {
  return config.metrics_path.empty() ? out_dir + "/metrics.jsonl" : config.metrics_path;
}

Status CheckOutDir(const TrainConfig& config, const std::string& out_dir) {
  for (const Named& in : Inputs(config, config.resume_from)) {
    TF_RETURN_IF_ERROR(CheckNotInside(out_dir, "--out", in.path, in.what));
    if (in.path == config.resume_from) continue;  // may be a checkpoint of OUT's, by design
    for (const char* sub : {"model", "checkpoints"}) {
      const std::string dir = (fs::path(out_dir) / sub).string();
      if (IsPathInside(in.path, dir)) {
        return InvalidArgumentError(
            in.what + " " + in.path + " is inside " + dir + ", which this run " +
            (std::string(sub) == "model" ? "replaces with its final model"
                                         : "fills with its own checkpoints and prunes") +
            ": copy it elsewhere, or give another --out");
      }
    }
  }
  return Status::Ok();
}

Status CheckRunOutputs(const TrainConfig& config, const std::string& out_dir,
                       const std::string& resume_path, int rank) {
  const std::vector<Named> inputs = Inputs(config, resume_path);
  if (rank == 0) {
    TF_RETURN_IF_ERROR(CheckNoLinksUnder(out_dir, (fs::path(out_dir) / "checkpoints").string())
                           .WithContext("the checkpoints' directory"));
    TF_RETURN_IF_ERROR(CheckFinalModelDir(out_dir));
    TF_RETURN_IF_ERROR(CheckExistingOutputFile((fs::path(out_dir) / "swap_runs.json").string(),
                                               OutputWrite::kReplace, "the swap-set record"));
    const std::string metrics = MetricsPathOf(config, out_dir);
    const std::string what = config.metrics_path.empty() ? "metrics file" : "--metrics";
    // Outside the inputs first: the next check creates a file beside it.
    TF_RETURN_IF_ERROR(CheckOutsideInputs(metrics, what, inputs, out_dir));
    TF_RETURN_IF_ERROR(CheckOutputFile(metrics, OutputWrite::kInPlace, what));
    if (!config.trace_path.empty() && IsPathInside(config.trace_path, metrics)) {
      return InvalidArgumentError("--trace " + config.trace_path + " is the " + what + " " +
                                  metrics + ": name another file");
    }
  }
  if (!config.trace_path.empty()) {
    const std::string trace = TracePathOfRank(config.trace_path, rank);
    TF_RETURN_IF_ERROR(CheckOutsideInputs(trace, "--trace", inputs, out_dir));
    TF_RETURN_IF_ERROR(CheckOutputFile(trace, OutputWrite::kReplace, "--trace"));
  }
  for (const std::string& nvme : config.nvme_paths) {
    TF_RETURN_IF_ERROR(CheckOutsideInputs(nvme, "--nvme-path", inputs, out_dir));
  }
  return Status::Ok();
}

}  // namespace tierflow
