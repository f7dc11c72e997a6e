// Reading and writing the profile's "nvme_store" settings.
#include "plan/nvme_profile.h"

#include <cstdint>
#include <utility>

#include "io/file_reader.h"
#include "io/json_reader.h"
#include "io/json_util.h"

namespace tierflow {
namespace {

constexpr char kChosenBy[] =
    "least time to write and then read the same bytes through the store (one setting serves "
    "both: the block size is the swap files' layout)";

}  // namespace

nlohmann::json NvmeStoreProfileToJson(const NvmeStoreProfile& p) {
  nlohmann::json j = {{"block_size_bytes", p.io.block_size_bytes},
                      {"queue_depth", p.io.queue_depth},
                      {"num_rings", p.io.num_rings},
                      {"in_flight", p.in_flight},
                      {"chosen_by", kChosenBy}};
  if (p.write_gb_per_second > 0) j["write_gb_per_second"] = p.write_gb_per_second;
  if (p.read_gb_per_second > 0) j["read_gb_per_second"] = p.read_gb_per_second;
  return j;
}

StatusOr<std::optional<NvmeStoreProfile>> NvmeStoreProfileFromJson(const nlohmann::json& j,
                                                                   std::string_view source) {
  const std::string label = "profile '" + std::string(source) + "'";
  const JsonReader reader(label);
  const nlohmann::json* section = JsonReader::Find(j, "nvme_store");
  if (section == nullptr) return std::optional<NvmeStoreProfile>();
  TF_RETURN_IF_ERROR(reader.Object(*section, "nvme_store"));
  NvmeStoreProfile p;
  struct Field {
    const char* name;
    int64_t max;
    uint32_t* out;
  };
  const Field fields[] = {
      {"block_size_bytes", kNvmeIoMaxBlockBytes, &p.io.block_size_bytes},
      {"queue_depth", kNvmeIoMaxQueueDepth, &p.io.queue_depth},
      {"num_rings", kNvmeIoMaxRings, &p.io.num_rings},
      {"in_flight", kMaxNvmeInFlight, &p.in_flight},
  };
  for (const Field& f : fields) {
    const std::string path = std::string("nvme_store.") + f.name;
    const nlohmann::json* v = JsonReader::Find(*section, f.name);
    if (v == nullptr) {
      return reader.Error(path, "missing; rerun `tierflow bench nvme --tune --profile FILE`");
    }
    int64_t n = 0;
    TF_RETURN_IF_ERROR(reader.Int(*v, path, 1, f.max, &n));
    *f.out = static_cast<uint32_t>(n);
  }
  TF_RETURN_IF_ERROR(ValidateNvmeIoSettings(p.io, label + ": nvme_store"));
  for (auto [name, out] :
       {std::pair<const char*, double*>{"write_gb_per_second", &p.write_gb_per_second},
        {"read_gb_per_second", &p.read_gb_per_second}}) {
    if (const nlohmann::json* v = JsonReader::Find(*section, name)) {
      TF_RETURN_IF_ERROR(reader.PositiveNumber(*v, std::string("nvme_store.") + name, out));
    }
  }
  return std::optional<NvmeStoreProfile>(p);
}

StatusOr<std::optional<NvmeStoreProfile>> LoadNvmeStoreProfile(const std::string& path) {
  // A profile is a few kilobytes; 1 MiB refuses a wrong path by name.
  auto text = ReadFileToString(path, 1u << 20);
  if (!text.ok()) return text.status().WithContext("hardware profile");
  nlohmann::json j;
  if (Status parsed = ParseJsonStrict(*text, "profile '" + path + "'", &j); !parsed.ok()) {
    return InvalidArgumentError(parsed.message());
  }
  if (!j.is_object()) return InvalidArgumentError("profile '" + path + "' must hold a JSON object");
  const nlohmann::json* version = JsonReader::Find(j, "version");
  if (version == nullptr || !version->is_number_integer() || *version != 1) {
    return JsonReader("profile '" + path + "'")
        .Error("version", "must be 1 (the schema is in docs/PLANNER.md)");
  }
  return NvmeStoreProfileFromJson(j, path);
}

}  // namespace tierflow
