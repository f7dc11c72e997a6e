// Gathers a trained model's fp32 master weights out of an OffloadEngine into
// one flat vector in the engine's unit order (= ParamLayout order), the input
// SaveHfModel takes.
#pragma once

#include <vector>

#include "engine/offload_engine.h"
#include "tierflow/status.h"

namespace tierflow {

// (layout().total_params,) fp32 masters. Calls Finish() first so the last
// step's updates are in. REQUIRES: no Step in flight (called from the thread
// that drives the engine). Errors: those of Finish and ReadState.
StatusOr<std::vector<float>> GatherMasterWeights(OffloadEngine& engine);

}  // namespace tierflow
