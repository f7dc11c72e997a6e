// The dtype in which gradients cross PCIe from the device to the host: the
// one rule that the engine (which casts each unit's fp32 gradient bucket to
// it before the D2H copy), the planner (which sizes the buffers and the
// transfer time by it), train configs and the bench share.
//
// The device accumulates parameter gradients in fp32; the host accumulates
// them in fp32. Only the copy between the two is in the transfer dtype:
// 16-bit halves the D2H bytes (2 B/param instead of 4) at the cost of one
// rounding per unit and micro-batch.
#pragma once

#include <optional>

#include "tierflow/dtype.h"
#include "tierflow/status.h"

namespace tierflow {

// The transfer dtype when none is asked for: the weights dtype when it is
// 16-bit (bf16, fp16), fp32 with fp32 weights.
DType DefaultGradTransferDType(DType weights);

// `requested`, or the default for `weights` when there is none.
DType GradTransferDType(DType weights, std::optional<DType> requested);

// OK, or InvalidArgument when `transfer` cannot carry the gradients of
// `weights` training: fp16 needs fp16 weights, whose loss scale keeps the
// gradients inside fp16's range (unscaled bf16/fp32 gradients would underflow
// to zero or overflow to Inf in fp16). `what` names where the choice came
// from ("grad_transfer_dtype", "--grad-transfer-dtype").
Status ValidateGradTransferDType(std::string_view what, DType weights, DType transfer);

}  // namespace tierflow
