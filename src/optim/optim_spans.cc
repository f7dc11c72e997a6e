// Validation and traffic accounting for OptimSpans.
#include "optim/optim_spans.h"

#include <string>

namespace tierflow {
namespace {

inline constexpr uintptr_t kBackupAlign = 64;

Status ValidateBackup(const OptimSpans& spans, bool needs_exp_avg, bool needs_exp_avg_sq,
                      std::string_view optimizer) {
  const bool any = spans.backup_params != nullptr || spans.backup_exp_avg != nullptr ||
                   spans.backup_exp_avg_sq != nullptr;
  if (!any) return Status::Ok();
  auto bad = [&](std::string_view what) {
    return InvalidArgumentError(std::string(optimizer) + " step over " + std::to_string(spans.n) +
                                " parameters with a backup: " + std::string(what));
  };
  const struct {
    const float* backup;
    bool needed;
    const char* name;
  } arrays[] = {{spans.backup_params, true, "backup_params"},
                {spans.backup_exp_avg, needs_exp_avg, "backup_exp_avg"},
                {spans.backup_exp_avg_sq, needs_exp_avg_sq, "backup_exp_avg_sq"}};
  for (const auto& a : arrays) {
    if (a.needed && a.backup == nullptr) {
      return bad(std::string(a.name) + " is null; back up every array the step updates");
    }
    if (!a.needed && a.backup != nullptr) {
      return bad(std::string(a.name) + " is set, but this step does not update that array");
    }
    if (a.backup != nullptr && reinterpret_cast<uintptr_t>(a.backup) % kBackupAlign != 0) {
      return bad(std::string(a.name) + " is not 64-byte aligned");
    }
  }
  return Status::Ok();
}

}  // namespace

Status ValidateOptimSpans(const OptimSpans& spans, bool needs_exp_avg, bool needs_exp_avg_sq,
                          std::string_view optimizer) {
  if (spans.n == 0) return Status::Ok();
  auto missing = [&](std::string_view what) {
    return InvalidArgumentError(std::string(optimizer) + " step over " + std::to_string(spans.n) +
                                " parameters: " + std::string(what) +
                                " is null; pass a buffer of n elements");
  };
  if (spans.params == nullptr) return missing("params");
  if (spans.grads == nullptr) return missing("grads");
  if (needs_exp_avg && spans.exp_avg == nullptr) return missing("exp_avg");
  if (needs_exp_avg_sq && spans.exp_avg_sq == nullptr) return missing("exp_avg_sq");
  auto valid_dtype = [](DType t) {
    return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16;
  };
  if (!valid_dtype(spans.grad_dtype) || (spans.out != nullptr && !valid_dtype(spans.out_dtype))) {
    return InvalidArgumentError(std::string(optimizer) +
                                " step: unknown grad or out dtype; use f32, bf16 or f16");
  }
  return ValidateBackup(spans, needs_exp_avg, needs_exp_avg_sq, optimizer);
}

size_t TrafficBytesPerParam(const OptimSpans& spans) {
  size_t bytes = 0;
  for (const float* state : {spans.params, spans.exp_avg, spans.exp_avg_sq}) {
    if (state != nullptr) bytes += 2 * sizeof(float);
  }
  bytes += DTypeSize(spans.grad_dtype);
  if (spans.out != nullptr) bytes += DTypeSize(spans.out_dtype);
  for (const float* backup : {spans.backup_params, spans.backup_exp_avg, spans.backup_exp_avg_sq}) {
    if (backup != nullptr) bytes += sizeof(float);
  }
  return bytes;
}

}  // namespace tierflow
