// `tierflow bench nvme`: sequential write and read throughput through the
// state store (checksums, block map, rings and all), beside a raw io_uring
// O_DIRECT loop moving the same bytes: at the store's own block size and
// queue depth, and at the drive's best over the block sizes tried (the honest
// limit). Write figures are rewrites of written blocks, a run's steady
// state; the first write into freshly reserved space is reported beside them
// (offload/raw_io_probe.h says why it is slower). --tune sweeps the store's settings
// (offload/nvme_tune.h), measures the chosen one and, with --profile, writes it into the hardware
// profile that `tierflow train --profile` builds the NVMe tier with.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/checked_math.h"
#include "common/units.h"
#include "io/json_util.h"
#include "offload/aligned_buffer.h"
#include "offload/crc32c.h"
#include "offload/nvme_tune.h"
#include "offload/raw_io_probe.h"
#include "offload/store_throughput.h"
#include "plan/hardware_profile.h"
#include "tierflow/nvme_io.h"
#include "tools/commands.h"
#include "tools/flag_checks.h"

namespace tierflow::cli {
namespace {

using offload::AlignedBuffer;
using offload::NvmeTunePoint;

struct NvmeBenchOptions {
  std::vector<std::string> paths;
  std::string size = "4GiB";
  std::string block_size = "1MiB";
  uint32_t queue_depth = 32;
  uint32_t num_rings = 1;
  std::string chunk = "48MiB";
  uint32_t in_flight = 2;
  bool buffered = false;
  bool no_fixed_buffers = false;
  bool tune = false;
  std::string sweep_size = "512MiB";
  std::string profile;
  bool json = false;
  uint32_t repeat = 1;
  bool store_first = false;
  // Which of the settings flags were given (they override a profile's).
  bool given_block = false, given_qd = false, given_rings = false, given_in_flight = false;
};

// The main measurement: the store and the raw loop at the same setting.
struct Result {
  uint64_t num_bytes = 0;
  NvmeIoSettings io;
  uint32_t in_flight = 0;
  offload::StoreThroughputResult store;
  double raw_first_write_gb_per_second = 0;
  double raw_write_gb_per_second = 0, raw_read_gb_per_second = 0;
  double raw_cpu_seconds = 0;
};

// The raw loop's best figure each way and the block size it came at.
struct RawBest {
  double write = 0, read = 0;
  uint32_t write_block = 0, read_block = 0;
  void Add(double w, double r, uint32_t block) {
    if (w > write) write = w, write_block = block;
    if (r > read) read = r, read_block = block;
  }
};

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

bool AnySettingFlag(const NvmeBenchOptions& o) {
  return o.given_block || o.given_qd || o.given_rings || o.given_in_flight;
}

offload::IoMode Mode(const NvmeBenchOptions& o) {
  return o.buffered ? offload::IoMode::kBuffered : offload::IoMode::kDirect;
}

StatusOr<offload::RawIoProbeResult> Raw(const NvmeBenchOptions& opt, uint64_t bytes, uint32_t block,
                                        uint32_t qd) {
  offload::RawIoProbeOptions po;
  po.directory = opt.paths[0];
  po.num_bytes = bytes;
  po.block_size_bytes = block;
  po.queue_depth = qd;
  po.io_mode = Mode(opt);
  return offload::RunRawIoProbe(po);
}

// One store run and one raw run, alternated `repeat` times (the drive may
// still be flushing what the first wrote while the second runs); keeps each
// side's best, the run least disturbed by other processes.
StatusOr<Result> RunMain(const NvmeBenchOptions& opt, uint64_t num_bytes, uint64_t chunk,
                         const NvmeIoSettings& io, uint32_t in_flight, std::vector<Result>* runs) {
  Result best;
  for (uint32_t i = 0; i < std::max<uint32_t>(1, opt.repeat); ++i) {
    Result r;
    r.num_bytes = num_bytes;
    r.io = io;
    r.in_flight = in_flight;
    auto store_run = [&]() -> Status {
      offload::StoreThroughputOptions so;
      so.directories = opt.paths;
      so.io_mode = Mode(opt);
      so.io = io;
      so.num_bytes = num_bytes;
      so.chunk_bytes = chunk;
      so.in_flight = in_flight;
      so.fixed_buffers = !opt.no_fixed_buffers;
      TF_ASSIGN_OR_RETURN(r.store, offload::MeasureStoreThroughput(so));
      if (opt.no_fixed_buffers) r.store.fixed_buffers_reason = "disabled by --no-fixed-buffers";
      return Status::Ok();
    };
    auto raw_run = [&]() -> Status {
      const double cpu0 = ProcessCpuSeconds();
      TF_ASSIGN_OR_RETURN(offload::RawIoProbeResult raw,
                          Raw(opt, num_bytes, io.block_size_bytes, io.queue_depth));
      r.raw_cpu_seconds = ProcessCpuSeconds() - cpu0;  // includes the probe's small setup
      r.raw_first_write_gb_per_second = raw.first_write_gb_per_second;
      r.raw_write_gb_per_second = raw.write_gb_per_second;
      r.raw_read_gb_per_second = raw.read_gb_per_second;
      return Status::Ok();
    };
    const bool store_first = opt.store_first != (i % 2 == 1);
    TF_RETURN_IF_ERROR(store_first ? store_run() : raw_run());
    TF_RETURN_IF_ERROR(store_first ? raw_run() : store_run());
    if (runs != nullptr) runs->push_back(r);
    if (i == 0) {
      best = r;
      continue;
    }
    best.store.first_write_gb_per_second =
        std::max(best.store.first_write_gb_per_second, r.store.first_write_gb_per_second);
    best.raw_first_write_gb_per_second =
        std::max(best.raw_first_write_gb_per_second, r.raw_first_write_gb_per_second);
    best.store.write_gb_per_second =
        std::max(best.store.write_gb_per_second, r.store.write_gb_per_second);
    best.store.read_gb_per_second =
        std::max(best.store.read_gb_per_second, r.store.read_gb_per_second);
    best.raw_write_gb_per_second =
        std::max(best.raw_write_gb_per_second, r.raw_write_gb_per_second);
    best.raw_read_gb_per_second = std::max(best.raw_read_gb_per_second, r.raw_read_gb_per_second);
    best.store.cpu_seconds = std::min(best.store.cpu_seconds, r.store.cpu_seconds);
    best.raw_cpu_seconds = std::min(best.raw_cpu_seconds, r.raw_cpu_seconds);
  }
  return best;
}

// CRC32C throughput per CPU-second of one thread (so other processes on the
// machine do not distort it), to show it is not the bottleneck.
double MeasureCrc32c(bool hardware) {
  StatusOr<AlignedBuffer> b = AlignedBuffer::Allocate(64u << 20);
  if (!b.ok()) return 0;
  for (size_t i = 0; i < b->num_bytes(); ++i) b->data()[i] = static_cast<uint8_t>(i * 7);
  uint32_t crc = 0;
  double t0 = ThreadCpuSeconds();
  const int reps = 4;
  for (int i = 0; i < reps; ++i) {
    crc = hardware ? offload::Crc32c(crc, b->data(), b->num_bytes())
                   : offload::Crc32cPortable(crc, b->data(), b->num_bytes());
  }
  double s = ThreadCpuSeconds() - t0;
  volatile uint32_t sink = crc;
  (void)sink;
  return static_cast<double>(b->num_bytes()) * reps / s / 1e9;
}

nlohmann::json SettingsJson(const NvmeIoSettings& io, uint32_t in_flight) {
  return {{"block_size_bytes", io.block_size_bytes},
          {"queue_depth", io.queue_depth},
          {"num_rings", io.num_rings},
          {"in_flight", in_flight}};
}

nlohmann::json ToJson(const Result& r) {
  nlohmann::json j = SettingsJson(r.io, r.in_flight);
  j["size_bytes"] = r.num_bytes;
  j["first_write_gb_per_second"] = r.store.first_write_gb_per_second;
  j["write_gb_per_second"] = r.store.write_gb_per_second;
  j["read_gb_per_second"] = r.store.read_gb_per_second;
  j["raw_first_write_gb_per_second"] = r.raw_first_write_gb_per_second;
  j["raw_write_gb_per_second"] = r.raw_write_gb_per_second;
  j["raw_read_gb_per_second"] = r.raw_read_gb_per_second;
  j["cpu_seconds"] = r.store.cpu_seconds;
  j["raw_cpu_seconds"] = r.raw_cpu_seconds;
  return j;
}

nlohmann::json ToJson(const NvmeTunePoint& p) {
  nlohmann::json j = SettingsJson(p.io, p.in_flight);
  j["write_gb_per_second"] = p.write_gb_per_second;
  j["read_gb_per_second"] = p.read_gb_per_second;
  if (p.raw_write_gb_per_second > 0) {
    j["raw_write_gb_per_second"] = p.raw_write_gb_per_second;
    j["raw_read_gb_per_second"] = p.raw_read_gb_per_second;
  }
  return j;
}

std::string Describe(const NvmeTunePoint& p) {
  return DescribeNvmeIoSettings(p.io) + ", " + std::to_string(p.in_flight) + " in flight";
}

void PrintMainRow(const Result& r) {
  std::printf("%10s %5u %5u %6u %11.2f %11.2f %11.2f %11.2f\n",
              FormatBytes(r.io.block_size_bytes).c_str(), r.io.queue_depth, r.io.num_rings,
              r.in_flight, r.store.write_gb_per_second, r.raw_write_gb_per_second,
              r.store.read_gb_per_second, r.raw_read_gb_per_second);
}

void PrintTuneRow(const NvmeTunePoint& p) {
  auto raw = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.2f", v);
    return v > 0 ? std::string(buf) : std::string("-");
  };
  std::printf("%10s %5u %5u %6u %11.2f %11s %11.2f %11s %9.3f\n",
              FormatBytes(p.io.block_size_bytes).c_str(), p.io.queue_depth, p.io.num_rings,
              p.in_flight, p.write_gb_per_second, raw(p.raw_write_gb_per_second).c_str(),
              p.read_gb_per_second, raw(p.raw_read_gb_per_second).c_str(),
              p.SecondsPerGbBothWays());
}

// The sizes the flags give, checked.
struct BenchSizes {
  uint64_t num_bytes = 0, block = 0, chunk = 0, sweep_bytes = 0;
};

StatusOr<BenchSizes> CheckFlags(const NvmeBenchOptions& opt) {
  if (opt.paths.empty())
    return InvalidArgumentError("--path is required (a directory on the drive to measure)");
  BenchSizes z;
  TF_ASSIGN_OR_RETURN(z.num_bytes, ParseByteSize(opt.size));
  TF_ASSIGN_OR_RETURN(z.block, ParseByteSize(opt.block_size));
  TF_ASSIGN_OR_RETURN(z.chunk, ParseByteSize(opt.chunk));
  TF_ASSIGN_OR_RETURN(z.sweep_bytes, ParseByteSize(opt.sweep_size));
  if (z.block == 0 || z.block % 4096 != 0 || z.block > kNvmeIoMaxBlockBytes) {
    return InvalidArgumentError("--block-size must be a multiple of 4 KiB up to 256 MiB, got " +
                                std::to_string(z.block) + " bytes");
  }
  if (z.chunk == 0 || z.chunk % 4096 != 0) {
    return InvalidArgumentError("--chunk must be a positive multiple of 4 KiB, got " +
                                std::to_string(z.chunk) + " bytes");
  }
  // Sizes must not wrap when rounded up to whole blocks.
  constexpr uint64_t kMaxBenchBytes = uint64_t{1} << 50;  // 1 PiB
  for (auto [flag, value] : {std::pair<const char*, uint64_t>{"--size", z.num_bytes},
                             {"--chunk", z.chunk},
                             {"--sweep-size", z.sweep_bytes}}) {
    if (value > kMaxBenchBytes) {
      return InvalidArgumentError(std::string(flag) + " is " + std::to_string(value) +
                                  " bytes, more than the 1 PiB a benchmark can use");
    }
  }
  if (z.num_bytes == 0 || z.sweep_bytes == 0)
    return InvalidArgumentError("--size and --sweep-size must be positive");
  if (opt.in_flight < 1 || opt.in_flight > kMaxNvmeInFlight)
    return InvalidArgumentError("--in-flight must be 1..64");
  if (opt.tune && AnySettingFlag(opt)) {
    return InvalidArgumentError(
        "--tune chooses the block size, queue depth, rings and transfers in flight; drop "
        "--block-size/--queue-depth/--rings/--in-flight, or drop --tune to measure one setting");
  }
  return z;
}

// The setting measured: the flags', a profile's, or the tune's choice.
struct Setting {
  NvmeIoSettings io;
  uint32_t in_flight = 0;
  std::string source;
  std::optional<offload::NvmeTuneResult> tune;
};

StatusOr<Setting> ChooseSetting(const NvmeBenchOptions& opt, const BenchSizes& z) {
  TF_ASSIGN_OR_RETURN(const uint32_t block32, CheckedNarrow<uint32_t>(z.block, "--block-size"));
  Setting s{NvmeIoSettings{block32, opt.queue_depth, opt.num_rings}, opt.in_flight,
            "flags (defaults where not given)", std::nullopt};
  if (!opt.profile.empty() && !opt.tune) {
    TF_ASSIGN_OR_RETURN(HardwareProfile read, LoadHardwareProfile(opt.profile, Bandwidths{}));
    const std::optional<NvmeStoreProfile>& p = read.nvme_store;
    if (!p) {
      return InvalidArgumentError("profile '" + opt.profile +
                                  "' has no nvme_store settings (not tuned); run `tierflow bench "
                                  "nvme --tune --profile " +
                                  opt.profile + "` first");
    }
    if (!opt.given_block) s.io.block_size_bytes = p->io.block_size_bytes;
    if (!opt.given_qd) s.io.queue_depth = p->io.queue_depth;
    if (!opt.given_rings) s.io.num_rings = p->io.num_rings;
    if (!opt.given_in_flight) s.in_flight = p->in_flight;
    s.source = "profile " + opt.profile + (AnySettingFlag(opt) ? " (flags given override it)" : "");
  }
  TF_RETURN_IF_ERROR(ValidateNvmeIoSettings(s.io, "the settings measured"));
  if (opt.tune) {
    offload::NvmeTuneOptions to;
    to.directories = opt.paths;
    to.io_mode = Mode(opt);
    to.bytes_per_point = z.sweep_bytes;
    to.chunk_bytes = z.chunk;
    to.repeat = opt.repeat;
    to.fixed_buffers = !opt.no_fixed_buffers;
    to.on_point = [](const NvmeTunePoint& p) {
      std::fprintf(stderr, "tune: %s: write %.2f GB/s, read %.2f GB/s\n", Describe(p).c_str(),
                   p.write_gb_per_second, p.read_gb_per_second);
    };
    TF_ASSIGN_OR_RETURN(s.tune, offload::TuneNvme(to));
    s.io = s.tune->chosen.io;
    s.in_flight = s.tune->chosen.in_flight;
    s.source = "the tune's choice";
  }
  return s;
}

// Everything a run measured, for the JSON and the table.
struct Measured {
  BenchSizes sizes;
  Setting setting;
  Result main;
  std::vector<Result> main_runs;
  RawBest raw_best;
  std::vector<std::pair<uint32_t, offload::RawIoProbeResult>> raw_scan;
  double crc_hw = 0, crc_sw = 0;
};

// The drive's best: the raw loop over the block sizes tried. With --tune,
// its points (every block size x queue depth); otherwise a scan of
// --sweep-size bytes at each of the tune's block sizes, queue depth 8.
Status FindDrivesBest(const NvmeBenchOptions& opt, Measured& m) {
  m.raw_best.Add(m.main.raw_write_gb_per_second, m.main.raw_read_gb_per_second,
                 m.setting.io.block_size_bytes);
  if (m.setting.tune) {
    for (const NvmeTunePoint& p : m.setting.tune->points) {
      m.raw_best.Add(p.raw_write_gb_per_second, p.raw_read_gb_per_second, p.io.block_size_bytes);
    }
    return Status::Ok();
  }
  for (uint32_t b : offload::NvmeTuneOptions().block_sizes) {
    offload::RawIoProbeResult best{};
    for (uint32_t i = 0; i < std::max<uint32_t>(1, opt.repeat); ++i) {
      TF_ASSIGN_OR_RETURN(offload::RawIoProbeResult r, Raw(opt, m.sizes.sweep_bytes, b, 8));
      best.write_gb_per_second = std::max(best.write_gb_per_second, r.write_gb_per_second);
      best.read_gb_per_second = std::max(best.read_gb_per_second, r.read_gb_per_second);
    }
    m.raw_best.Add(best.write_gb_per_second, best.read_gb_per_second, b);
    m.raw_scan.emplace_back(b, best);
  }
  return Status::Ok();
}

// The tune's points and choice; the main run measured the chosen setting at
// --size: its rates go to the profile.
nlohmann::json TuneJson(const Measured& m) {
  const offload::NvmeTuneResult& tune = *m.setting.tune;
  nlohmann::json t;
  t["bytes_per_point"] = m.sizes.sweep_bytes;
  t["chunk_bytes"] = m.sizes.chunk;
  for (const NvmeTunePoint& p : tune.points) t["points"].push_back(ToJson(p));
  t["best_write"] = ToJson(tune.best_write);
  t["best_read"] = ToJson(tune.best_read);
  t["chosen"] = SettingsJson(tune.chosen.io, tune.chosen.in_flight);
  t["chosen"]["write_gb_per_second"] = m.main.store.write_gb_per_second;
  t["chosen"]["read_gb_per_second"] = m.main.store.read_gb_per_second;
  t["chosen_by"] =
      "least time to write and then read the same bytes through the store (one setting serves "
      "both: the block size is the swap files' layout)";
  return t;
}

nlohmann::json BenchJson(const NvmeBenchOptions& opt, const Measured& m) {
  const Result& main = m.main;
  const RawBest& raw_best = m.raw_best;
  nlohmann::json j = ToJson(main);
  j["paths"] = opt.paths;
  j["io_mode"] = opt.buffered ? "buffered" : "direct";
  j["chunk_bytes"] = m.sizes.chunk;
  j["settings_source"] = m.setting.source;
  j["fixed_buffers"] = main.store.fixed_buffers;
  j["fixed_buffers_reason"] = main.store.fixed_buffers_reason;
  j["files_registered"] = main.store.files_registered;
  j["crc32c_hardware"] = offload::Crc32cHardwareAvailable();
  j["crc32c_gb_per_second"] = m.crc_hw > 0 ? m.crc_hw : m.crc_sw;
  j["crc32c_portable_gb_per_second"] = m.crc_sw;
  j["repeat"] = opt.repeat;
  j["raw_best"] = {{"write_gb_per_second", raw_best.write},
                   {"write_block_size_bytes", raw_best.write_block},
                   {"read_gb_per_second", raw_best.read},
                   {"read_block_size_bytes", raw_best.read_block}};
  j["ratio_to_raw_same_setting"] = {
      {"write", main.store.write_gb_per_second / main.raw_write_gb_per_second},
      {"read", main.store.read_gb_per_second / main.raw_read_gb_per_second}};
  j["ratio_to_raw_best"] = {{"write", main.store.write_gb_per_second / raw_best.write},
                            {"read", main.store.read_gb_per_second / raw_best.read}};
  if (opt.repeat > 1) {
    for (const Result& r : m.main_runs) j["runs"].push_back(ToJson(r));
  }
  for (const auto& [b, r] : m.raw_scan) {
    j["raw_scan"].push_back({{"block_size_bytes", b},
                             {"queue_depth", 8},
                             {"size_bytes", r.num_bytes},
                             {"write_gb_per_second", r.write_gb_per_second},
                             {"read_gb_per_second", r.read_gb_per_second}});
  }
  if (m.setting.tune) j["tune"] = TuneJson(m);
  return j;
}

constexpr const char* kTableHeader = "%10s %5s %5s %6s %11s %11s %11s %11s";

void PrintTune(const offload::NvmeTuneResult& tune, uint64_t sweep_bytes) {
  std::printf(
      "\ntune, %s each way per point (store; raw = plain io_uring loop, same block size "
      "and queue depth):\n",
      FormatBytes(sweep_bytes).c_str());
  std::printf(kTableHeader, "block", "qd", "rings", "flight", "write GB/s", "raw write",
              "read GB/s", "raw read");
  std::printf(" %9s\n", "s/GB w+r");
  for (const NvmeTunePoint& p : tune.points) PrintTuneRow(p);
  std::printf("best for writes: %s (%.2f GB/s)\n", Describe(tune.best_write).c_str(),
              tune.best_write.write_gb_per_second);
  std::printf("best for reads:  %s (%.2f GB/s)\n", Describe(tune.best_read).c_str(),
              tune.best_read.read_gb_per_second);
  std::printf(
      "chosen: %s\n  (one setting serves both, the block size being the swap files' "
      "layout: the least time to write and then read the same bytes)\n",
      Describe(tune.chosen).c_str());
}

void PrintReport(const NvmeBenchOptions& opt, const Measured& m, const nlohmann::json& j) {
  const Result& main = m.main;
  std::printf("paths: ");
  for (const std::string& p : opt.paths) std::printf("%s ", p.c_str());
  std::printf("\nmode: %s, %s per transfer; fixed buffers: %s%s%s\n",
              opt.buffered ? "buffered (page cache)" : "O_DIRECT",
              FormatBytes(m.sizes.chunk).c_str(), main.store.fixed_buffers ? "yes" : "no",
              main.store.fixed_buffers ? "" : " - ", main.store.fixed_buffers_reason.c_str());
  std::printf("CRC32C: %.1f GB/s per core (%s), portable %.1f GB/s\n",
              m.crc_hw > 0 ? m.crc_hw : m.crc_sw, m.crc_hw > 0 ? "SSE4.2" : "portable", m.crc_sw);
  if (m.setting.tune) PrintTune(*m.setting.tune, m.sizes.sweep_bytes);
  std::printf("\n%s each way, settings from %s; raw = plain io_uring loop, same setting\n",
              FormatBytes(main.num_bytes).c_str(), m.setting.source.c_str());
  std::printf(kTableHeader, "block", "qd", "rings", "flight", "write GB/s", "raw write",
              "read GB/s", "raw read");
  std::printf("\n");
  if (opt.repeat > 1) {
    for (const Result& r : m.main_runs) PrintMainRow(r);
    std::printf("best of %u:\n", opt.repeat);
  }
  PrintMainRow(main);
  std::printf("raw loop's best: write %.2f GB/s (%s blocks), read %.2f GB/s (%s blocks)\n",
              m.raw_best.write, FormatBytes(m.raw_best.write_block).c_str(), m.raw_best.read,
              FormatBytes(m.raw_best.read_block).c_str());
  std::printf("store / raw at the same setting: write %.3f, read %.3f\n",
              j["ratio_to_raw_same_setting"]["write"].get<double>(),
              j["ratio_to_raw_same_setting"]["read"].get<double>());
  std::printf("store / raw at the drive's best:  write %.3f, read %.3f\n",
              j["ratio_to_raw_best"]["write"].get<double>(),
              j["ratio_to_raw_best"]["read"].get<double>());
  std::printf(
      "first write into freshly reserved space: store %.2f GB/s, raw %.2f GB/s (the\n"
      "  write figures above rewrite written blocks: a run's steady state)\n",
      main.store.first_write_gb_per_second, main.raw_first_write_gb_per_second);
  std::printf("CPU time: store %.2f s, raw loop %.2f s (rewrite + read)\n", main.store.cpu_seconds,
              main.raw_cpu_seconds);
  if (m.setting.tune) {
    if (opt.profile.empty()) {
      std::printf("\nnot written to a profile: add --profile FILE\n");
    } else {
      std::printf("\nwrote the chosen settings (nvme_store) to %s\n", opt.profile.c_str());
    }
  }
}

Status RunNvmeBench(const NvmeBenchOptions& opt) {
  Measured m;
  TF_ASSIGN_OR_RETURN(m.sizes, CheckFlags(opt));
  TF_ASSIGN_OR_RETURN(m.setting, ChooseSetting(opt, m.sizes));
  TF_ASSIGN_OR_RETURN(m.main, RunMain(opt, m.sizes.num_bytes, m.sizes.chunk, m.setting.io,
                                      m.setting.in_flight, &m.main_runs));
  TF_RETURN_IF_ERROR(FindDrivesBest(opt, m));
  m.crc_hw = offload::Crc32cHardwareAvailable() ? MeasureCrc32c(true) : 0;
  m.crc_sw = MeasureCrc32c(false);

  nlohmann::json j = BenchJson(opt, m);
  if (m.setting.tune && !opt.profile.empty()) {
    TF_RETURN_IF_ERROR(WriteNvmeToProfileFile(opt.profile, j));
    j["profile"] = opt.profile;
  }
  if (opt.json) {
    std::printf("%s\n", JsonOutput(j).c_str());
    return Status::Ok();
  }
  PrintReport(opt, m, j);
  return Status::Ok();
}

}  // namespace

