// `tierflow bench kernels` (bench/kernel_bench.h).
#include "bench/kernel_bench.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/kernel_timing.h"
#include "bench/layer_kernel_bench.h"
#include "kernels/attention.h"
#include "kernels/gemm.h"
#include "kernels/op_costs.h"
#include "kernels/pointwise.h"
#include "tierflow/model_config.h"
#include "tierflow/sim_profile.h"

namespace tierflow {
namespace {

using kernel_timing::BestSeconds;
using kernel_timing::Dims;
using kernel_timing::Figure;

class Runner {
 public:
  Runner(Device& device, Stream& stream, const KernelBenchOptions& o)
      : device_(device), stream_(stream), o_(o) {}

  StatusOr<DeviceBuffer> Bf16Buffer(size_t elems, const char* what) {
    TF_ASSIGN_OR_RETURN(DeviceBuffer b, device_.Allocate(elems * 2, what));
    TF_RETURN_IF_ERROR(kernel_timing::FillBf16(device_, stream_, b.data(), elems));
    return b;
  }

  // C (m, n) = A (m, k) op(B): B stored (n, k) when trans_b (the LM head's
  // weight), (k, n) otherwise; A stored (k, m) when trans_a.
  StatusOr<KernelFigure> Gemm(const std::string& name, int64_t m, int64_t n, int64_t k,
                              bool trans_a, bool trans_b, DType c_type, float beta) {
    TF_ASSIGN_OR_RETURN(DeviceBuffer a, Bf16Buffer(static_cast<size_t>(m * k), "bench gemm A"));
    TF_ASSIGN_OR_RETURN(DeviceBuffer b, Bf16Buffer(static_cast<size_t>(k * n), "bench gemm B"));
    TF_ASSIGN_OR_RETURN(
        DeviceBuffer c,
        device_.Allocate(static_cast<size_t>(m * n) * DTypeSize(c_type), "bench gemm C"));
    if (device_.sim_profile() == nullptr) {
      TF_RETURN_IF_ERROR(stream_.Memset(c.data(), 0, c.num_bytes()));
    }
    GemmParams p = PackedGemm(m, n, k, trans_a, trans_b, DType::kBF16, c_type);
    p.a = a.data();
    p.b = b.data();
    p.c = c.data();
    p.beta = beta;
    TF_ASSIGN_OR_RETURN(
        double s, BestSeconds(stream_, o_.iterations, [&] { return tierflow::Gemm(stream_, p); }));
    return Figure(
        name, Dims({{"m", m}, {"n", n}, {"k", k}}) + " bf16 -> " + std::string(DTypeName(c_type)),
        s, op_costs::Gemm(m, n, k, 1, 2, DTypeSize(c_type), beta != 0.0f));
  }

  Status Attention(int64_t seq, int64_t heads, int64_t kv_heads, int64_t head_size,
                   std::vector<KernelFigure>* out) {
    AttentionShape shape;
    shape.batch = 1;
    shape.seq_len = seq;
    shape.heads = heads;
    shape.kv_heads = kv_heads;
    shape.head_size = head_size;
    const auto q_elems = static_cast<size_t>(seq * heads * head_size);
    const auto kv_elems = static_cast<size_t>(seq * kv_heads * head_size);
    TF_ASSIGN_OR_RETURN(DeviceBuffer q, Bf16Buffer(q_elems, "bench attention q"));
    TF_ASSIGN_OR_RETURN(DeviceBuffer k, Bf16Buffer(kv_elems, "bench attention k"));
    TF_ASSIGN_OR_RETURN(DeviceBuffer v, Bf16Buffer(kv_elems, "bench attention v"));
    TF_ASSIGN_OR_RETURN(DeviceBuffer o, Bf16Buffer(q_elems, "bench attention out"));
    TF_ASSIGN_OR_RETURN(DeviceBuffer dout, Bf16Buffer(q_elems, "bench attention dout"));
    TF_ASSIGN_OR_RETURN(DeviceBuffer dq, device_.Allocate(q_elems * 2, "bench attention dq"));
    TF_ASSIGN_OR_RETURN(DeviceBuffer dk, device_.Allocate(kv_elems * 2, "bench attention dk"));
    TF_ASSIGN_OR_RETURN(DeviceBuffer dv, device_.Allocate(kv_elems * 2, "bench attention dv"));
    TF_ASSIGN_OR_RETURN(DeviceBuffer lse, device_.Allocate(static_cast<size_t>(seq * heads) * 4,
                                                           "bench attention lse"));
    auto* qp = q.as<bf16>();
    auto* kp = k.as<bf16>();
    auto* vp = v.as<bf16>();
    auto* op = o.as<bf16>();
    auto* lp = lse.as<float>();
    const std::string dims =
        Dims({{"B", 1}, {"T", seq}, {"H", heads}, {"KV", kv_heads}, {"d", head_size}}) +
        " causal bf16";
    TF_ASSIGN_OR_RETURN(double fwd, BestSeconds(stream_, o_.iterations, [&] {
                          return AttentionForward<bf16>(stream_, op, lp, qp, kp, vp, shape);
                        }));
    out->push_back(Figure("attention_fwd_t" + std::to_string(seq), dims, fwd,
                          op_costs::AttentionForward(1, seq, heads, kv_heads, head_size, 2)));
    TF_ASSIGN_OR_RETURN(double bwd, BestSeconds(stream_, o_.iterations, [&] {
                          return AttentionBackward<bf16>(stream_, dq.as<bf16>(), dk.as<bf16>(),
                                                         dv.as<bf16>(), dout.as<bf16>(), qp, kp, vp,
                                                         op, lp, shape);
                        }));
    out->push_back(Figure("attention_bwd_t" + std::to_string(seq), dims, bwd,
                          op_costs::AttentionBackward(1, seq, heads, kv_heads, head_size, 2)));
    return Status::Ok();
  }

