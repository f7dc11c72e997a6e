// Fault injection between the engine and a real ring. Injected errors are
// completed locally (never reach the kernel); short transfers and bit flips
// go through the real ring with a modified operation.
#include "offload/fault_injecting_backend.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <unordered_map>
#include <utility>

#include "offload/aligned_buffer.h"
#include "offload/io_uring_backend.h"

namespace tierflow::offload {

void FaultPlan::Add(FaultRule rule) {
  std::lock_guard<std::mutex> lock(mu_);
  rules_.push_back(rule);
}

void FaultPlan::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  rules_.clear();
  num_ops_ = num_reads_ = num_writes_ = 0;
}

std::optional<FaultRule> FaultPlan::Next(IoOpKind kind) {
  std::lock_guard<std::mutex> lock(mu_);
  ++num_ops_;
  uint64_t& of_kind = kind == IoOpKind::kRead ? num_reads_ : num_writes_;
  ++of_kind;
  for (const FaultRule& r : rules_) {
    if (r.op_kind.has_value() && *r.op_kind != kind) continue;
    uint64_t index = r.op_kind.has_value() ? of_kind : num_ops_;
    if (index >= r.nth && index - r.nth < r.count) {
      ++num_injected_;
      return r;
    }
  }
  return std::nullopt;
}

uint64_t FaultPlan::num_injected() const {
  std::lock_guard<std::mutex> lock(mu_);
  return num_injected_;
}

void FaultPlan::SetRegisterBuffersError(int error) {
  std::lock_guard<std::mutex> lock(mu_);
  register_buffers_error_ = error;
}

int FaultPlan::register_buffers_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return register_buffers_error_;
}

namespace {

class FaultInjectingBackend final : public IoBackend {
 public:
  FaultInjectingBackend(std::shared_ptr<FaultPlan> plan, std::unique_ptr<IoBackend> inner)
      : plan_(std::move(plan)), inner_(std::move(inner)) {}

  Status RegisterFiles(std::span<const int> fds) override { return inner_->RegisterFiles(fds); }
  Status UnregisterFiles() override { return inner_->UnregisterFiles(); }
  Status RegisterBuffers(std::span<const iovec> b) override {
    if (int err = plan_->register_buffers_error(); err != 0) {
      TF_RETURN_IF_ERROR(inner_->UnregisterBuffers());
      return BufferRegistrationError(err, b.size());
    }
    return inner_->RegisterBuffers(b);
  }
  Status UnregisterBuffers() override { return inner_->UnregisterBuffers(); }