void AddBenchNvme(CLI::App& bench, int* exit_code) {
  auto opt = std::make_shared<NvmeBenchOptions>();
  CLI::App* cmd = bench.add_subcommand(
      "nvme", "Sequential NVMe read/write through the state store vs a raw io_uring O_DIRECT loop");
  cmd->add_option("--path", opt->paths,
                  "Directory on the drive to measure (repeat for several drives)")
      ->required();
  cmd->add_option("--size", opt->size, "Bytes written and read, e.g. 4GiB")
      ->check(ByteSizeAtLeast(1))
      ->capture_default_str();
  cmd->add_option("--block-size", opt->block_size, "I/O and checksum block, e.g. 1MiB")
      ->check(ByteSizeAtLeast(kNvmeIoMinBlockBytes))
      ->capture_default_str();
  cmd->add_option("--queue-depth", opt->queue_depth, "Operations in flight per ring")
      ->check(InRange(1, kNvmeIoMaxQueueDepth))
      ->capture_default_str();
  cmd->add_option("--rings", opt->num_rings, "io_uring rings (one thread each)")
      ->check(InRange(1, kNvmeIoMaxRings))
      ->capture_default_str();
  cmd->add_option("--chunk", opt->chunk,
                  "Bytes per store transfer (a sub-group's state: 4Mi parameters x 12 B = 48MiB)")
      ->check(ByteSizeAtLeast(1))
      ->capture_default_str();
  cmd->add_option("--in-flight", opt->in_flight,
                  "Store transfers outstanding (reads ahead, writes behind)")
      ->check(AtLeast(1))
      ->capture_default_str();
  cmd->add_flag(
      "--nvme-buffered,--buffered", opt->buffered,
      "Buffered I/O through the page cache (for file systems without O_DIRECT; reads may come "
      "from RAM)");
  cmd->add_flag("--no-fixed-buffers", opt->no_fixed_buffers,
                "Do not register buffers with the rings");
  cmd->add_flag("--tune,--sweep", opt->tune,
                "Sweep block sizes {1,4,16,64}MiB x queue depths {2,8,32}, then rings {1,2} x "
                "transfers in flight {1,2,4,8}; measure the choice at --size");
  cmd->add_option("--sweep-size", opt->sweep_size,
                  "Bytes each way per tune point, and per block size of the raw loop's scan")
      ->check(ByteSizeAtLeast(1))
      ->capture_default_str();
  cmd->add_option("--profile", opt->profile,
                  "Hardware profile: --tune writes its choice there (nvme_store); without --tune, "
                  "the settings measured come from it");
  cmd->add_option("--repeat", opt->repeat,
                  "Alternate raw and store runs this many times and keep each side's best")
      ->check(AtLeast(1))
      ->capture_default_str();
  cmd->add_flag("--store-first", opt->store_first,
                "Run the store before the raw loop (repeats alternate the order either way)");
  cmd->add_flag("--json", opt->json, "Print one JSON object instead of a table");
  cmd->callback([opt, cmd, exit_code] {
    opt->given_block = cmd->count("--block-size") > 0;
    opt->given_qd = cmd->count("--queue-depth") > 0;
    opt->given_rings = cmd->count("--rings") > 0;
    opt->given_in_flight = cmd->count("--in-flight") > 0;
    Status s = RunNvmeBench(*opt);
    if (!s.ok()) {
      std::fprintf(stderr, "tierflow bench nvme: %s\n", s.ToString().c_str());
      *exit_code = 1;
    }
  });
}

}  // namespace tierflow::cli
