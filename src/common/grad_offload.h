// Where a step's gradients wait for the optimizer: the one enum that the
// command line (--offload-gradients), the config's
// `tierflow.offload_gradients`, the planner and EngineOptions::grad_offload
// share. Text becomes it once, where it enters (ParseChoice).
#pragma once

#include <cstdint>

#include "common/named_choice.h"

namespace tierflow {

enum class GradOffload : uint8_t {
  kAuto,  // the planner: in host memory while the whole gradient (and, with
          // accumulation, its fp32 accumulator) fits there; else on the drives
  kHost,  // the whole model's gradient in host memory (pinned landing, or the
          // fp32 accumulator with several micro-batches)
  kNvme,  // a bounded set of pinned sub-group slots; each sub-group's gradient
          // (or fp32 accumulator) goes to the drives beside its optimizer state
          // and is read back where an update needs it (needs the whole state on NVMe)
};
template <>
struct ChoiceNames<GradOffload> {
  static constexpr NamedChoice<GradOffload> kTable[] = {
      {"auto", GradOffload::kAuto}, {"host", GradOffload::kHost}, {"nvme", GradOffload::kNvme}};
};

}  // namespace tierflow
