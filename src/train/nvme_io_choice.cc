// aio keys > profile > start-up probe, setting by setting.
#include "train/nvme_io_choice.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>

#include "common/units.h"
#include "offload/nvme_tune.h"
#include "plan/hardware_profile.h"

namespace tierflow {
namespace {

uint64_t RoundUp(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

std::string Gb(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", v);
  return buf;
}

// Bytes each probe point writes and reads: a few transfers' worth, bounded.
uint64_t ProbeBytes(uint64_t chunk) {
  return std::clamp<uint64_t>(4 * chunk, 32ull << 20, 256ull << 20);
}

}  // namespace

std::vector<uint32_t> ProbeCandidates(uint64_t largest_tensor_bytes) {
  const uint64_t cap = std::clamp<uint64_t>(RoundUp(largest_tensor_bytes, 4096),
                                            kNvmeIoMinBlockBytes, kNvmeIoMaxBlockBytes);
  std::vector<uint32_t> out;
  for (uint32_t b : offload::NvmeProbeOptions().block_sizes) {
    if (b <= cap) out.push_back(b);
  }
  if (out.empty() || cap >= 2 * uint64_t{out.back()}) out.push_back(static_cast<uint32_t>(cap));
  return out;
}

std::string NvmeIoChoice::Describe() const {
  std::string s = DescribeNvmeIoSettings(io) + ", " + std::to_string(buffer_count) + " slots (" +
                  std::to_string(in_flight) + " transfers in flight)";
  s += "; block size: " + block_source + "; queue depth: " + queue_depth_source +
       "; rings: " + rings_source + "; slots: " + buffer_count_source;
  if (probed) {
    char head[64];
    std::snprintf(head, sizeof(head), "; probe (%.1f s, write/read GB/s):", probe_seconds);
    s += head;
    for (const nlohmann::json& p : probe_points) {
      s += " " + FormatBytes(p["block_size_bytes"].get<uint64_t>()) + " " +
           Gb(p["write_gb_per_second"].get<double>()) + "/" +
           Gb(p["read_gb_per_second"].get<double>());
    }
  }
  return s;
}

nlohmann::json NvmeIoChoice::ToJson() const {
  nlohmann::json j = {{"block_size_bytes", io.block_size_bytes},
                      {"queue_depth", io.queue_depth},
                      {"num_rings", io.num_rings},
                      {"buffer_count", buffer_count},
                      {"in_flight", in_flight},
                      {"sources",
                       {{"block_size", block_source},
                        {"queue_depth", queue_depth_source},
                        {"num_rings", rings_source},
                        {"buffer_count", buffer_count_source}}}};
  if (probed) {
    j["probe"] = probe_points;
    j["probe_seconds"] = probe_seconds;
  }
  return j;
}

StatusOr<NvmeIoChoice> ChooseNvmeIo(const TrainConfig& c, const NvmeIoChoiceInput& in) {
  if (in.nvme_paths.empty() || in.largest_tensor_bytes == 0) {
    return InvalidArgumentError("choosing NVMe settings needs a directory and a sub-group size");
  }
  NvmeIoChoice ch;
  // A block larger than the largest transfer holds no more data per request.
  const uint64_t cap = std::clamp<uint64_t>(RoundUp(in.largest_tensor_bytes, 4096),
                                            kNvmeIoMinBlockBytes, kNvmeIoMaxBlockBytes);
  const std::string capped_note =
      ", capped at the largest sub-group's state (" + FormatBytes(cap) + ")";

  const std::optional<NvmeStoreProfile>& profile = in.tuned;
  std::string untuned;
  const std::string from_profile = "profile " + c.profile;
  if (!c.profile.empty() && !profile) {
    untuned = " (profile " + c.profile + " has no nvme_store: not tuned)";
  }

  // Block size.
  if (c.aio_block_size != 0) {
    ch.io.block_size_bytes = c.aio_block_size;
    ch.block_source = "aio.block_size";
  } else if (profile) {
    ch.io.block_size_bytes =
        static_cast<uint32_t>(std::min<uint64_t>(profile->io.block_size_bytes, cap));
    ch.block_source = from_profile + (profile->io.block_size_bytes > cap ? capped_note : "");
  } else if (in.buffered) {
    ch.io.block_size_bytes = static_cast<uint32_t>(std::min<uint64_t>(1u << 20, cap));
    ch.block_source =
        "default (buffered I/O is not probed: it would measure the page cache)" + untuned;
  } else {
    const std::vector<uint32_t> candidates = ProbeCandidates(cap);
    if (candidates.size() == 1) {
      ch.io.block_size_bytes = candidates[0];
      ch.block_source = "the only candidate for sub-groups of up to " + FormatBytes(cap) +
                        " (nothing to probe)" + untuned;
    } else {
      offload::NvmeProbeOptions po;
      po.directories = in.nvme_paths;
      po.chunk_bytes = cap;
      po.bytes_per_point = ProbeBytes(cap);
      po.block_sizes = candidates;
      const auto t0 = std::chrono::steady_clock::now();
      StatusOr<offload::NvmeTuneResult> probe = offload::ProbeNvme(po);
      if (!probe.ok()) {
        return probe.status().WithContext(
            "the start-up probe of the NVMe directories (skip it with a tuned --profile or "
            "aio.block_size)");
      }
      ch.probe_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      ch.probed = true;
      for (const offload::NvmeTunePoint& p : probe->points) {
        ch.probe_points.push_back({{"block_size_bytes", p.io.block_size_bytes},
                                   {"queue_depth", p.io.queue_depth},
                                   {"write_gb_per_second", p.write_gb_per_second},
                                   {"read_gb_per_second", p.read_gb_per_second}});
      }
      ch.io.block_size_bytes = probe->chosen.io.block_size_bytes;
      ch.block_source = "start-up probe, least write+read time of " +
                        FormatBytes(po.bytes_per_point) + " at each candidate" + untuned;
    }
  }

  // Queue depth and rings: the config's aio key when set, else the profile's,
  // else a default.
  auto pick = [&](uint32_t NvmeIoSettings::*setting, uint32_t configured, const char* key,
                  uint32_t fallback, const char* fallback_source, std::string* source) {
    if (configured != 0) {
      ch.io.*setting = configured;
      *source = key;
    } else if (profile) {
      ch.io.*setting = profile->io.*setting;
      *source = from_profile;
    } else {
      ch.io.*setting = fallback;
      *source = fallback_source;
    }
  };
  pick(&NvmeIoSettings::queue_depth, c.aio_queue_depth, "aio.queue_depth",
       offload::ProbeQueueDepth(ch.io.block_size_bytes),
       "paired with the block size (about 64 MiB in flight per ring)", &ch.queue_depth_source);
  pick(&NvmeIoSettings::num_rings, c.aio_threads, "aio.thread_count", 1, "default",
       &ch.rings_source);

  // Slots: the transfers in flight, plus the one the optimizer holds and one free.
  if (c.buffer_count != 0) {
    ch.buffer_count = c.buffer_count;
    ch.in_flight = static_cast<uint32_t>(std::max(c.buffer_count - 2, 0));
    ch.buffer_count_source = "tierflow.buffer_count";
  } else if (profile) {
    ch.in_flight = profile->in_flight;
    ch.buffer_count = std::max<int>(4, static_cast<int>(profile->in_flight) + 2);
    ch.buffer_count_source =
        from_profile + " (in_flight " + std::to_string(profile->in_flight) + " + 2, at least 4)";
  } else {
    ch.in_flight = 2;
    ch.buffer_count = 4;
    ch.buffer_count_source = "default";
  }
  TF_RETURN_IF_ERROR(ValidateNvmeIoSettings(ch.io, "the NVMe settings chosen"));
  return ch;
}

}  // namespace tierflow
