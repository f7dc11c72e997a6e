// Parameter offload in `tierflow bench engine` (--offload-param host|nvme):
// which units the bench streams, the checks on the flags that say so, and
// the streamed weight uploads ("h2d_params") measured alone, through the
// same ring of device slots the engine fetches them with.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine_options.h"
#include "engine/trainable.h"
#include "tierflow/device.h"

namespace tierflow {

// "1,3,5" or "1, 4-7" (the planner's FormatUnitList): unit indices, in the
// order given. InvalidArgument naming `flag` and the text on anything else
// (an empty item, a sign, a reversed range).
StatusOr<std::vector<int>> ParseUnitList(std::string_view flag, std::string_view text);

// What can be checked without the model. Errors are InvalidArgument naming
// the flag: --offload-param auto (the bench measures one fixed placement),
// streamed units with none (--streamed-units), fewer than 2 slots or a
// prefetch depth outside 1..slots-1 (--param-slots), nvme without a
// directory (--nvme-path).
Status CheckBenchStreaming(const ParamStreaming& params,
                           const std::vector<std::string>& nvme_paths);

// CheckBenchStreaming, then `params` against the model's `num_units` units,
// filling what the bench chooses: with kHost / kNvme and no streamed units,
// every other one of `blocks` (the transformer's blocks, the synthetic
// model's units), the second, fourth, ... A unit outside the model or listed
// twice is an InvalidArgument naming --streamed-units.
Status ResolveBenchStreaming(int num_units, const std::vector<int>& blocks,
                             const std::vector<std::string>& nvme_paths, ParamStreaming* params);

// The streamed uploads alone: a ring of engine.params' slots (a
// StreamedWeights, as the engine makes it) takes and releases every streamed
// fetch of one pass of `schedule` with no compute between them, after one
// untimed pass (first touch of the slots and the copy). With kNvme the
// ring's reads from the swap set feed the uploads, as in the step.
struct ParamStageResult {
  double seconds = 0;
  uint64_t h2d_bytes = 0;        // uploaded into the slots in the timed pass
  uint64_t nvme_read_bytes = 0;  // read from the swap set for them (kNvme)
};
StatusOr<ParamStageResult> MeasureParamStage(Device& device, const std::vector<UnitInfo>& units,
                                             const std::vector<int>& schedule,
                                             const EngineOptions& eo);

}  // namespace tierflow