  StatusOr<KernelFigure> Elementwise(int64_t n) {
    TF_ASSIGN_OR_RETURN(DeviceBuffer a, Bf16Buffer(static_cast<size_t>(n), "bench elementwise a"));
    TF_ASSIGN_OR_RETURN(DeviceBuffer b, Bf16Buffer(static_cast<size_t>(n), "bench elementwise b"));
    TF_ASSIGN_OR_RETURN(double s, BestSeconds(stream_, o_.iterations, [&] {
                          return ResidualForward<bf16>(stream_, a.as<bf16>(), a.as<bf16>(),
                                                       b.as<bf16>(), n);
                        }));
    KernelFigure f = Figure("elementwise", Dims({{"n", n}}) + " bf16 a += b", s,
                            op_costs::Elementwise(n, 2, 2, 1, 1.0));
    f.tflops = 0;
    f.memory_bound = true;
    // The measured bandwidth peak: a copy of the same bytes (read + written).
    if (device_.sim_profile() == nullptr) {
      TF_ASSIGN_OR_RETURN(double copy, BestSeconds(stream_, o_.iterations, [&] {
                            return stream_.CopyDeviceToDevice(b.data(), a.data(), a.num_bytes());
                          }));
      copy_gb_per_s_ = 2.0 * static_cast<double>(a.num_bytes()) / copy / 1e9;
    }
    return f;
  }

  double copy_gb_per_s() const { return copy_gb_per_s_; }

 private:
  Device& device_;
  Stream& stream_;
  const KernelBenchOptions& o_;
  double copy_gb_per_s_ = 0;
};

}  // namespace

StatusOr<KernelBenchResult> RunKernelBench(Device& device, const KernelBenchOptions& o) {
  if (o.iterations < 1) return InvalidArgumentError("bench kernels: iterations must be >= 1");
  TF_ASSIGN_OR_RETURN(auto stream, device.CreateStream("bench-kernels"));
  TF_RETURN_IF_ERROR(stream->PrepareForKernels());
  Runner run(device, *stream, o);
  const int64_t div = o.small ? 16 : 1;
  KernelBenchResult r;
  r.device = device.description();

  const int64_t g = 4096 / div;
  TF_ASSIGN_OR_RETURN(KernelFigure gemm, run.Gemm("gemm", g, g, g, false, false, DType::kBF16, 0));
  r.figures.push_back(gemm);
  for (int64_t seq : {int64_t{2048}, int64_t{4096}}) {
    TF_RETURN_IF_ERROR(run.Attention(seq / div, o.small ? 4 : 32, o.small ? 1 : 8,
                                     o.small ? 32 : 128, &r.figures));
  }
  const int64_t vocab = o.small ? 2000 : 128256, channels = 4096 / div;
  const int64_t rows = o.small ? 64 : HeadChunkRows(4096, vocab);
  TF_ASSIGN_OR_RETURN(KernelFigure logits, run.Gemm("lm_head_logits", rows, vocab, channels, false,
                                                    true, DType::kBF16, 0));
  r.figures.push_back(logits);
  // dW (V, C) += dlogits^T (V, rows) x xf (rows, C), fp32 as the gradient buckets.
  TF_ASSIGN_OR_RETURN(KernelFigure dw, run.Gemm("lm_head_dw", vocab, channels, rows, true, false,
                                                DType::kF32, 1.0f));
  r.figures.push_back(dw);
  TF_ASSIGN_OR_RETURN(KernelFigure ew, run.Elementwise((int64_t{256} << 20) / (div * div)));
  r.figures.push_back(ew);
  TF_RETURN_IF_ERROR(RunLayerKernelBench(device, *stream, o, &r.figures));

  if (const SimProfile* sim = device.sim_profile()) {
    r.peak_source = "sim profile " + sim->name + " (spec)";
    r.peak_tflops = sim->tensor_tflops;
    r.peak_gb_per_s = sim->hbm_gb_per_s;
  } else {
    r.peak_source = "measured (the fastest GEMM case; a device-to-device copy)";
    r.peak_tflops = std::max({gemm.tflops, logits.tflops, dw.tflops});
    r.peak_gb_per_s = run.copy_gb_per_s();
  }
  for (KernelFigure& f : r.figures) {
    f.ratio = f.memory_bound ? f.gb_per_s / r.peak_gb_per_s : f.tflops / r.peak_tflops;
  }
  return r;
}

}  // namespace tierflow
