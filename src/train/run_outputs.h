// Every path a `tierflow train` run writes, checked when the run starts,
// before it loads data or builds the model, by the checks the later writes
// make (io/output_path.h): so a bad --trace, --metrics or --out is an error
// before the first step, not at the step that writes it, with that step's
// work and the final model lost.
//
// What a run writes: OUT (its lock, metrics.jsonl, swap_runs.json, the
// directories checkpoints/ and model/), --metrics and --trace when given
// elsewhere, and the swap sets under each --nvme-path. What it reads: --model
// (a directory or a config.json), --data, --tokenizer, --config, --profile
// and the checkpoint it resumes from. No output may be an input or inside
// one, and no output may be inside OUT/model or OUT/checkpoints, which the
// run replaces and prunes as a whole.
#pragma once

#include <string>

#include "tierflow/status.h"
#include "train/train_config.h"

namespace tierflow {

// The trace file rank `rank` writes: `trace_path` for rank 0,
// "<trace_path>.rank<r>" for the others.
std::string TracePathOfRank(const std::string& trace_path, int rank);

// The metrics file: --metrics, or OUT/metrics.jsonl.
std::string MetricsPathOf(const TrainConfig& config, const std::string& out_dir);

// Where OUT is, checked before it is made: not an input nor inside one
// (--resume-from's checkpoint included), and no input but that checkpoint
// inside OUT/model or OUT/checkpoints. Errors: InvalidArgument naming both.
Status CheckOutDir(const TrainConfig& config, const std::string& out_dir);

// Checks the outputs of rank `rank` (the lead, rank 0, writes OUT and the
// metrics; every rank its trace file and its swap sets). `out_dir` must
// exist (the lead made it, after CheckOutDir, and holds its lock);
// `resume_path` is the checkpoint the run resumes from ("" for none).
// Errors: InvalidArgument when an output is, or is inside, an input or
// OUT/model or OUT/checkpoints;
// FailedPrecondition for a link, a hard-linked file written in place or a
// non-regular file where a file goes; errno errors (NotFound when an
// output's directory is missing), each naming the path and its flag.
Status CheckRunOutputs(const TrainConfig& config, const std::string& out_dir,
                       const std::string& resume_path, int rank);

}  // namespace tierflow
