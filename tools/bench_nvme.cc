// `tierflow bench nvme`: sequential write and read throughput through the
// state store (checksums, block map, rings and all), beside a raw io_uring
// O_DIRECT loop moving the same bytes at the same block size and queue depth
// (the limit as the engine sees it). --sweep tries block sizes and queue
// depths and recommends the fastest.
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/checked_math.h"
#include "common/units.h"
#include "offload/aligned_buffer.h"
#include "offload/crc32c.h"
#include "offload/raw_io_probe.h"
#include "offload/state_store.h"
#include "tools/commands.h"

namespace tierflow::cli {
namespace {

using offload::AlignedBuffer;
using Clock = std::chrono::steady_clock;

struct NvmeBenchOptions {
  std::vector<std::string> paths;
  std::string size = "4GiB";
  std::string block_size = "1MiB";
  uint32_t queue_depth = 32;
  uint32_t num_rings = 1;
  std::string chunk = "64MiB";
  uint32_t in_flight = 4;
  bool buffered = false;
  bool no_fixed_buffers = false;
  bool sweep = false;
  std::string sweep_size = "1GiB";
  bool json = false;
  uint32_t repeat = 1;
  bool store_first = false;
};

struct Config {
  uint64_t num_bytes = 0;
  uint32_t block_size_bytes = 0;
  uint32_t queue_depth = 0;
};

struct Result {
  Config config;
  double write_gb_per_second = 0, read_gb_per_second = 0;
  double raw_write_gb_per_second = 0, raw_read_gb_per_second = 0;
  bool fixed_buffers = false;
  std::string fixed_buffers_reason;
  bool files_registered = false;
  // CPU time of the whole process (all threads) per pass direction pair.
  double cpu_seconds = 0, raw_cpu_seconds = 0;
};

// Process CPU seconds (user + system, all threads).
double ProcessCpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

double Seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Writes then reads `config.num_bytes` through a fresh store: tensors of
// `chunk` bytes, `in_flight` transfers outstanding (reads ahead, writes behind).
Status RunStore(const NvmeBenchOptions& opt, const Config& config, uint64_t chunk, Result* out) {
  offload::StateStoreOptions so;
  so.directories = opt.paths;
  so.run_id = "bench-nvme-" + offload::MakeRunId();
  so.block_size_bytes = config.block_size_bytes;
  so.queue_depth = config.queue_depth;
  so.num_rings = opt.num_rings;
  so.io_mode = opt.buffered ? offload::IoMode::kBuffered : offload::IoMode::kDirect;
  so.spare_bytes_per_directory =
      config.block_size_bytes;  // only first writes: no rewrites to cover
  std::vector<offload::TensorSpec> tensors;
  for (uint64_t at = 0, i = 0; at < config.num_bytes; at += chunk, ++i) {
    tensors.push_back({"bench." + std::to_string(i) + "/exp_avg", DType::kF32,
                       std::min(chunk, config.num_bytes - at)});
  }
  TF_ASSIGN_OR_RETURN(std::unique_ptr<offload::StateStore> store,
                      offload::StateStore::Create(so, tensors));
  uint32_t slots = std::max<uint32_t>(1, std::min<uint32_t>(opt.in_flight, tensors.size()));
  std::vector<AlignedBuffer> buffers;
  std::vector<iovec> iov;
  for (uint32_t s = 0; s < slots; ++s) {
    TF_ASSIGN_OR_RETURN(AlignedBuffer b, AlignedBuffer::Allocate(chunk));
    for (size_t j = 0; j < b.num_bytes(); j += 64)
      b.data()[j] = static_cast<uint8_t>(s * 31 + j / 64);
    iov.push_back({b.data(), b.num_bytes()});
    buffers.push_back(std::move(b));
  }
  if (!opt.no_fixed_buffers) {
    // A refusal (memlock) is reported in the results, not fatal.
    (void)store->RegisterBuffers(iov);
  }
  std::vector<offload::IoTicket> tickets(slots);
  auto pass = [&](bool write) -> StatusOr<double> {
    auto t0 = Clock::now();
    for (size_t i = 0; i < tensors.size(); ++i) {
      uint32_t s = static_cast<uint32_t>(i % slots);
      TF_RETURN_IF_ERROR(tickets[s].Wait());
      uint8_t* buf = buffers[s].data();
      StatusOr<offload::IoTicket> t =
          write ? store->WriteAsync(static_cast<offload::TensorId>(i), buf, 0, tensors[i].num_bytes)
                : store->ReadAsync(static_cast<offload::TensorId>(i), buf, 0, tensors[i].num_bytes);
      if (!t.ok()) return t.status();
      tickets[s] = *t;
    }
    for (auto& t : tickets) TF_RETURN_IF_ERROR(t.Wait());
    return Seconds(t0);
  };
  double cpu0 = ProcessCpuSeconds();
  TF_ASSIGN_OR_RETURN(double write_s, pass(/*write=*/true));
  TF_ASSIGN_OR_RETURN(double read_s, pass(/*write=*/false));
  out->cpu_seconds = ProcessCpuSeconds() - cpu0;
  // The store verified every block's CRC32C; check the bytes landed where they belong too.
  for (uint32_t s = 0; s < slots; ++s) {
    for (size_t j = 0; j < tensors[s].num_bytes; j += 64) {
      if (buffers[s].data()[j] != static_cast<uint8_t>(s * 31 + j / 64)) {
        return InternalError("bench nvme: data read back differs from what was written (slot " +
                             std::to_string(s) + ", byte " + std::to_string(j) + ")");
      }
    }
  }
  offload::StateStoreStats st = store->stats();
  out->write_gb_per_second = static_cast<double>(config.num_bytes) / write_s / 1e9;
  out->read_gb_per_second = static_cast<double>(config.num_bytes) / read_s / 1e9;
  out->fixed_buffers = st.engine.fixed_buffers_registered;
  out->fixed_buffers_reason =
      opt.no_fixed_buffers ? "disabled by --no-fixed-buffers" : st.engine.fixed_buffers_reason;
  out->files_registered = st.engine.files_registered;
  return store->Close();
}

StatusOr<Result> RunConfigOnce(const NvmeBenchOptions& opt, const Config& config,
                               uint64_t chunk_hint, bool store_first);

// One raw run and one store run, alternated `repeat` times; keeps each
// side's best (the run least disturbed by other processes on the machine).
StatusOr<Result> RunConfig(const NvmeBenchOptions& opt, const Config& config, uint64_t chunk_hint,
                           std::vector<Result>* runs = nullptr) {
  Result best;
  for (uint32_t i = 0; i < std::max<uint32_t>(1, opt.repeat); ++i) {
    TF_ASSIGN_OR_RETURN(Result r,
                        RunConfigOnce(opt, config, chunk_hint, opt.store_first != (i % 2 == 1)));
    if (runs != nullptr) runs->push_back(r);
    if (i == 0) {
      best = r;
      continue;
    }
    best.write_gb_per_second = std::max(best.write_gb_per_second, r.write_gb_per_second);
    best.read_gb_per_second = std::max(best.read_gb_per_second, r.read_gb_per_second);
    best.raw_write_gb_per_second =
        std::max(best.raw_write_gb_per_second, r.raw_write_gb_per_second);
    best.raw_read_gb_per_second = std::max(best.raw_read_gb_per_second, r.raw_read_gb_per_second);
    best.cpu_seconds = std::min(best.cpu_seconds, r.cpu_seconds);
    best.raw_cpu_seconds = std::min(best.raw_cpu_seconds, r.raw_cpu_seconds);
  }
  return best;
}

StatusOr<Result> RunConfigOnce(const NvmeBenchOptions& opt, const Config& config,
                               uint64_t chunk_hint, bool store_first) {
  Result r;
  r.config = config;
  uint64_t chunk = std::max<uint64_t>(offload::RoundUp(chunk_hint, config.block_size_bytes),
                                      config.block_size_bytes);
  offload::RawIoProbeOptions po;
  po.directory = opt.paths[0];
  po.num_bytes = config.num_bytes;
  po.block_size_bytes = config.block_size_bytes;
  po.queue_depth = config.queue_depth;
  po.io_mode = opt.buffered ? offload::IoMode::kBuffered : offload::IoMode::kDirect;
  auto raw_run = [&]() -> Status {
    double cpu0 = ProcessCpuSeconds();
    TF_ASSIGN_OR_RETURN(offload::RawIoProbeResult raw, offload::RunRawIoProbe(po));
    r.raw_cpu_seconds = ProcessCpuSeconds() - cpu0;  // includes the probe's small setup
    r.raw_write_gb_per_second = raw.write_gb_per_second;
    r.raw_read_gb_per_second = raw.read_gb_per_second;
    return Status::Ok();
  };
  // The drive may still be flushing what the first run wrote while the
  // second runs; alternating which goes first keeps that from favouring one.
  if (store_first) {
    TF_RETURN_IF_ERROR(RunStore(opt, config, chunk, &r));
    TF_RETURN_IF_ERROR(raw_run());
  } else {
    TF_RETURN_IF_ERROR(raw_run());
    TF_RETURN_IF_ERROR(RunStore(opt, config, chunk, &r));
  }
  return r;
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

nlohmann::json ToJson(const Result& r) {
  return {{"size_bytes", r.config.num_bytes},
          {"block_size_bytes", r.config.block_size_bytes},
          {"queue_depth", r.config.queue_depth},
          {"write_gb_per_second", r.write_gb_per_second},
          {"read_gb_per_second", r.read_gb_per_second},
          {"raw_write_gb_per_second", r.raw_write_gb_per_second},
          {"raw_read_gb_per_second", r.raw_read_gb_per_second},
          {"write_ratio", r.write_gb_per_second / r.raw_write_gb_per_second},
          {"read_ratio", r.read_gb_per_second / r.raw_read_gb_per_second},
          {"cpu_seconds", r.cpu_seconds},
          {"raw_cpu_seconds", r.raw_cpu_seconds}};
}

void PrintRow(const Result& r) {
  std::printf("%10s %5u %11.2f %11.2f %7.1f%% %11.2f %11.2f %7.1f%%\n",
              FormatBytes(r.config.block_size_bytes).c_str(), r.config.queue_depth,
              r.write_gb_per_second, r.raw_write_gb_per_second,
              100 * r.write_gb_per_second / r.raw_write_gb_per_second, r.read_gb_per_second,
              r.raw_read_gb_per_second, 100 * r.read_gb_per_second / r.raw_read_gb_per_second);
}

Status RunNvmeBench(const NvmeBenchOptions& opt) {
  if (opt.paths.empty())
    return InvalidArgumentError("--path is required (a directory on the drive to measure)");
  TF_ASSIGN_OR_RETURN(uint64_t num_bytes, ParseByteSize(opt.size));
  TF_ASSIGN_OR_RETURN(uint64_t block, ParseByteSize(opt.block_size));
  TF_ASSIGN_OR_RETURN(uint64_t chunk, ParseByteSize(opt.chunk));
  TF_ASSIGN_OR_RETURN(uint64_t sweep_bytes, ParseByteSize(opt.sweep_size));
  if (block == 0 || block % 4096 != 0 || block > (256u << 20)) {
    return InvalidArgumentError("--block-size must be a multiple of 4 KiB up to 256 MiB, got " +
                                std::to_string(block) + " bytes");
  }
  // The block size travels as uint32_t: narrowed only through a check, never silently.
  TF_ASSIGN_OR_RETURN(const uint32_t block32, CheckedNarrow<uint32_t>(block, "--block-size"));
  // Rounding a size up to whole blocks must not wrap to a small number.
  constexpr uint64_t kMaxBenchBytes = uint64_t{1} << 50;  // 1 PiB
  for (auto [flag, value] : {std::pair<const char*, uint64_t>{"--size", num_bytes},
                             {"--chunk", chunk},
                             {"--sweep-size", sweep_bytes}}) {
    if (value > kMaxBenchBytes) {
      return InvalidArgumentError(std::string(flag) + " is " + std::to_string(value) +
                                  " bytes, more than the 1 PiB a benchmark can use");
    }
  }
  if (num_bytes < block) return InvalidArgumentError("--size must be at least one block");
  if (opt.in_flight < 1) return InvalidArgumentError("--in-flight must be at least 1");

  Config main_config{offload::RoundUp(num_bytes, block), block32, opt.queue_depth};
  std::vector<Result> main_runs;
  TF_ASSIGN_OR_RETURN(Result main, RunConfig(opt, main_config, chunk, &main_runs));

  std::vector<Result> sweep;
  const Result* best = nullptr;
  if (opt.sweep) {
    for (uint32_t bs : {256u << 10, 1u << 20, 4u << 20}) {
      for (uint32_t qd : {8u, 32u, 64u}) {
        Config c{offload::RoundUp(sweep_bytes, bs), bs, qd};
        TF_ASSIGN_OR_RETURN(Result r, RunConfig(opt, c, chunk));
        sweep.push_back(r);
      }
    }
    // Best = least time to read and write the same bytes through the store.
    auto time_of = [](const Result& r) {
      return 1 / r.write_gb_per_second + 1 / r.read_gb_per_second;
    };
    best = &*std::min_element(sweep.begin(), sweep.end(), [&](const Result& a, const Result& b) {
      return time_of(a) < time_of(b);
    });
  }
  double crc_hw = offload::Crc32cHardwareAvailable() ? MeasureCrc32c(true) : 0;
  double crc_sw = MeasureCrc32c(false);

  if (opt.json) {
    nlohmann::json j = ToJson(main);
    j["paths"] = opt.paths;
    j["io_mode"] = opt.buffered ? "buffered" : "direct";
    j["num_rings"] = opt.num_rings;
    j["chunk_bytes"] = chunk;
    j["in_flight"] = opt.in_flight;
    j["fixed_buffers"] = main.fixed_buffers;
    j["fixed_buffers_reason"] = main.fixed_buffers_reason;
    j["files_registered"] = main.files_registered;
    j["crc32c_hardware"] = offload::Crc32cHardwareAvailable();
    j["crc32c_gb_per_second"] = crc_hw > 0 ? crc_hw : crc_sw;
    j["crc32c_portable_gb_per_second"] = crc_sw;
    j["repeat"] = opt.repeat;
    if (opt.repeat > 1) {
      for (const Result& r : main_runs) j["runs"].push_back(ToJson(r));
    }
    if (opt.sweep) {
      for (const Result& r : sweep) j["sweep"].push_back(ToJson(r));
      j["recommended"] = {{"block_size_bytes", best->config.block_size_bytes},
                          {"queue_depth", best->config.queue_depth}};
    }
    std::printf("%s\n", j.dump(2).c_str());
    return Status::Ok();
  }
  std::printf("paths: ");
  for (const std::string& p : opt.paths) std::printf("%s ", p.c_str());
  std::printf("\nmode: %s, rings: %u, %s per transfer, %u in flight; fixed buffers: %s%s%s\n",
              opt.buffered ? "buffered (page cache)" : "O_DIRECT", opt.num_rings,
              FormatBytes(chunk).c_str(), opt.in_flight, main.fixed_buffers ? "yes" : "no",
              main.fixed_buffers ? "" : " - ", main.fixed_buffers_reason.c_str());
  std::printf("CRC32C: %.1f GB/s per core (%s), portable %.1f GB/s\n\n",
              crc_hw > 0 ? crc_hw : crc_sw, crc_hw > 0 ? "SSE4.2" : "portable", crc_sw);
  std::printf("%s each way; raw = plain io_uring loop, same block size and queue depth\n",
              FormatBytes(main.config.num_bytes).c_str());
  std::printf("%10s %5s %11s %11s %8s %11s %11s %8s\n", "block", "qd", "write GB/s", "raw write",
              "ratio", "read GB/s", "raw read", "ratio");
  if (opt.repeat > 1) {
    for (const Result& r : main_runs) PrintRow(r);
    std::printf("best of %u:\n", opt.repeat);
  }
  PrintRow(main);
  std::printf("CPU time: store %.2f s, raw loop %.2f s (write + read)\n", main.cpu_seconds,
              main.raw_cpu_seconds);
  if (opt.sweep) {
    std::printf("\nsweep, %s each way:\n", FormatBytes(sweep_bytes).c_str());
    std::printf("%10s %5s %11s %11s %8s %11s %11s %8s\n", "block", "qd", "write GB/s", "raw write",
                "ratio", "read GB/s", "raw read", "ratio");
    for (const Result& r : sweep) PrintRow(r);
    std::printf("\nrecommended: --block-size %s --queue-depth %u\n",
                FormatBytes(best->config.block_size_bytes).c_str(), best->config.queue_depth);
  }
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
  cmd->add_option("--size", opt->size, "Bytes written and read, e.g. 4GiB")->capture_default_str();
  cmd->add_option("--block-size", opt->block_size, "I/O and checksum block, e.g. 1MiB")
      ->capture_default_str();
  cmd->add_option("--queue-depth", opt->queue_depth, "Operations in flight per ring")
      ->capture_default_str();
  cmd->add_option("--rings", opt->num_rings, "io_uring rings (one thread each)")
      ->capture_default_str();
  cmd->add_option("--chunk", opt->chunk, "Bytes per store transfer (a sub-group)")
      ->capture_default_str();
  cmd->add_option("--in-flight", opt->in_flight,
                  "Store transfers outstanding (reads ahead, writes behind)")
      ->capture_default_str();
  cmd->add_flag(
      "--nvme-buffered,--buffered", opt->buffered,
      "Buffered I/O through the page cache (for file systems without O_DIRECT; reads may come "
      "from RAM)");
  cmd->add_flag("--no-fixed-buffers", opt->no_fixed_buffers,
                "Do not register buffers with the rings");
  cmd->add_flag("--sweep", opt->sweep,
                "Also try block sizes {256K,1M,4M} x queue depths {8,32,64}");
  cmd->add_option("--sweep-size", opt->sweep_size, "Bytes per sweep point")->capture_default_str();
  cmd->add_option("--repeat", opt->repeat,
                  "Alternate raw and store runs this many times and keep each side's best")
      ->capture_default_str();
  cmd->add_flag("--store-first", opt->store_first,
                "Run the store before the raw loop (repeats alternate the order either way)");
  cmd->add_flag("--json", opt->json, "Print one JSON object instead of a table");
  cmd->callback([opt, exit_code] {
    Status s = RunNvmeBench(*opt);
    if (!s.ok()) {
      std::fprintf(stderr, "tierflow bench nvme: %s\n", s.ToString().c_str());
      *exit_code = 1;
    }
  });
}

}  // namespace tierflow::cli
