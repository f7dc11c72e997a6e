// The two-stage sweep and the start-up probe.
#include "offload/nvme_tune.h"

#include <algorithm>

#include "offload/raw_io_probe.h"
#include "offload/store_throughput.h"

namespace tierflow::offload {
namespace {

// One run of the store at one setting.
StatusOr<NvmeTunePoint> MeasurePoint(const std::vector<std::string>& dirs, IoMode mode,
                                     uint64_t bytes, uint64_t chunk, bool fixed_buffers,
                                     const NvmeIoSettings& io, uint32_t in_flight) {
  StatusOr<StoreThroughputResult> r = MeasureStoreThroughput({.directories = dirs,
                                                              .io_mode = mode,
                                                              .io = io,
                                                              .num_bytes = bytes,
                                                              .chunk_bytes = chunk,
                                                              .in_flight = in_flight,
                                                              .fixed_buffers = fixed_buffers});
  if (!r.ok()) {
    return r.status().WithContext("measuring the store at " + DescribeNvmeIoSettings(io) + ", " +
                                  std::to_string(in_flight) + " in flight");
  }
  NvmeTunePoint p;
  p.io = io;
  p.in_flight = in_flight;
  p.write_gb_per_second = r->write_gb_per_second;
  p.read_gb_per_second = r->read_gb_per_second;
  return p;
}

// One run of the raw loop at p's block size and queue depth.
Status AddRaw(const std::string& dir, IoMode mode, uint64_t bytes, NvmeTunePoint* p) {
  RawIoProbeOptions ro;
  ro.directory = dir;
  ro.num_bytes = bytes;
  ro.block_size_bytes = p->io.block_size_bytes;
  ro.queue_depth = p->io.queue_depth;
  ro.io_mode = mode;
  StatusOr<RawIoProbeResult> r = RunRawIoProbe(ro);
  if (!r.ok()) return r.status().WithContext("the raw loop at " + DescribeNvmeIoSettings(p->io));
  p->raw_write_gb_per_second = r->write_gb_per_second;
  p->raw_read_gb_per_second = r->read_gb_per_second;
  return Status::Ok();
}

void Choose(NvmeTuneResult* r) {
  auto by = [&](auto better) {
    return *std::min_element(r->points.begin(), r->points.end(), better);
  };
  r->best_write = by([](const NvmeTunePoint& a, const NvmeTunePoint& b) {
    return a.write_gb_per_second > b.write_gb_per_second;
  });
  r->best_read = by([](const NvmeTunePoint& a, const NvmeTunePoint& b) {
    return a.read_gb_per_second > b.read_gb_per_second;
  });
  r->chosen = by([](const NvmeTunePoint& a, const NvmeTunePoint& b) {
    return a.SecondsPerGbBothWays() < b.SecondsPerGbBothWays();
  });
  for (const NvmeTunePoint& p : r->points) {
    if (p.raw_write_gb_per_second > r->raw_best_write_gb_per_second) {
      r->raw_best_write_gb_per_second = p.raw_write_gb_per_second;
      r->raw_best_write_block_bytes = p.io.block_size_bytes;
    }
    if (p.raw_read_gb_per_second > r->raw_best_read_gb_per_second) {
      r->raw_best_read_gb_per_second = p.raw_read_gb_per_second;
      r->raw_best_read_block_bytes = p.io.block_size_bytes;
    }
  }
}

Status CheckCandidates(const std::vector<uint32_t>& v, const char* what, uint32_t max) {
  if (v.empty()) return InvalidArgumentError(std::string("no ") + what + " to try");
  for (uint32_t x : v) {
    if (x < 1 || x > max) {
      return InvalidArgumentError(std::string(what) + " " + std::to_string(x) +
                                  " is out of range; use 1.." + std::to_string(max));
    }
  }
  return Status::Ok();
}

}  // namespace

uint32_t ProbeQueueDepth(uint32_t block_size_bytes) {
  const uint32_t n = (64u << 20) / std::max<uint32_t>(block_size_bytes, 1);
  return std::clamp<uint32_t>(n, 2, 32);
}

StatusOr<NvmeTuneResult> TuneNvme(const NvmeTuneOptions& o) {
  if (o.directories.empty()) return InvalidArgumentError("no directory to tune; name one");
  TF_RETURN_IF_ERROR(CheckCandidates(o.block_sizes, "block size", kNvmeIoMaxBlockBytes));
  TF_RETURN_IF_ERROR(CheckCandidates(o.queue_depths, "queue depth", kNvmeIoMaxQueueDepth));
  TF_RETURN_IF_ERROR(CheckCandidates(o.rings, "ring count", kNvmeIoMaxRings));
  TF_RETURN_IF_ERROR(CheckCandidates(o.in_flights, "transfers in flight", 64));
  NvmeTuneResult r;
  // Measures `stage` (points with settings only) `repeat` times, round after
  // round, so a drive whose rate drifts over time shifts every point alike;
  // each point keeps its best run each way.
  auto measure = [&](std::vector<NvmeTunePoint> stage, bool raw) -> Status {
    for (uint32_t round = 0; round < std::max<uint32_t>(o.repeat, 1); ++round) {
      for (NvmeTunePoint& best : stage) {
        TF_ASSIGN_OR_RETURN(NvmeTunePoint p,
                            MeasurePoint(o.directories, o.io_mode, o.bytes_per_point, o.chunk_bytes,
                                         o.fixed_buffers, best.io, best.in_flight));
        if (raw) TF_RETURN_IF_ERROR(AddRaw(o.directories[0], o.io_mode, o.bytes_per_point, &p));
        if (o.on_point) o.on_point(p);
        best.write_gb_per_second = std::max(best.write_gb_per_second, p.write_gb_per_second);
        best.read_gb_per_second = std::max(best.read_gb_per_second, p.read_gb_per_second);
        best.raw_write_gb_per_second =
            std::max(best.raw_write_gb_per_second, p.raw_write_gb_per_second);
        best.raw_read_gb_per_second =
            std::max(best.raw_read_gb_per_second, p.raw_read_gb_per_second);
      }
    }
    r.points.insert(r.points.end(), stage.begin(), stage.end());
    return Status::Ok();
  };
  // Stage 1: block size x queue depth, beside the raw loop.
  const uint32_t ring1 = 1;
  const uint32_t in_flight1 = 2;
  std::vector<NvmeTunePoint> stage;
  for (uint32_t block : o.block_sizes) {
    for (uint32_t qd : o.queue_depths) {
      NvmeTunePoint p;
      p.io = {block, qd, ring1};
      p.in_flight = in_flight1;
      TF_RETURN_IF_ERROR(ValidateNvmeIoSettings(p.io, "tune candidate"));
      stage.push_back(p);
    }
  }
  TF_RETURN_IF_ERROR(measure(std::move(stage), o.raw));
  Choose(&r);
  // Stage 2: rings x transfers in flight at stage 1's choice.
  stage.clear();
  for (uint32_t rings : o.rings) {
    for (uint32_t in_flight : o.in_flights) {
      if (rings == ring1 && in_flight == in_flight1) continue;  // measured in stage 1
      NvmeTunePoint p;
      p.io = r.chosen.io;
      p.io.num_rings = rings;
      p.in_flight = in_flight;
      stage.push_back(p);
    }
  }
  TF_RETURN_IF_ERROR(measure(std::move(stage), /*raw=*/false));
  Choose(&r);
  return r;
}

StatusOr<NvmeTuneResult> ProbeNvme(const NvmeProbeOptions& o) {
  if (o.directories.empty()) return InvalidArgumentError("no directory to probe; name one");
  TF_RETURN_IF_ERROR(CheckCandidates(o.block_sizes, "block size", kNvmeIoMaxBlockBytes));
  NvmeTuneResult r;
  for (uint32_t block : o.block_sizes) {
    NvmeIoSettings io{block, ProbeQueueDepth(block), 1};
    TF_RETURN_IF_ERROR(ValidateNvmeIoSettings(io, "probe candidate"));
    TF_ASSIGN_OR_RETURN(NvmeTunePoint p,
                        MeasurePoint(o.directories, o.io_mode, o.bytes_per_point, o.chunk_bytes,
                                     /*fixed_buffers=*/true, io, /*in_flight=*/2));
    r.points.push_back(p);
  }
  Choose(&r);
  return r;
}

}  // namespace tierflow::offload
