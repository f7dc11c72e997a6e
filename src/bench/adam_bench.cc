// The measurement loop of `tierflow bench adam`.
#include "bench/adam_bench.h"

#include <tbb/blocked_range.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>

#include "bench/adam_peer.h"
#include "common/half.h"
#include "common/host_memory.h"
#include "common/units.h"
#include "optim/adam.h"

namespace tierflow {
namespace {

// Huge pages (common/host_memory.h), first touched by the oneTBB threads
// that will use them.
StatusOr<HostPages> AllocateTouched(size_t num_bytes, const char* what) {
  StatusOr<HostPages> a = HostPages::Allocate(num_bytes, what);
  if (!a.ok()) {
    return OutOfMemoryError(std::string("bench adam: cannot allocate ") + FormatBytes(num_bytes) +
                            " for " + what + "; use a smaller --params");
  }
  char* bytes = a->as<char>();
  tbb::parallel_for(
      tbb::blocked_range<size_t>(0, num_bytes, size_t{1} << 20),
      [&](const tbb::blocked_range<size_t>& r) { std::memset(bytes + r.begin(), 0, r.size()); });
  return a;
}

// Finite, varied values: weights in [-0.5, 0.5), gradients in [-1e-2, 1e-2).
float Weight(size_t i) {
  return static_cast<float>((i * 2654435761u) % 1000003u) / 1000003.0f - 0.5f;
}

void FillGrads(void* grads, DType dtype, size_t n) {
  tbb::parallel_for(tbb::blocked_range<size_t>(0, n), [&](const tbb::blocked_range<size_t>& r) {
    for (size_t i = r.begin(); i < r.end(); ++i) {
      const float g = 2e-2f * Weight(i);
      switch (dtype) {
        case DType::kF32:
          static_cast<float*>(grads)[i] = g;
          break;
        case DType::kBF16:
          static_cast<bf16*>(grads)[i] = FloatToBf16(g);
          break;
        case DType::kF16:
          static_cast<fp16*>(grads)[i] = FloatToFp16(g);
          break;
      }
    }
  });
}

StatusOr<double> TimeSeconds(const std::function<Status()>& run) {
  const auto t0 = std::chrono::steady_clock::now();
  TF_RETURN_IF_ERROR(run());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The median; the mean of the middle two for an even count. REQUIRES: non-empty.
double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 == 1 ? v[h] : (v[h - 1] + v[h]) / 2;
}

// The kernels of one round, in the order they are interleaved.
enum Kernel { kProbeBlocked, kProbeStatic, kProbeInterleaved, kPeer, kStep, kNumKernels };
constexpr int kNumProbes = kProbeInterleaved + 1;

// One case: `rounds` rounds of `iterations` interleaved runs. Runs in the
// calling thread's arena.
StatusOr<AdamBenchResult> MeasureCase(const AdamBenchOptions& o, const AdamBenchCase& c,
                                      const OptimSpans& spans, Isa probe_isa,
                                      std::optional<Isa> peer_isa, int64_t* step) {
  const bool has_peer = peer_isa.has_value();
  static_assert(static_cast<int>(ProbeShape::kBlocked) == kProbeBlocked &&
                static_cast<int>(ProbeShape::kStaticSlices) == kProbeStatic &&
                static_cast<int>(ProbeShape::kInterleaved) == kProbeInterleaved &&
                std::size(kProbeShapes) == kNumProbes);
  AdamOptions adam;
  adam.weight_decay = 0.01f;
  std::function<Status()> run[kNumKernels] = {
      [&] { return StreamProbe(spans, 0.0f, ProbeShape::kBlocked, probe_isa); },
      [&] { return StreamProbe(spans, 0.0f, ProbeShape::kStaticSlices, probe_isa); },
      [&] { return StreamProbe(spans, 0.0f, ProbeShape::kInterleaved, probe_isa); },
      [&] {
        return AdamPeerStep(adam, AdamStepArgs{++*step, 1.0f}, spans, *peer_isa);
      },
      [&]() -> Status {
        TF_ASSIGN_OR_RETURN(StepResult r,
                            AdamStep(adam, AdamStepArgs{++*step, 1.0f}, spans, c.isa));
        if (r.has_non_finite_grads) return InternalError("bench adam: non-finite gradients");
        return Status::Ok();
      },
  };
  const auto measured = [&](int k) { return k != kPeer || has_peer; };
  // Warm-up: page tables, caches, the thread pool.
  for (int k = 0; k < kNumKernels; ++k) {
    if (measured(k)) TF_RETURN_IF_ERROR(run[k]());
  }
  std::vector<double> rate[kNumKernels], limit, to_limit, to_peer, peer_to_limit;
  const double n = static_cast<double>(spans.n);
  for (int round = 0; round < o.rounds; ++round) {
    double best[kNumKernels];
    std::fill(std::begin(best), std::end(best), 1e300);
    for (int i = 0; i < o.iterations; ++i) {
      for (int k = 0; k < kNumKernels; ++k) {
        if (!measured(k)) continue;
        TF_ASSIGN_OR_RETURN(double s, TimeSeconds(run[k]));
        best[k] = std::min(best[k], s);
      }
    }
    for (int k = 0; k < kNumKernels; ++k) {
      if (measured(k)) rate[k].push_back(n / best[k]);
    }
    double round_limit = 0;
    for (int k = 0; k < kNumProbes; ++k) round_limit = std::max(round_limit, n / best[k]);
    limit.push_back(round_limit);
    to_limit.push_back(n / best[kStep] / round_limit);
    if (has_peer) {
      to_peer.push_back(best[kPeer] / best[kStep]);
      peer_to_limit.push_back(n / best[kPeer] / round_limit);
    }
  }
  AdamBenchResult r;
  r.what = c;
  r.bytes_per_param = TrafficBytesPerParam(spans);
  r.step_params_per_second = Median(rate[kStep]);
  for (int k = 0; k < kNumProbes; ++k) {
    r.probe_params_per_second[k] = Median(rate[k]);
    if (r.probe_params_per_second[k] > r.probe_params_per_second[static_cast<int>(r.limit_shape)]) {
      r.limit_shape = static_cast<ProbeShape>(k);
    }
  }
  r.limit_params_per_second = Median(limit);
  r.ratio_to_limit = Median(to_limit);
  if (has_peer) {
    r.peer_params_per_second = Median(rate[kPeer]);
    r.ratio_to_peer = Median(to_peer);
    r.peer_ratio_to_limit = Median(peer_to_limit);
  }
  return r;
}

}  // namespace

StatusOr<AdamBenchReport> RunAdamBench(const AdamBenchOptions& o,
                                       const std::vector<AdamBenchCase>& cases) {
  if (o.params == 0) return InvalidArgumentError("bench adam: --params must be positive");
  // Five arrays of 4 bytes a parameter: keep every size far from wrapping.
  constexpr uint64_t kMaxParams = uint64_t{1} << 40;
  if (o.params > kMaxParams) {
    return InvalidArgumentError("bench adam: --params " + std::to_string(o.params) +
                                " is beyond 2^40; use a count that fits this host's memory");
  }
  if (o.iterations < 1 || o.rounds < 1) {
    return InvalidArgumentError("bench adam: --iterations and --rounds must be >= 1");
  }
  for (const AdamBenchCase& c : cases) {
    if (c.threads < 1) return InvalidArgumentError("bench adam: a case has threads < 1");
    if (!CpuSupportsIsa(c.isa)) {
      return InvalidArgumentError("bench adam: this CPU lacks the " + std::string(IsaName(c.isa)) +
                                  " instruction set");
    }
  }
  const size_t n = o.params;
  TF_ASSIGN_OR_RETURN(HostPages params, AllocateTouched(n * 4, "params"));
  TF_ASSIGN_OR_RETURN(HostPages exp_avg, AllocateTouched(n * 4, "exp_avg"));
  TF_ASSIGN_OR_RETURN(HostPages exp_avg_sq, AllocateTouched(n * 4, "exp_avg_sq"));
  TF_ASSIGN_OR_RETURN(HostPages grads, AllocateTouched(n * 4, "grads (any dtype)"));
  TF_ASSIGN_OR_RETURN(HostPages out, AllocateTouched(n * 4, "out (any dtype)"));
  float* p = params.as<float>();
  tbb::parallel_for(tbb::blocked_range<size_t>(0, n), [&](const tbb::blocked_range<size_t>& r) {
    for (size_t i = r.begin(); i < r.end(); ++i) p[i] = Weight(i);
  });

  AdamBenchReport report;
  report.probe_isa = StreamProbeIsa();
  StatusOr<Isa> peer_isa = AdamPeerIsa();
  if (peer_isa.ok()) report.peer_isa = *peer_isa;
  std::optional<DType> filled;
  int64_t step = 0;
  for (const AdamBenchCase& c : cases) {
    if (filled != c.grad_dtype) {
      FillGrads(grads.data(), c.grad_dtype, n);
      filled = c.grad_dtype;
    }
    OptimSpans spans;
    spans.params = p;
    spans.exp_avg = exp_avg.as<float>();
    spans.exp_avg_sq = exp_avg_sq.as<float>();
    spans.grads = grads.data();
    spans.grad_dtype = c.grad_dtype;
    spans.out = c.out_dtype ? out.data() : nullptr;
    spans.out_dtype = c.out_dtype.value_or(DType::kBF16);
    spans.n = n;
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism,
                              static_cast<size_t>(c.threads));
    tbb::task_arena arena(c.threads);
    StatusOr<AdamBenchResult> r = InternalError("bench adam: case not run");
    arena.execute([&] { r = MeasureCase(o, c, spans, report.probe_isa, report.peer_isa, &step); });
    if (!r.ok()) return r.status();
    report.results.push_back(*r);
  }
  return report;
}

StatusOr<ThreadRange> ParseThreadRange(std::string_view text, int max_threads) {
  const auto error = [&](std::string_view why) {
    return InvalidArgumentError(
        "--threads '" + std::string(text) + "': " + std::string(why) + "; use N, 0 (all " +
        std::to_string(max_threads) +
        " threads) or a range A..B with 1 <= A <= B <= " + std::to_string(max_threads));
  };
  const auto parse_int = [](std::string_view s, int* v) {
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
    return ec == std::errc() && end == s.data() + s.size() && !s.empty();
  };
  ThreadRange r;
  const size_t dots = text.find("..");
  if (dots == std::string_view::npos) {
    int v = 0;
    if (!parse_int(text, &v) || v < 0) return error("not a thread count");
    if (v > max_threads) return error("more threads than this machine runs");
    r.first = r.last = v == 0 ? max_threads : v;
    return r;
  }
  if (!parse_int(text.substr(0, dots), &r.first) || !parse_int(text.substr(dots + 2), &r.last)) {
    return error("not a range of thread counts");
  }
  if (r.first < 1 || r.first > r.last) return error("the range must run upwards from 1 or more");
  if (r.last > max_threads) return error("more threads than this machine runs");
  return r;
}

}  // namespace tierflow
