// `tierflow bench adam`: the CPU AdamW step against this machine's memory
// bandwidth, measured in the same run with the same traffic pattern.
//
// The limit is StreamProbe (src/optim/stream_probe.h): the same streams,
// dtypes, in-place updates, chunks, blocks and threads as the step, with one
// add per stream instead of Adam's arithmetic. The step is memory-bound, so
// ratio_to_limit near 1 means the kernel leaves nothing on the table. A plain
// scalar loop (one thread, not vectorized) is reported as the baseline.
#include <tbb/blocked_range.h>
#include <tbb/global_control.h>
#include <tbb/info.h>
#include <tbb/parallel_for.h>

#include <Eigen/Core>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/half.h"
#include "common/units.h"
#include "optim/adam.h"
#include "optim/stream_probe.h"
#include "tools/commands.h"

namespace tierflow::cli {
namespace {

struct AdamBenchOptions {
  std::string params = "64Mi";
  int threads = 0;  // 0: all cores
  std::string grad_dtype = "f32";
  std::string out_dtype = "none";
  int iterations = 20;
  int scalar_iterations = 2;
  bool json = false;
};

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using HostArray = std::unique_ptr<void, FreeDeleter>;

// Page-aligned and first touched by the oneTBB threads that will use it.
StatusOr<HostArray> AllocateTouched(size_t num_bytes, const char* what) {
  const size_t rounded = (num_bytes + 4095) / 4096 * 4096;
  HostArray a(std::aligned_alloc(4096, std::max<size_t>(rounded, 4096)));
  if (!a) {
    return OutOfMemoryError(std::string("bench adam: cannot allocate ") + FormatBytes(rounded) +
                            " for " + what + "; use a smaller --params");
  }
  char* bytes = static_cast<char*>(a.get());
  tbb::parallel_for(
      tbb::blocked_range<size_t>(0, rounded, size_t{1} << 20),
      [&](const tbb::blocked_range<size_t>& r) { std::memset(bytes + r.begin(), 0, r.size()); });
  return a;
}

// The naive loop a user would write first: one element at a time, one
// thread, kept scalar so the figure is the "no SIMD, no threads" baseline.
template <typename Grad, typename Out>
__attribute__((optimize("no-tree-vectorize"))) void ScalarAdamLoop(
    const AdamOptions& o, int64_t step, float* params, float* exp_avg, float* exp_avg_sq,
    const Grad* grads, Out* out, size_t n) {
  const float bc1 = 1.0f - std::pow(o.beta1, static_cast<float>(step));
  const float bc2 = 1.0f - std::pow(o.beta2, static_cast<float>(step));
  for (size_t i = 0; i < n; ++i) {
    const float g = ToFloat(grads[i]);
    exp_avg[i] = o.beta1 * exp_avg[i] + (1.0f - o.beta1) * g;
    exp_avg_sq[i] = o.beta2 * exp_avg_sq[i] + (1.0f - o.beta2) * g * g;
    const float denom = std::sqrt(exp_avg_sq[i]) / std::sqrt(bc2) + o.eps;
    params[i] = params[i] * (1.0f - o.lr * o.weight_decay) - (o.lr / bc1) * exp_avg[i] / denom;
    if constexpr (!std::is_void_v<Out>) out[i] = FromFloat<Out>(params[i]);
  }
}

template <typename Grad>
void ScalarAdam(const AdamOptions& o, int64_t step, const OptimSpans& s) {
  const Grad* g = static_cast<const Grad*>(s.grads);
  if (s.out == nullptr) {
    return ScalarAdamLoop<Grad, void>(o, step, s.params, s.exp_avg, s.exp_avg_sq, g, nullptr, s.n);
  }
  switch (s.out_dtype) {
    case DType::kF32:
      return ScalarAdamLoop(o, step, s.params, s.exp_avg, s.exp_avg_sq, g,
                            static_cast<float*>(s.out), s.n);
    case DType::kBF16:
      return ScalarAdamLoop(o, step, s.params, s.exp_avg, s.exp_avg_sq, g,
                            static_cast<bf16*>(s.out), s.n);
    case DType::kF16:
      return ScalarAdamLoop(o, step, s.params, s.exp_avg, s.exp_avg_sq, g,
                            static_cast<fp16*>(s.out), s.n);
  }
}

void ScalarAdamStep(const AdamOptions& o, int64_t step, const OptimSpans& s) {
  switch (s.grad_dtype) {
    case DType::kF32:
      return ScalarAdam<float>(o, step, s);
    case DType::kBF16:
      return ScalarAdam<bf16>(o, step, s);
    case DType::kF16:
      return ScalarAdam<fp16>(o, step, s);
  }
}

using Clock = std::chrono::steady_clock;

StatusOr<double> TimeSeconds(const std::function<Status()>& run) {
  const auto t0 = Clock::now();
  TF_RETURN_IF_ERROR(run());
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Status RunAdamBench(const AdamBenchOptions& opt) {
  StatusOr<uint64_t> parsed = ParseCount(opt.params);
  if (!parsed.ok()) return parsed.status().WithContext("--params");
  const uint64_t n = *parsed;
  if (n == 0) return InvalidArgumentError("--params must be positive");
  if (opt.iterations < 1 || opt.scalar_iterations < 0) {
    return InvalidArgumentError("--iterations must be >= 1 and --scalar-iterations >= 0");
  }
  if (opt.threads < 0) return InvalidArgumentError("--threads must be >= 0 (0: all cores)");
  TF_ASSIGN_OR_RETURN(DType grad_dtype, ParseDType(opt.grad_dtype));
  const bool has_out = opt.out_dtype != "none";
  DType out_dtype = DType::kBF16;
  if (has_out) {
    StatusOr<DType> parsed = ParseDType(opt.out_dtype);
    if (!parsed.ok()) {
      return InvalidArgumentError("--out-dtype '" + opt.out_dtype +
                                  "': use none, f32, bf16 or f16");
    }
    out_dtype = *parsed;
  }
  const int threads = opt.threads > 0 ? opt.threads : tbb::info::default_concurrency();
  tbb::global_control thread_limit(tbb::global_control::max_allowed_parallelism, threads);

  TF_ASSIGN_OR_RETURN(HostArray params, AllocateTouched(n * 4, "params"));
  TF_ASSIGN_OR_RETURN(HostArray exp_avg, AllocateTouched(n * 4, "exp_avg"));
  TF_ASSIGN_OR_RETURN(HostArray exp_avg_sq, AllocateTouched(n * 4, "exp_avg_sq"));
  TF_ASSIGN_OR_RETURN(HostArray grads, AllocateTouched(n * DTypeSize(grad_dtype), "grads"));
  HostArray out;
  if (has_out) {
    TF_ASSIGN_OR_RETURN(out, AllocateTouched(n * DTypeSize(out_dtype), "out"));
  }
  OptimSpans spans;
  spans.params = static_cast<float*>(params.get());
  spans.exp_avg = static_cast<float*>(exp_avg.get());
  spans.exp_avg_sq = static_cast<float*>(exp_avg_sq.get());
  spans.grads = grads.get();
  spans.grad_dtype = grad_dtype;
  spans.out = out.get();
  spans.out_dtype = out_dtype;
  spans.n = n;
  // Finite, varied values: weights in [-0.5, 0.5), gradients in [-1e-2, 1e-2).
  tbb::parallel_for(tbb::blocked_range<size_t>(0, n), [&](const tbb::blocked_range<size_t>& r) {
    for (size_t i = r.begin(); i < r.end(); ++i) {
      const float u = static_cast<float>((i * 2654435761u) % 1000003u) / 1000003.0f - 0.5f;
      spans.params[i] = u;
      const float g = 2e-2f * u;
      switch (grad_dtype) {
        case DType::kF32:
          static_cast<float*>(grads.get())[i] = g;
          break;
        case DType::kBF16:
          static_cast<bf16*>(grads.get())[i] = FloatToBf16(g);
          break;
        case DType::kF16:
          static_cast<fp16*>(grads.get())[i] = FloatToFp16(g);
          break;
      }
    }
  });

  AdamOptions adam;
  adam.weight_decay = 0.01f;
  int64_t step = 0;
  auto adam_step = [&]() -> Status {
    TF_ASSIGN_OR_RETURN(StepResult r, AdamStep(adam, AdamStepArgs{++step, 1.0f}, spans));
    if (r.has_non_finite_grads) return InternalError("bench adam: non-finite gradients");
    return Status::Ok();
  };
  auto probe = [&] { return StreamProbe(spans, 0.0f); };

  // Warm-up (page tables, caches, thread pool), then alternate probe and step
  // so that other load on the machine hits both alike.
  TF_RETURN_IF_ERROR(probe());
  TF_RETURN_IF_ERROR(adam_step());
  std::vector<double> probe_s, step_s, scalar_s;
  for (int i = 0; i < opt.iterations; ++i) {
    TF_ASSIGN_OR_RETURN(double p, TimeSeconds(probe));
    TF_ASSIGN_OR_RETURN(double s, TimeSeconds(adam_step));
    probe_s.push_back(p);
    step_s.push_back(s);
  }
  for (int i = 0; i < opt.scalar_iterations; ++i) {
    TF_ASSIGN_OR_RETURN(double s, TimeSeconds([&] {
                          ScalarAdamStep(adam, ++step, spans);
                          return Status::Ok();
                        }));
    scalar_s.push_back(s);
  }

  const double bytes_per_param = static_cast<double>(TrafficBytesPerParam(spans));
  const double total_bytes = bytes_per_param * static_cast<double>(n);
  const double best_step = *std::min_element(step_s.begin(), step_s.end());
  const double best_probe = *std::min_element(probe_s.begin(), probe_s.end());
  const double params_per_second = static_cast<double>(n) / best_step;
  const double gb_per_second = total_bytes / best_step / 1e9;
  const double limit_gb_per_second = total_bytes / best_probe / 1e9;
  const double ratio = gb_per_second / limit_gb_per_second;
  const double scalar_params_per_second =
      scalar_s.empty()
          ? 0.0
          : static_cast<double>(n) / *std::min_element(scalar_s.begin(), scalar_s.end());
  const std::string out_name = has_out ? std::string(DTypeName(out_dtype)) : "none";

  if (opt.json) {
    nlohmann::json j;
    j["optimizer"] = "adamw";
    j["params"] = n;
    j["threads"] = threads;
    j["grad_dtype"] = DTypeName(grad_dtype);
    j["out_dtype"] = out_name;
    j["iterations"] = opt.iterations;
    j["simd"] = Eigen::SimdInstructionSetsInUse();
    j["bytes_per_param"] = bytes_per_param;
    j["params_per_second"] = params_per_second;
    j["gb_per_second"] = gb_per_second;
    j["median_gb_per_second"] = total_bytes / Median(step_s) / 1e9;
    j["bandwidth_limit_gb_per_second"] = limit_gb_per_second;
    j["median_bandwidth_limit_gb_per_second"] = total_bytes / Median(probe_s) / 1e9;
    j["limit_params_per_second"] = static_cast<double>(n) / best_probe;
    j["ratio_to_limit"] = ratio;
    j["scalar_params_per_second"] = scalar_params_per_second;
    j["scalar_gb_per_second"] = scalar_params_per_second * bytes_per_param / 1e9;
    j["speedup_vs_scalar"] =
        scalar_params_per_second > 0 ? params_per_second / scalar_params_per_second : 0.0;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf(
        "CPU AdamW step: %llu params, grads %s, out %s, %d threads, SIMD %s\n"
        "traffic %.0f bytes/param (fp32 params, exp_avg, exp_avg_sq read+written; grads read"
        "%s), best of %d\n\n",
        static_cast<unsigned long long>(n), std::string(DTypeName(grad_dtype)).c_str(),
        out_name.c_str(), threads, Eigen::SimdInstructionSetsInUse(), bytes_per_param,
        has_out ? "; out written" : "", opt.iterations);
    std::printf("%-34s %14s %10s %10s\n", "kernel", "Mparams/s", "GB/s", "of limit");
    std::printf("%-34s %14.1f %10.2f %10s\n", "bandwidth limit (stream probe)",
                static_cast<double>(n) / best_probe / 1e6, limit_gb_per_second, "1.00");
    std::printf("%-34s %14.1f %10.2f %10.2f\n", "AdamStep (Eigen + oneTBB)",
                params_per_second / 1e6, gb_per_second, ratio);
    if (scalar_params_per_second > 0) {
      const double scalar_gb = scalar_params_per_second * bytes_per_param / 1e9;
      std::printf("%-34s %14.1f %10.2f %10.2f\n", "scalar loop (1 thread, no SIMD)",
                  scalar_params_per_second / 1e6, scalar_gb, scalar_gb / limit_gb_per_second);
    }
  }
  return Status::Ok();
}

}  // namespace

void AddBenchAdam(CLI::App& bench, int* exit_code) {
  auto opt = std::make_shared<AdamBenchOptions>();
  CLI::App* cmd = bench.add_subcommand(
      "adam", "CPU AdamW step throughput against this machine's memory bandwidth");
  cmd->add_option("--params", opt->params,
                  std::string("Parameters per step, e.g. 64M or 1e8 (") + kCountSuffixHelp + ")")
      ->capture_default_str();
  cmd->add_option("--threads", opt->threads, "oneTBB threads; 0 = all cores")
      ->capture_default_str();
  cmd->add_option("--grad-dtype", opt->grad_dtype, "Gradient dtype: f32, bf16, f16")
      ->capture_default_str();
  cmd->add_option("--out-dtype", opt->out_dtype,
                  "Dtype of the updated-weights copy for the device: none, f32, bf16, f16")
      ->capture_default_str();
  cmd->add_option("--iterations", opt->iterations, "Timed steps (and probes); best is reported")
      ->capture_default_str();
  cmd->add_option("--scalar-iterations", opt->scalar_iterations,
                  "Timed runs of the scalar baseline loop; 0 skips it")
      ->capture_default_str();
  cmd->add_flag("--json", opt->json, "Print one JSON object instead of a table");
  cmd->callback([opt, exit_code] {
    Status s = RunAdamBench(*opt);
    if (!s.ok()) {
      std::fprintf(stderr, "tierflow bench adam: %s\n", s.ToString().c_str());
      *exit_code = 1;
    }
  });
}

}  // namespace tierflow::cli
