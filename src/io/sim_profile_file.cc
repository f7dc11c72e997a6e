// Simulated GPU profiles from JSON files.
#include "io/sim_profile_file.h"

#include <string>

#include "io/file_reader.h"
#include "io/json_reader.h"
#include "io/json_util.h"

namespace tierflow {
namespace {

constexpr size_t kMaxProfileBytes = 64 << 10;

bool LooksLikePath(std::string_view text) {
  return text.find('/') != std::string_view::npos ||
         (text.size() > 5 && text.substr(text.size() - 5) == ".json");
}

StatusOr<SimProfile> ReadProfileFile(const std::string& path) {
  TF_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path, kMaxProfileBytes));
  nlohmann::json doc;
  Status parsed = ParseJsonStrict(text, path, &doc);
  if (!parsed.ok()) return InvalidArgumentError(parsed.message());
  const JsonReader r(path);
  TF_RETURN_IF_ERROR(r.Object(doc, "(top level)"));
  SimProfile p;
  const std::string stem = path.substr(path.find_last_of('/') + 1);
  p.name = stem.substr(0, stem.rfind(".json"));
  struct Field {
    const char* key;
    double* out;
    bool required;
  };
  const Field fields[] = {
      {"tensor_tflops", &p.tensor_tflops, true},
      {"vector_tflops", &p.vector_tflops, true},
      {"hbm_gb_per_s", &p.hbm_gb_per_s, true},
      {"link_gb_per_s", &p.link_gb_per_s, true},
      {"memory_gib", &p.memory_gib, true},
      {"tensor_efficiency", &p.tensor_efficiency, false},
      {"vector_efficiency", &p.vector_efficiency, false},
      {"hbm_efficiency", &p.hbm_efficiency, false},
      {"link_efficiency", &p.link_efficiency, false},
      {"launch_overhead_us", &p.launch_overhead_us, false},
  };
  for (const auto& [key, value] : doc.items()) {
    if (key == "name") {
      TF_RETURN_IF_ERROR(r.String(value, key, &p.name));
      continue;
    }
    const Field* field = nullptr;
    for (const Field& f : fields) {
      if (key == f.key) field = &f;
    }
    if (field == nullptr) {
      return r.Error(key,
                     "unknown key (a simulated GPU profile has name, tensor_tflops, "
                     "vector_tflops, hbm_gb_per_s, link_gb_per_s, memory_gib, the four "
                     "*_efficiency fractions and launch_overhead_us)");
    }
    TF_RETURN_IF_ERROR(r.Number(value, key, field->out));
  }
  for (const Field& f : fields) {
    if (f.required && JsonReader::Find(doc, f.key) == nullptr) {
      return r.Error(f.key, "missing (required)");
    }
  }
  Status valid = ValidateSimProfile(p);
  if (!valid.ok()) return InvalidArgumentError(path + ": " + valid.message());
  return p;
}

}  // namespace

StatusOr<SimProfile> ResolveSimProfile(std::string_view name_or_path) {
  StatusOr<SimProfile> builtin = FindBuiltinSimProfile(name_or_path);
  if (builtin.ok() || !LooksLikePath(name_or_path)) return builtin;
  return ReadProfileFile(std::string(name_or_path));
}

}  // namespace tierflow
