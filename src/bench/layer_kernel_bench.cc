// bench/layer_kernel_bench.h.
#include "bench/layer_kernel_bench.h"

#include <cstdint>
#include <functional>
#include <string>

#include "bench/kernel_timing.h"
#include "kernels/activations.h"
#include "kernels/cross_entropy.h"
#include "kernels/embedding.h"
#include "kernels/layernorm.h"
#include "kernels/op_costs.h"
#include "kernels/pointwise.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "tierflow/model_config.h"

namespace tierflow {
namespace {

using kernel_timing::BestSeconds;
using kernel_timing::Dims;
using kernel_timing::Figure;

class Cases {
 public:
  Cases(Device& device, Stream& stream, const KernelBenchOptions& o, std::vector<KernelFigure>* out)
      : device_(device), stream_(stream), o_(o), out_(out) {}

  // A bf16 tensor of `elems` filled with small values.
  StatusOr<DeviceBuffer> Bf16(int64_t elems, const char* what) {
    TF_ASSIGN_OR_RETURN(DeviceBuffer b, device_.Allocate(static_cast<size_t>(elems) * 2, what));
    TF_RETURN_IF_ERROR(kernel_timing::FillBf16(device_, stream_, b.data(), b.num_bytes() / 2));
    return b;
  }
  // An fp32 tensor of `elems`, zeroed.
  StatusOr<DeviceBuffer> F32(int64_t elems, const char* what) {
    TF_ASSIGN_OR_RETURN(DeviceBuffer b, device_.Allocate(static_cast<size_t>(elems) * 4, what));
    if (device_.sim_profile() == nullptr) {
      TF_RETURN_IF_ERROR(stream_.Memset(b.data(), 0, b.num_bytes()));
      TF_RETURN_IF_ERROR(stream_.Synchronize());
    }
    return b;
  }
  StatusOr<DeviceBuffer> Indices(int64_t elems, int32_t bound, const char* what) {
    TF_ASSIGN_OR_RETURN(DeviceBuffer b, device_.Allocate(static_cast<size_t>(elems) * 4, what));
    TF_RETURN_IF_ERROR(kernel_timing::FillIndices(device_, stream_, b.as<int32_t>(),
                                                  static_cast<size_t>(elems), bound));
    return b;
  }

  // Times `enqueue` and appends its figure.
  Status Time(const std::string& name, const std::string& shape, const KernelCost& cost,
              const std::function<Status()>& enqueue) {
    TF_ASSIGN_OR_RETURN(double s, BestSeconds(stream_, o_.iterations, enqueue));
    KernelFigure f = Figure(name, shape + " bf16", s, cost);
    f.tflops = 0;
    f.memory_bound = true;
    out_->push_back(f);
    return Status::Ok();
  }

  Stream& stream() { return stream_; }

