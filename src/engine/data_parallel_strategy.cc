// The data-parallel strategy: parts, micro-batch shares and the decision's exchange.
#include "engine/data_parallel_strategy.h"

#include <cmath>
#include <string>

#include "common/grad_stats.h"

namespace tierflow {
namespace {

// The communicators, checked; comm and device_comm null for one process.
Status CheckCommunicators(const DataParallelStrategy::Options& o) {
  if (o.comm == nullptr) {
    if (o.device_comm != nullptr && o.device_comm->world_size() > 1) {
      return InvalidArgumentError(
          "EngineOptions::device_comm without comm: the norm and the losses need host "
          "collectives");
    }
    return Status::Ok();
  }
  if (o.comm->buffers() != comm::BufferKind::kHost) {
    return InvalidArgumentError("EngineOptions::comm must be over host buffers, not " +
                                std::string(o.comm->backend()) +
                                "'s device buffers: give that one as device_comm");
  }
  if (o.device_comm == nullptr) return Status::Ok();
  const comm::Communicator& d = *o.device_comm;
  if (d.buffers() != comm::BufferKind::kDevice) {
    return InvalidArgumentError("EngineOptions::device_comm (" + std::string(d.backend()) +
                                ") is not over device buffers");
  }
  if (d.rank() != o.comm->rank() || d.world_size() != o.comm->world_size()) {
    return InvalidArgumentError(
        "EngineOptions::device_comm is rank " + std::to_string(d.rank()) + " of " +
        std::to_string(d.world_size()) + " but comm is rank " + std::to_string(o.comm->rank()) +
        " of " + std::to_string(o.comm->world_size()) + ": both must order the same ranks alike");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<DataParallelStrategy> DataParallelStrategy::Create(const std::vector<UnitInfo>& units,
                                                            const Options& options) {
  DataParallelStrategy s;
  s.local_micro_ = options.micro_batches_per_step;
  // A world of one with device collectives runs the data-parallel path too:
  // how one GPU checks them (its collectives are copies).
  const bool collective =
      options.comm != nullptr && (options.comm->world_size() > 1 || options.device_comm != nullptr);
  Options checked = options;
  if (!collective) checked.comm = nullptr;
  TF_RETURN_IF_ERROR(CheckCommunicators(checked));
  if (collective) {
    s.comm_ = options.comm;
    s.device_comm_ = options.device_comm;
    s.rank_ = s.comm_->rank();
    s.world_ = s.comm_->world_size();
    const int m = options.micro_batches_per_step;
    if (m <= 0 || m % s.world_ != 0) {
      return InvalidArgumentError(
          "data parallelism over " + std::to_string(s.world_) +
          " ranks needs micro_batches_per_step fixed to a multiple of the world size (each rank "
          "runs an equal share of every step), not " +
          std::to_string(m));
    }
    s.local_micro_ = m / s.world_;
  }
  s.rank_chunks_.assign(static_cast<size_t>(s.world_), std::vector<uint64_t>(1, 0));
  for (const UnitInfo& unit : units) {
    TF_ASSIGN_OR_RETURN(comm::Partition part,
                        comm::Partition::Even(unit.num_params, s.world_, kGradStatsChunkElems));
    for (int r = 0; r < s.world_; ++r) {
      std::vector<uint64_t>& chunks = s.rank_chunks_[static_cast<size_t>(r)];
      chunks.push_back(chunks.back() + GradStatsChunks(part.size(r)));
    }
    s.parts_.push_back(std::move(part));
  }
  return s;
}

StatusOr<SubGroupLayout> DataParallelStrategy::Layout(const std::vector<UnitInfo>& units,
                                                      SubGroupRule rule) const {
  if (units.size() != parts_.size()) {
    return InvalidArgumentError("data parallelism: a layout of " + std::to_string(units.size()) +
                                " units from a strategy made for " + std::to_string(parts_.size()));
  }
  std::vector<uint64_t> begin(units.size()), params(units.size());
  for (size_t u = 0; u < units.size(); ++u) {
    begin[u] = parts_[u].begin(rank_);
    params[u] = parts_[u].size(rank_);
  }
  return MakeSubGroupsOfParts(units, rule, begin, params);
}

StatusOr<int> DataParallelStrategy::LocalMicroBatches(int global) const {
  if (global % world_ != 0) {
    return InvalidArgumentError("Step: " + std::to_string(global) +
                                " micro-batches cannot be shared by " + std::to_string(world_) +
                                " ranks; give a multiple of the world size");
  }
  return global / world_;
}

StatusOr<comm::Partition> DataParallelStrategy::Reports() const {
  // Rank r's report: its chunk sums, its losses, its stop flag, as doubles.
  const size_t per_rank_losses = static_cast<size_t>(local_micro_) + 1;
  std::vector<size_t> bounds(1, 0);
  for (int r = 0; r < world_; ++r) bounds.push_back(bounds.back() + Chunks(r) + per_rank_losses);
  return comm::Partition::FromBounds(bounds);
}

StatusOr<DataParallelStrategy::StepTotals> DataParallelStrategy::Exchange(
    const std::vector<double>& chunk_sums, const std::vector<double>& local_losses,
    bool stop_requested, const std::vector<double>& micro_weights, TraceRecorder* trace) const {
  if (local_losses.size() != static_cast<size_t>(local_micro_)) {
    return InternalError("step posted " + std::to_string(local_losses.size()) +
                         " losses, expected " + std::to_string(local_micro_));
  }
  if (chunk_sums.size() != Chunks(rank_)) {
    return InternalError("step has " + std::to_string(chunk_sums.size()) +
                         " norm chunk sums, expected " + std::to_string(Chunks(rank_)));
  }
  TF_ASSIGN_OR_RETURN(comm::Partition reports, Reports());
  std::vector<double> all(reports.total());
  double* own = all.data() + reports.begin(rank_);
  std::copy(chunk_sums.begin(), chunk_sums.end(), own);
  std::copy(local_losses.begin(), local_losses.end(), own + Chunks(rank_));
  own[Chunks(rank_) + local_losses.size()] = stop_requested ? 1.0 : 0.0;
  if (comm_ != nullptr) {
    ScopedSpan span(trace, "comm", "all-gather norm and loss");
    TF_RETURN_IF_ERROR(comm_->AllGather(own, sizeof(double), reports, all.data()));
  }
  return Combine(all, reports, micro_weights);
}

DataParallelStrategy::StepTotals DataParallelStrategy::Combine(
    const std::vector<double>& all, const comm::Partition& reports,
    const std::vector<double>& micro_weights) const {
  StepTotals t;
  // Each unit's chunks in order (rank after rank), from 0: one pass's sum.
  const size_t units = parts_.size();
  t.unit_sum_squares.assign(units, 0.0);
  t.unit_non_finite.assign(units, 0);
  for (size_t u = 0; u < units; ++u) {
    double sum = 0;
    for (int r = 0; r < world_; ++r) {
      const double* c = all.data() + reports.begin(r);
      for (uint64_t i = ChunkBegin(r, static_cast<int>(u));
           i < ChunkBegin(r, static_cast<int>(u) + 1); ++i) {
        sum += c[i];
      }
    }
    t.unit_sum_squares[u] = sum;
    t.unit_non_finite[u] = static_cast<char>(std::isnan(sum));
  }
  // The step's loss: every micro-batch's, weighted, in global order.
  double loss = 0;
  for (size_t k = 0; k < micro_weights.size(); ++k) {
    const int r = static_cast<int>(k % static_cast<size_t>(world_));
    const size_t j = k / static_cast<size_t>(world_);
    const double* losses = all.data() + reports.begin(r) + Chunks(r);
    loss += micro_weights[k] * losses[j];  // each an fp32 loss, exactly
  }
  t.loss = static_cast<float>(loss);
  for (int r = 0; r < world_; ++r) {
    const double* flags = all.data() + reports.begin(r) + Chunks(r);
    t.stop_requested |= flags[local_micro_] != 0.0;
  }
  return t;
}

}  // namespace tierflow
