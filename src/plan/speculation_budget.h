// How many parameters the overlapped pipeline may update speculatively per
// step (EngineOptions::speculation_params), from the host memory the plan
// leaves free.
//
// Each speculated parameter costs host memory until the step's decision: its
// new weights wait in pinned memory (the weights dtype's bytes), and, when
// its sub-group's state is in host RAM, a backup of that state (master and
// moments: 12 B/param for AdamW) so that a rolled-back update can be undone.
// State on NVMe needs no backup: the overlapped pipeline already keeps two
// copies of it there (24 B/param of NVMe), a speculative update goes to the
// copy that is not current and a rollback simply leaves it so. The engine
// sizes its backup for min(budget, host-state parameters), so
//   cost(B) = B x weight_bytes + min(B, host_state_params) x state_bytes,
// and the budget is the largest B <= params with cost(B) <= free bytes.
//
// Pure and reentrant.
#pragma once

#include <cstdint>

namespace tierflow {

struct SpeculationBudgetInput {
  uint64_t free_host_bytes = 0;         // host memory left for speculation
  int64_t params = 0;                   // the model's parameters (the most worth speculating)
  int64_t host_state_params = 0;        // parameters whose state is in host RAM
  uint64_t state_bytes_per_param = 12;  // master + moments
  uint64_t weight_bytes_per_param = 2;  // the working weights' dtype
};

// The budget in parameters, in [0, params]. 0 when nothing fits.
int64_t SpeculationBudget(const SpeculationBudgetInput& in);

// Host bytes the engine holds for a budget of `speculation_params`: the
// pinned new weights and the state backup (SpeculationBudget's cost).
uint64_t SpeculationPinnedBytes(int64_t speculation_params, uint64_t weight_bytes_per_param);
uint64_t SpeculationBackupBytes(int64_t speculation_params, int64_t host_state_params,
                                uint64_t state_bytes_per_param);

}  // namespace tierflow