 private:
  Device& device_;
  Stream& stream_;
  const KernelBenchOptions& o_;
  std::vector<KernelFigure>* out_;
};

Status Norms(Cases& c, int64_t N, int64_t C) {
  const NormShape s{N, C};
  const std::string dims = Dims({{"N", N}, {"C", C}});
  TF_ASSIGN_OR_RETURN(DeviceBuffer x, c.Bf16(N * C, "bench norm input"));
  TF_ASSIGN_OR_RETURN(DeviceBuffer y, c.Bf16(N * C, "bench norm output"));
  TF_ASSIGN_OR_RETURN(DeviceBuffer dy, c.Bf16(N * C, "bench norm dout"));
  TF_ASSIGN_OR_RETURN(DeviceBuffer w, c.Bf16(C, "bench norm weight"));
  TF_ASSIGN_OR_RETURN(DeviceBuffer b, c.Bf16(C, "bench norm bias"));
  TF_ASSIGN_OR_RETURN(DeviceBuffer mean, c.F32(N, "bench norm mean"));
  TF_ASSIGN_OR_RETURN(DeviceBuffer rstd, c.F32(N, "bench norm rstd"));
  TF_ASSIGN_OR_RETURN(DeviceBuffer dw, c.F32(C, "bench norm dweight"));
  TF_ASSIGN_OR_RETURN(DeviceBuffer db, c.F32(C, "bench norm dbias"));
  Stream& st = c.stream();
  auto* xp = x.as<bf16>();
  auto* yp = y.as<bf16>();
  auto* wp = w.as<bf16>();
  TF_RETURN_IF_ERROR(c.Time("rmsnorm_fwd", dims, op_costs::NormForward(N, C, 2, 4, 1), [&] {
    return RmsNormForward<bf16>(st, yp, rstd.as<float>(), xp, wp, s);
  }));
  TF_RETURN_IF_ERROR(c.Time("rmsnorm_bwd", dims, op_costs::NormBackward(N, C, 2, 8, 1), [&] {
    return RmsNormBackward<bf16>(st, yp, dw.as<float>(), dy.as<bf16>(), xp, wp, rstd.as<float>(),
                                 s);
  }));
  TF_RETURN_IF_ERROR(c.Time("layernorm_fwd", dims, op_costs::NormForward(N, C, 2, 8, 2), [&] {
    return LayerNormForward<bf16>(st, yp, mean.as<float>(), rstd.as<float>(), xp, wp, b.as<bf16>(),
                                  s);
  }));
  return c.Time("layernorm_bwd", dims, op_costs::NormBackward(N, C, 2, 14, 2), [&] {
    return LayerNormBackward<bf16>(st, yp, dw.as<float>(), db.as<float>(), dy.as<bf16>(), xp, wp,
                                   mean.as<float>(), rstd.as<float>(), s);
  });
}

Status Rope(Cases& c, int64_t N, int64_t heads, int64_t head_size) {
  RopeShape s;
  s.batch = 1;
  s.seq_len = N;
  s.heads = heads;
  s.head_size = head_size;
  RopeFreq freq;
  freq.theta = 500000.0f;
  const int64_t n = N * heads * head_size;
  const std::string dims = Dims({{"T", N}, {"heads", heads}, {"d", head_size}});
  TF_ASSIGN_OR_RETURN(DeviceBuffer a, c.Bf16(n, "bench rope input"));
  TF_ASSIGN_OR_RETURN(DeviceBuffer b, c.Bf16(n, "bench rope output"));
  Stream& st = c.stream();
  TF_RETURN_IF_ERROR(c.Time("rope_fwd", dims, op_costs::Rope(n, 2), [&] {
    return RopeForward<bf16>(st, b.as<bf16>(), a.as<bf16>(), s, freq);
  }));
  return c.Time("rope_bwd", dims, op_costs::Rope(n, 2),
                [&] { return RopeBackward<bf16>(st, a.as<bf16>(), b.as<bf16>(), s, freq); });
}

Status SwiGlu(Cases& c, int64_t N, int64_t F) {
  const int64_t n = N * F;
  const std::string dims = Dims({{"N", N}, {"F", F}});
  TF_ASSIGN_OR_RETURN(DeviceBuffer gate, c.Bf16(n, "bench swiglu gate"));
  TF_ASSIGN_OR_RETURN(DeviceBuffer up, c.Bf16(n, "bench swiglu up"));
  TF_ASSIGN_OR_RETURN(DeviceBuffer out, c.Bf16(n, "bench swiglu out"));
  Stream& st = c.stream();
  TF_RETURN_IF_ERROR(c.Time("swiglu_fwd", dims, op_costs::Elementwise(n, 2, 2, 1, 6), [&] {
    return SwiGluForward<bf16>(st, out.as<bf16>(), gate.as<bf16>(), up.as<bf16>(), n);
  }));
  TF_ASSIGN_OR_RETURN(DeviceBuffer dgate, c.Bf16(n, "bench swiglu dgate"));
  TF_ASSIGN_OR_RETURN(DeviceBuffer dup, c.Bf16(n, "bench swiglu dup"));
  return c.Time("swiglu_bwd", dims, op_costs::Elementwise(n, 2, 3, 2, 12), [&] {
    return SwiGluBackward<bf16>(st, dgate.as<bf16>(), dup.as<bf16>(), out.as<bf16>(),
                                gate.as<bf16>(), up.as<bf16>(), n);
  });
}

// GPT-2's MLP activation and its biases, over (N, 4C).
Status GeluAndBias(Cases& c, int64_t N, int64_t F) {
  const int64_t n = N * F;
  const std::string dims = Dims({{"N", N}, {"F", F}});
  TF_ASSIGN_OR_RETURN(DeviceBuffer x, c.Bf16(n, "bench gelu input"));
  TF_ASSIGN_OR_RETURN(DeviceBuffer y, c.Bf16(n, "bench gelu output"));
  TF_ASSIGN_OR_RETURN(DeviceBuffer dx, c.Bf16(n, "bench gelu dinp"));
  TF_ASSIGN_OR_RETURN(DeviceBuffer bias, c.Bf16(F, "bench bias"));
  TF_ASSIGN_OR_RETURN(DeviceBuffer dbias, c.F32(F, "bench dbias"));
  Stream& st = c.stream();
  TF_RETURN_IF_ERROR(c.Time("gelu_fwd", dims, op_costs::Elementwise(n, 2, 1, 1, 8),
                            [&] { return GeluForward<bf16>(st, y.as<bf16>(), x.as<bf16>(), n); }));
  TF_RETURN_IF_ERROR(c.Time("gelu_bwd", dims, op_costs::Elementwise(n, 2, 2, 1, 16), [&] {
    return GeluBackward<bf16>(st, dx.as<bf16>(), x.as<bf16>(), y.as<bf16>(), n);
  }));
  TF_RETURN_IF_ERROR(c.Time("bias_add", dims, op_costs::BiasAdd(N, F, 2), [&] {
    return BiasAddForward<bf16>(st, y.as<bf16>(), bias.as<bf16>(), N, F);
  }));
  return c.Time("bias_bwd", dims, op_costs::BiasBackward(N, F, 2),
                [&] { return BiasBackward<bf16>(st, dbias.as<float>(), y.as<bf16>(), N, F); });
}

Status Embedding(Cases& c, int64_t N, int64_t C, int64_t vocab) {
  EmbeddingShape s;
  s.batch = 1;
  s.seq_len = N;
  s.channels = C;
  s.vocab = vocab;
  const std::string dims = Dims({{"N", N}, {"C", C}, {"V", vocab}});
  TF_ASSIGN_OR_RETURN(DeviceBuffer tokens,
                      c.Indices(N, static_cast<int32_t>(vocab), "bench tokens"));
  TF_ASSIGN_OR_RETURN(DeviceBuffer wte, c.Bf16(vocab * C, "bench embedding table"));
  TF_ASSIGN_OR_RETURN(DeviceBuffer out, c.Bf16(N * C, "bench embedding out"));
  Stream& st = c.stream();
  TF_RETURN_IF_ERROR(c.Time("embedding_fwd", dims, op_costs::EmbeddingForward(N, C, 2, false), [&] {
    return EmbeddingForward<bf16>(st, out.as<bf16>(), tokens.as<int32_t>(), wte.as<bf16>(), nullptr,
                                  s);
  }));
  wte = DeviceBuffer();
  TF_ASSIGN_OR_RETURN(DeviceBuffer dwte, c.F32(vocab * C, "bench embedding dwte"));
  return c.Time("embedding_bwd", dims, op_costs::EmbeddingBackward(N, C, 2, false), [&] {
    return EmbeddingBackward<bf16>(st, dwte.as<float>(), nullptr, out.as<bf16>(),
                                   tokens.as<int32_t>(), s);
  });
}

// The loss over one head chunk, as the model runs it: in place, the rows'
// log-sum-exp kept for the sliced head's second pass, which is the other case.
Status Loss(Cases& c, int64_t rows, int64_t vocab) {
  CrossEntropyShape s;
  s.rows = rows;
  s.vocab = vocab;
  const std::string dims = Dims({{"rows", rows}, {"V", vocab}});
  TF_ASSIGN_OR_RETURN(DeviceBuffer logits, c.Bf16(rows * vocab, "bench logits"));
  TF_ASSIGN_OR_RETURN(DeviceBuffer targets,
                      c.Indices(rows, static_cast<int32_t>(vocab), "bench targets"));
  TF_ASSIGN_OR_RETURN(DeviceBuffer loss, c.F32(1, "bench loss"));
  TF_ASSIGN_OR_RETURN(DeviceBuffer row_losses, c.F32(rows, "bench row losses"));
  TF_ASSIGN_OR_RETURN(DeviceBuffer lse, c.F32(rows, "bench row lse"));
  CrossEntropyOptions o;
  o.row_lse = lse.as<float>();
  Stream& st = c.stream();
  auto* lp = logits.as<bf16>();
  TF_RETURN_IF_ERROR(
      c.Time("cross_entropy", dims, op_costs::CrossEntropy(rows, vocab, 2, true), [&] {
        return SoftmaxCrossEntropy<bf16>(st, loss.as<float>(), row_losses.as<float>(), lp, lp,
                                         targets.as<int32_t>(), s, o);
      }));
  return c.Time("cross_entropy_grad_slice", dims, op_costs::CrossEntropyGradSlice(rows, vocab, 2),
                [&] {
                  return SoftmaxCrossEntropyGradSlice<bf16>(st, lp, lp, lse.as<float>(),
                                                            targets.as<int32_t>(), s, 0, vocab);
                });
}

// The gradient's landing: fp32 sums cast to the transfer dtype on the device.
Status GradCast(Cases& c, int64_t n) {
  TF_ASSIGN_OR_RETURN(DeviceBuffer src, c.F32(n, "bench cast fp32"));
  TF_ASSIGN_OR_RETURN(DeviceBuffer dst, c.Bf16(n, "bench cast bf16"));
  Stream& st = c.stream();
  return c.Time("grad_cast", Dims({{"n", n}}) + " fp32 ->", op_costs::Elementwise(n, 3, 1, 1, 1),
                [&] { return st.Cast(DType::kF32, src.data(), DType::kBF16, dst.data(), n); });
}

}  // namespace

Status RunLayerKernelBench(Device& device, Stream& stream, const KernelBenchOptions& o,
                           std::vector<KernelFigure>* out) {
  Cases c(device, stream, o, out);
  const int64_t div = o.small ? 16 : 1;
  const int64_t N = 4096 / div, C = 4096 / div, F = 14336 / div;
  const int64_t vocab = o.small ? 2000 : 128256;
  TF_RETURN_IF_ERROR(Norms(c, N, C));
  TF_RETURN_IF_ERROR(Rope(c, N, o.small ? 4 : 32, o.small ? 32 : 128));
  TF_RETURN_IF_ERROR(SwiGlu(c, N, F));
  TF_RETURN_IF_ERROR(GeluAndBias(c, N, 4 * C));
  TF_RETURN_IF_ERROR(Embedding(c, N, C, o.small ? 2000 : 32000));
  TF_RETURN_IF_ERROR(Loss(c, o.small ? 64 : HeadChunkRows(N, vocab), vocab));
  return GradCast(c, C * F);
}

}  // namespace tierflow
