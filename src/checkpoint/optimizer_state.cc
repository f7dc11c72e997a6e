// Reading a checkpoint's optimizer state in either layout (optimizer_state.h).
#include "checkpoint/optimizer_state.h"

#include <set>

#include "checkpoint/checkpoint_files.h"
#include "io/json_util.h"
#include "io/safetensors_reader.h"
#include "offload/swap_reader.h"

namespace tierflow {

std::string OptimizerUnitFileName(const PathComponent& unit) {
  return "optimizer/" + unit.str() + ".safetensors";
}

std::string OptimizerSwapTensorName(const std::string& unit, const std::string& array) {
  return unit + "/" + array;
}

namespace {

Status CheckUnitRange(const CheckpointOptimizerState::Unit& unit, uint64_t offset, uint64_t count) {
  if (offset > unit.num_params || count > unit.num_params - offset) {
    return InvalidArgumentError("optimizer state of unit '" + unit.name.str() + "': parameters [" +
                                std::to_string(offset) + ", +" + std::to_string(count) +
                                ") are outside its " + std::to_string(unit.num_params));
  }
  return Status::Ok();
}

class HostOptimizerState : public CheckpointOptimizerState {
 protected:
  Status ReadArrayRange(size_t u, const char* array, uint64_t offset, uint64_t count,
                        float* out) const override {
    const Unit& unit = units_.at(u);
    // The unit's file stays open across its ranges (a resume reads it sub-group by sub-group).
    if (open_unit_ != u || reader_ == nullptr) {
      reader_.reset();
      TF_ASSIGN_OR_RETURN(reader_,
                          SafetensorsReader::Open(dir_ + "/" + OptimizerUnitFileName(unit.name)));
      open_unit_ = u;
    }
    const SafetensorsTensorInfo* t = reader_->Find(array);
    if (t == nullptr || t->dtype != DType::kF32 || t->num_elements != unit.num_params) {
      return DataLossError(reader_->path() + ": no fp32 tensor '" + array + "' of " +
                           std::to_string(unit.num_params) + " elements");
    }
    return reader_->ReadRawRange(*t, offset * 4, out, count * 4);
  }

 private:
  mutable size_t open_unit_ = SIZE_MAX;
  mutable std::unique_ptr<SafetensorsReader> reader_;
};

class NvmeOptimizerState : public CheckpointOptimizerState {
 public:
  std::unique_ptr<offload::SwapSetReader> reader_;