  Status Submit(std::span<const IoOp> ops, size_t* num_submitted) override {
    *num_submitted = 0;
    // What an earlier failed submit left queued goes first, as the SQ would.
    std::vector<IoOp> pass = std::move(queued_);
    queued_.clear();
    size_t num_stale = pass.size();
    pass.reserve(num_stale + ops.size());
    Status submit_error;
    size_t num_taken = ops.size();
    const size_t num_injected_before = injected_.size();
    // For each of this call's pass entries and injected completions, the
    // index in `ops` of its operation.
    std::vector<size_t> pass_op_index, injected_op_index;
    for (size_t i = 0; i < ops.size(); ++i) {
      IoOp op = ops[i];
      std::optional<FaultRule> rule = plan_->Next(op.kind);
      if (rule.has_value() && rule->kind == FaultKind::kSubmitFailsAfterQueuing) {
        queued_.assign(ops.begin() + static_cast<ptrdiff_t>(i), ops.end());
        submit_error = ErrnoStatus(rule->error, "io_uring_submit (injected)");
        num_taken = i;
        break;
      }
      if (!rule.has_value() || rule->kind != FaultKind::kErrno) pass_op_index.push_back(i);
      if (!rule.has_value()) {
        pass.push_back(op);
        continue;
      }
      switch (rule->kind) {
        case FaultKind::kErrno:
          injected_.push_back({op.user_data, -rule->error});
          injected_op_index.push_back(i);
          continue;
        case FaultKind::kSubmitFailsAfterQueuing:
          continue;  // handled above
        case FaultKind::kShortTransfer: {
          uint32_t shorter = (op.num_bytes / 2) / kDirectIoAlignment * kDirectIoAlignment;
          if (shorter > 0) op.num_bytes = shorter;
          pass.push_back(op);
          continue;
        }
        case FaultKind::kFlipBit:
          if (op.kind == IoOpKind::kRead) {
            flip_after_read_[op.user_data] = op.buffer;
          } else {
            // Write a corrupted copy; the caller's buffer stays intact.
            StatusOr<AlignedBuffer> copy = AlignedBuffer::Allocate(op.num_bytes);
            if (!copy.ok()) {
              // None of `ops` is taken: drop what this call injected.
              injected_.resize(num_injected_before);
              return copy.status();
            }
            std::memcpy(copy->data(), op.buffer, op.num_bytes);
            copy->data()[op.num_bytes / 2] ^= 0x10;
            op.buffer = copy->data();
            op.buffer_index = -1;
            write_copies_[op.user_data] = std::move(copy).value();
          }
          pass.push_back(op);
          continue;
      }
    }
    if (!pass.empty()) {
      size_t inner_submitted = 0;
      Status s = inner_->Submit(pass, &inner_submitted);
      inner_in_flight_ += inner_submitted;
      if (!s.ok()) {
        // Our operations are taken up to the first pass entry the inner ring
        // did not take; injected completions past that point must not come back.
        size_t cut = inner_submitted < pass.size() && inner_submitted >= num_stale
                         ? pass_op_index[inner_submitted - num_stale]
                         : (inner_submitted < num_stale ? 0 : num_taken);
        while (injected_.size() > num_injected_before && injected_op_index.back() >= cut) {
          injected_.pop_back();
          injected_op_index.pop_back();
        }
        *num_submitted = cut;
        return s;
      }
    }
    *num_submitted = num_taken;
    return submit_error;
  }

  StatusOr<size_t> Reap(std::span<IoCompletion> out, uint32_t min_complete) override {
    size_t n = 0;
    while (n < out.size() && !injected_.empty()) {
      out[n++] = injected_.front();
      injected_.pop_front();
    }
    if (n < out.size()) {
      // Injected completions count toward min_complete; never wait for more
      // real ones than are in flight in the inner ring.
      uint32_t want = n >= min_complete ? 0 : static_cast<uint32_t>(min_complete - n);
      want = std::min<uint32_t>(want, static_cast<uint32_t>(inner_in_flight_));
      TF_ASSIGN_OR_RETURN(size_t got, inner_->Reap(out.subspan(n), want));
      inner_in_flight_ -= got;
      for (size_t i = n; i < n + got; ++i) {
        auto it = flip_after_read_.find(out[i].user_data);
        if (it != flip_after_read_.end()) {
          if (out[i].result > 0) static_cast<uint8_t*>(it->second)[out[i].result / 2] ^= 0x10;
          flip_after_read_.erase(it);
        }
        write_copies_.erase(out[i].user_data);
      }
      n += got;
    }
    return n;
  }

 private:
  std::shared_ptr<FaultPlan> plan_;
  std::unique_ptr<IoBackend> inner_;
  std::deque<IoCompletion> injected_;
  std::unordered_map<uint64_t, void*> flip_after_read_;
  std::unordered_map<uint64_t, AlignedBuffer> write_copies_;
  size_t inner_in_flight_ = 0;
  // Operations a kSubmitFailsAfterQueuing fault left "in the ring".
  std::vector<IoOp> queued_;
};

}  // namespace

IoBackendFactory FaultInjectingBackendFactory(std::shared_ptr<FaultPlan> plan,
                                              IoBackendFactory inner) {
  return [plan = std::move(plan), inner = std::move(inner)](
             const IoBackendOptions& o) -> StatusOr<std::unique_ptr<IoBackend>> {
    TF_ASSIGN_OR_RETURN(std::unique_ptr<IoBackend> b, inner(o));
    return std::unique_ptr<IoBackend>(std::make_unique<FaultInjectingBackend>(plan, std::move(b)));
  };
}

}  // namespace tierflow::offload
