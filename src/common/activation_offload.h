// Where a run's activation checkpoints live: the one enum that the command
// line, the config's `tierflow.offload_activations`, the planner and the
// model's TrainShape::offload_checkpoints share. Text becomes it once,
// where it enters (ParseChoice).
#pragma once

#include <cstdint>

#include "common/named_choice.h"

namespace tierflow {

// Where the activation checkpoints (each block's input) live (--offload-activations).
enum class ActivationOffload : uint8_t {
  kAuto,  // the planner: on the device while everything fits there; else in host
          // memory when that fits where keeping them does not, or plans a
          // faster step than the weight streaming keeping them needs
  kNone,  // on the device
  kHost,  // pinned host memory, kCheckpointDeviceSlots on the device (needs checkpointing)
};
template <>
struct ChoiceNames<ActivationOffload> {
  static constexpr NamedChoice<ActivationOffload> kTable[] = {{"auto", ActivationOffload::kAuto},
                                                              {"none", ActivationOffload::kNone},
                                                              {"host", ActivationOffload::kHost}};
};

}  // namespace tierflow