 protected:
  Status ReadArrayRange(size_t u, const char* array, uint64_t offset, uint64_t count,
                        float* out) const override {
    return reader_->ReadRange(OptimizerSwapTensorName(units_.at(u).name, array), offset * 4, out,
                              count * 4);
  }
};

}  // namespace

Status CheckpointOptimizerState::ReadUnitRange(size_t u, uint64_t offset, uint64_t count,
                                               float* master, float* exp_avg,
                                               float* exp_avg_sq) const {
  TF_RETURN_IF_ERROR(CheckUnitRange(units_.at(u), offset, count));
  const std::pair<const char*, float*> arrays[] = {
      {"master", master}, {"exp_avg", exp_avg}, {"exp_avg_sq", exp_avg_sq}};
  for (const auto& [name, out] : arrays) {
    TF_RETURN_IF_ERROR(ReadArrayRange(u, name, offset, count, out));
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<CheckpointOptimizerState>> CheckpointOptimizerState::Open(
    const std::string& checkpoint_dir) {
  TF_ASSIGN_OR_RETURN(nlohmann::json doc, ReadCheckpointState(checkpoint_dir));
  const std::string state_path = checkpoint_dir + "/trainer_state.json";
  TF_ASSIGN_OR_RETURN(CheckpointLayout layout, ParseCheckpointLayout(doc, state_path));
  std::unique_ptr<CheckpointOptimizerState> out;
  NvmeOptimizerState* nvme = nullptr;
  if (layout.layout == OffloadPlacement::kNvme) {
    auto n = std::make_unique<NvmeOptimizerState>();
    TF_ASSIGN_OR_RETURN(n->reader_, offload::SwapSetReader::Open(layout.swap_set.directories,
                                                                 layout.swap_set.run_id));
    nvme = n.get();
    out = std::move(n);
  } else {
    out = std::make_unique<HostOptimizerState>();
  }
  out->dir_ = checkpoint_dir;
  out->layout_ = layout.layout;
  out->swap_set_ = std::move(layout.swap_set);
  TF_ASSIGN_OR_RETURN(CheckpointState counters, ParseTrainerState(doc, state_path));
  out->step_ = counters.step;
  const nlohmann::json* units = nullptr;
  TF_RETURN_IF_ERROR(GetJsonArray(doc, "units", state_path, &units));
  std::set<std::string> seen;
  // Callers allocate num_params floats per array on the strength of this
  // entry, so it is bounded here by what the checkpoint's own files hold:
  // 12 bytes per parameter (three fp32 arrays) within the unit's file, or
  // exactly 4 per array tensor of the swap set, all within its files' sizes.
  uint64_t total_state_bytes = 0;
  for (size_t i = 0; i < units->size(); ++i) {
    const std::string where = state_path + ": units[" + std::to_string(i) + "]";
    const nlohmann::json& u = (*units)[i];
    std::string name;
    uint64_t num_params = 0;
    TF_RETURN_IF_ERROR(GetJsonString(u, "name", where, &name));
    TF_RETURN_IF_ERROR(GetJsonUint64(u, "num_params", where, &num_params));
    auto checked = PathComponent::Parse(name, where + ".name");
    if (!checked.ok()) return DataLossError(checked.status().message());
    if (!seen.insert(name).second) {
      return DataLossError(where + ".name " + QuotedExcerpt(name) + " appears twice");
    }
    if (num_params > UINT64_MAX / 12) {
      return DataLossError(where + ".num_params " + std::to_string(num_params) +
                           " is more than any file can hold");
    }
    const uint64_t unit_bytes = num_params * 12;
    if (nvme == nullptr) {
      const std::string rel = OptimizerUnitFileName(*checked);
      auto parts = SplitInsidePath(rel, where + ".name");
      if (!parts.ok()) return DataLossError(parts.status().message());
      auto size = RegularFileSizeInside(checkpoint_dir, *parts);
      if (!size.ok()) return size.status();
      if (*size < unit_bytes) {
        return DataLossError(where + ".num_params " + std::to_string(num_params) + " needs " +
                             std::to_string(unit_bytes) + " bytes, but " + checkpoint_dir + "/" +
                             rel + " is only " + std::to_string(*size) + " bytes");
      }
      // The file's three arrays hold exactly num_params floats each (its
      // header only; the data is read, and checksummed, by who needs it).
      TF_ASSIGN_OR_RETURN(auto reader, SafetensorsReader::Open(checkpoint_dir + "/" + rel));
      for (const char* array : {"master", "exp_avg", "exp_avg_sq"}) {
        const SafetensorsTensorInfo* t = reader->Find(array);
        if (t == nullptr || t->dtype != DType::kF32 || t->num_elements != num_params) {
          return DataLossError(checkpoint_dir + "/" + rel + ": tensor '" + array +
                               (t == nullptr ? "' is missing"
                                             : "' is not F32 of " + std::to_string(num_params) +
                                                   " elements, as " + where + ".num_params says"));
        }
      }
    } else {
      const CheckpointSwapSet& set = out->swap_set_;
      for (const char* array : {"master", "exp_avg", "exp_avg_sq"}) {
        const std::string tensor = OptimizerSwapTensorName(name, array);
        const offload::SwapTensorEntry* t = nvme->reader_->Find(tensor);
        if (t == nullptr || t->num_bytes != num_params * 4) {
          return DataLossError(
              "swap set " + set.run_id + " (" + set.directories[0] + "): tensor " +
              QuotedExcerpt(tensor) +
              (t == nullptr ? " is missing"
                            : " has the wrong size (" + std::to_string(t->num_bytes) + " bytes; " +
                                  where + ".num_params " + std::to_string(num_params) + " needs " +
                                  std::to_string(num_params * 4) + ")"));
        }
      }
      if (unit_bytes > UINT64_MAX - total_state_bytes) {
        return DataLossError(where +
                             ".num_params: the units' state is more than any file can hold");
      }
      total_state_bytes += unit_bytes;
    }
    out->units_.push_back({std::move(checked).value(), num_params});
  }
  if (nvme != nullptr) {
    uint64_t file_bytes = 0;
    for (const auto& f : nvme->reader_->files()) file_bytes += f->file_bytes();
    if (total_state_bytes > file_bytes) {
      return DataLossError(state_path + ": its units need " + std::to_string(total_state_bytes) +
                           " bytes of optimizer state, but the files of swap set " +
                           out->swap_set_.run_id + " hold only " + std::to_string(file_bytes));
    }
  }
  out->state_ = std::move(doc);
  return out;
}

}  // namespace tierflow
