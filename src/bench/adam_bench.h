// `tierflow bench adam`'s measurement: the CPU AdamW step (optim/adam.h) at a
// chosen instruction-set level against two yardsticks measured beside it, on
// the same buffers: the DRAM limit (the fastest of the stream probe's shapes,
// optim/stream_probe.h) and a peer-shaped AdamW (bench/adam_peer.h).
//
// Shared machines drift by tens of percent within seconds, so the kernels are
// interleaved (probe shapes, peer, step, then again) and measured in rounds:
// each round keeps every kernel's best of `iterations` runs (noise only ever
// adds time), and the figures are medians over rounds. Ratios are taken
// within a round, then their median.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "common/cpu_isa.h"
#include "optim/stream_probe.h"
#include "tierflow/dtype.h"
#include "tierflow/status.h"

namespace tierflow {

// One configuration to measure.
struct AdamBenchCase {
  int threads = 1;                 // oneTBB threads for probe, peer and step alike. REQUIRES: >= 1
  Isa isa = Isa::kBaseline;        // the step's level. REQUIRES: CpuSupportsIsa(isa)
  DType grad_dtype = DType::kF32;  // gradients read by the step
  std::optional<DType> out_dtype;  // the updated-weights copy written; nullopt: none
};

struct AdamBenchOptions {
  uint64_t params = 64ull << 20;  // parameters per step. Default: 64Mi
  int iterations = 10;            // timed runs of each kernel per round. Default: 10
  int rounds = 3;                 // the figures are medians over rounds. Default: 3
};

// Rates are parameters per second (bytes_per_param times that is bytes per
// second); each is the median over rounds of the round's best run.
struct AdamBenchResult {
  AdamBenchCase what;
  size_t bytes_per_param = 0;  // TrafficBytesPerParam of the layout
  double step_params_per_second = 0;
  // Indexed by ProbeShape.
  double probe_params_per_second[std::size(kProbeShapes)] = {};
  // The median over rounds of the round's fastest probe shape.
  double limit_params_per_second = 0;
  // The shape with the higher median rate.
  ProbeShape limit_shape = ProbeShape::kBlocked;
  // Absent when this CPU runs no peer (AdamPeerIsa failed).
  std::optional<double> peer_params_per_second;
  double ratio_to_limit = 0;                  // step / limit
  std::optional<double> ratio_to_peer;        // step / peer
  std::optional<double> peer_ratio_to_limit;  // peer / limit; above 1 the probe is no bound
};

struct AdamBenchReport {
  Isa probe_isa = Isa::kBaseline;        // the level the probes ran at
  std::optional<Isa> peer_isa;           // the level the peer ran at; absent when none
  std::vector<AdamBenchResult> results;  // one per case, in the order given
};

// Allocates the buffers once (first touched by oneTBB threads), then measures
// each case in turn. Errors: InvalidArgument for params == 0, iterations or
// rounds < 1, a case with threads < 1 or a level the CPU lacks;
// OutOfMemory naming the buffer when an allocation fails; Internal when a
// step reports non-finite values.
StatusOr<AdamBenchReport> RunAdamBench(const AdamBenchOptions& options,
                                       const std::vector<AdamBenchCase>& cases);

// The thread counts of `--threads`: "N" (1 <= N <= max_threads), "0" (all:
// max_threads) or a range "A..B" (1 <= A <= B <= max_threads).
struct ThreadRange {
  int first = 1;
  int last = 1;
};
// Errors: InvalidArgument naming `text`, the accepted forms and max_threads.
StatusOr<ThreadRange> ParseThreadRange(std::string_view text, int max_threads);

}  // namespace tierflow
