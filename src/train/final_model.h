// The final model of `tierflow train`: OUT/model, replaced whole and
// crash-safely at the end of a run, keeping what the user put there.
//
// OUT/model is a Hugging Face model directory, and these names in it are
// tierflow's: the weights (model.safetensors, or the index and its shards),
// config.json, and the side files it copies from the source
// (HfSideFileNames: tokenizer, generation config, chat template). A save
// writes the ones its model has and drops the others, so the weights of a
// previous save (another shard count) never sit beside an index that does
// not name them, nor a tokenizer of another model beside this one's.
// Everything else in OUT/model (a README, evaluation results, a .cache/
// directory) is the user's and is kept: hard-linked into the new directory
// before it replaces the old one, so a crash at any point leaves it in the
// old directory, the new one, or both, and it is never copied or rewritten.
#pragma once

#include <string>
#include <vector>

#include "engine/offload_engine.h"
#include "io/dir_lock.h"
#include "io/file_system.h"
#include "model/param_layout.h"
#include "tierflow/dtype.h"
#include "tierflow/status.h"
#include "train/checkpoint.h"

namespace tierflow {

// What a save did with the entries already in OUT/model (names, sorted).
struct FinalModelReport {
  std::vector<std::string> kept;  // the user's, carried into the new model
  // tierflow's names this save does not write (a tokenizer file the new
  // source has not), dropped with the previous model; its weight files are
  // not listed.
  std::vector<std::string> dropped;
  // A previous model put back in place: a crash had left it only in its
  // aside copy (ReplaceDirectory between its first two renames). "" if none.
  std::string restored_from;
};

// Whether `name`, directly in OUT/model, is one tierflow writes there.
bool IsFinalModelFileName(const std::string& name);

// OUT/model as a save will find it: absent, or a directory that is not a
// symbolic link (FailedPrecondition naming it otherwise; io/output_path.h).
// `tierflow train` checks it at start-up, and the save again.
Status CheckFinalModelDir(const std::string& out_dir);

// Replaces OUT/model with the engine's master weights in `dtype`, written
// into OUT/.model.tmp-PID and put in place by ReplaceDirectory (which fsyncs
// OUT). Temporaries of an interrupted save are removed first (the caller
// holds OUT's lock, so none is a live save's); an aside copy left where
// OUT/model is missing is the previous model and is put back first. `source`
// gives the model its config.json, dtype, shards and side files
// (SavedModelOptions). `report` (may be null) says what was kept, dropped or
// restored. Errors: those of CheckFinalModelDir, of the writes (naming the
// path), and FailedPrecondition naming a user's entry that cannot be kept
// (hard links not allowed there); OUT/model is then as it was.
Status SaveFinalModel(const DirLock& out_lock, OffloadEngine& engine, const ParamLayout& layout,
                      DType dtype, const SourceModelFiles& source, FileSystem* file_system,
                      FinalModelReport* report);

}  // namespace tierflow
