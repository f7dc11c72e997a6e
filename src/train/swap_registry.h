// OUT/swap_runs.json: the NVMe swap sets the runs of one output directory
// created, so that the next run of that directory finds the ones an
// interrupted run left behind (stale: no process holds their lock). The file
// is a hint, never an authority: a set is removed only when its own owner
// record says this output directory made it (the rule of
// checkpoint/swap_set_owner.h), so a crafted or copied swap_runs.json cannot
// make a run delete anything else. Anything else stale is reported and left
// to `tierflow tier clean`.
//
// Each entry: {"run_id", "paths" (the NVMe directories), "host" (where the
// paths are; entries without one, from before it was recorded, are taken
// for this host)}. Swap directories are local to a node, so a run cleans
// only the entries of the hosts it runs on, each by the first rank on that
// host, and keeps the others' for a later run there.
#pragma once

#include <string>
#include <vector>

#include "comm/communicator.h"
#include "tierflow/status.h"
#include "train/train_reporter.h"

namespace tierflow {

// Removes the stale swap sets of the runs recorded in `out_dir` on this
// run's hosts and records this run's: `run_id` on `nvme_paths` (an empty
// `run_id`: this rank keeps nothing on NVMe). A run id stands for its
// optimizer state's set and its streamed weights' (StreamedWeightsRunId).
// Collective when `comm` is not null: every rank calls it, the lead (rank
// 0, the holder of OUT's lock: the only one that rewrites the file) reads
// and writes the registry, and every rank returns the same status. Errors: those of the write;
// an unreadable registry is reported (a note) and replaced.
Status CleanStaleSwapSets(comm::Communicator* comm, const std::string& out_dir,
                          const std::vector<std::string>& nvme_paths, const std::string& run_id,
                          TrainReporter& reporter);

}  // namespace tierflow
