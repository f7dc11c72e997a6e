// Builds the ParamLayout from ParameterGroups: unit sizes, per-tensor offsets,
// and the named offsets of one block (found by the tensor names' suffixes, so
// the layout and the HF name list can never disagree).
#include "model/param_layout.h"

#include <string>
#include <utility>

namespace tierflow {
namespace {

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Sets the LayerOffsets field whose suffix the block tensor's name carries.
Status PlaceLayerTensor(ModelFamily family, const TensorSlot& slot, LayerOffsets& o) {
  struct Entry {
    std::string_view suffix;
    int64_t LayerOffsets::*field;
  };
  static constexpr Entry kGpt2[] = {
      {".ln_1.weight", &LayerOffsets::norm1_w},      {".ln_1.bias", &LayerOffsets::norm1_b},
      {".attn.c_attn.weight", &LayerOffsets::qkv_w}, {".attn.c_attn.bias", &LayerOffsets::qkv_b},
      {".attn.c_proj.weight", &LayerOffsets::o_w},   {".attn.c_proj.bias", &LayerOffsets::o_b},
      {".ln_2.weight", &LayerOffsets::norm2_w},      {".ln_2.bias", &LayerOffsets::norm2_b},
      {".mlp.c_fc.weight", &LayerOffsets::fc_w},     {".mlp.c_fc.bias", &LayerOffsets::fc_b},
      {".mlp.c_proj.weight", &LayerOffsets::down_w}, {".mlp.c_proj.bias", &LayerOffsets::down_b},
  };
  static constexpr Entry kLlama[] = {
      {".input_layernorm.weight", &LayerOffsets::norm1_w},
      {".input_layernorm.bias", &LayerOffsets::norm1_b},
      {".self_attn.q_proj.weight", &LayerOffsets::q_w},
      {".self_attn.q_proj.bias", &LayerOffsets::q_b},
      {".self_attn.k_proj.weight", &LayerOffsets::k_w},
      {".self_attn.k_proj.bias", &LayerOffsets::k_b},
      {".self_attn.v_proj.weight", &LayerOffsets::v_w},
      {".self_attn.v_proj.bias", &LayerOffsets::v_b},
      {".self_attn.o_proj.weight", &LayerOffsets::o_w},
      {".self_attn.o_proj.bias", &LayerOffsets::o_b},
      {".post_attention_layernorm.weight", &LayerOffsets::norm2_w},
      {".post_attention_layernorm.bias", &LayerOffsets::norm2_b},
      {".mlp.gate_proj.weight", &LayerOffsets::gate_w},
      {".mlp.gate_proj.bias", &LayerOffsets::gate_b},
      {".mlp.up_proj.weight", &LayerOffsets::up_w},
      {".mlp.up_proj.bias", &LayerOffsets::up_b},
      {".mlp.down_proj.weight", &LayerOffsets::down_w},
      {".mlp.down_proj.bias", &LayerOffsets::down_b},
  };
  const auto place = [&](const auto& table) -> bool {
    for (const Entry& e : table) {
      if (EndsWith(slot.tensor.name, e.suffix)) {
        o.*e.field = slot.offset;
        return true;
      }
    }
    return false;
  };
  const bool ok = family == ModelFamily::kGpt2 ? place(kGpt2) : place(kLlama);
  if (!ok) {
    return UnimplementedError("parameter layout: block tensor '" + slot.tensor.name +
                              "' has no place in the " + std::string(ModelFamilyName(family)) +
                              " forward");
  }
  return Status::Ok();
}

}  // namespace

const TensorSlot* ParamLayout::Find(std::string_view name) const {
  for (const auto& unit : tensors) {
    for (const TensorSlot& slot : unit) {
      if (slot.tensor.name == name) return &slot;
    }
  }
  return nullptr;
}

StatusOr<ParamLayout> MakeParamLayout(const ModelConfig& config) {
  TF_RETURN_IF_ERROR(ValidateModelConfig(config));
  ParamLayout layout;
  layout.config = config;
  std::vector<ParamGroup> groups = ParameterGroups(config);
  layout.unit_offsets.push_back(0);
  for (size_t u = 0; u < groups.size(); ++u) {
    ParamGroup& group = groups[u];
    UnitInfo info{group.name, static_cast<uint64_t>(group.num_params)};
    std::vector<TensorSlot> slots;
    int64_t offset = 0;
    for (ParamTensor& t : group.tensors) {
      const int64_t n = t.num_elements;
      info.tensor_params.push_back(static_cast<uint64_t>(n));
      slots.push_back(TensorSlot{std::move(t), static_cast<int>(u), offset});
      offset += n;
    }
    layout.units.push_back(std::move(info));
    layout.tensors.push_back(std::move(slots));
    layout.total_params += group.num_params;
    layout.unit_offsets.push_back(layout.total_params);
  }

  const bool gpt2 = config.family == ModelFamily::kGpt2;
  for (const TensorSlot& s : layout.tensors[0]) {
    if (EndsWith(s.tensor.name, "wpe.weight")) {
      layout.embedding.wpe = s.offset;
    } else {
      layout.embedding.wte = s.offset;
    }
  }
  if (config.n_layers > 0) {
    for (const TensorSlot& s : layout.tensors[1]) {
      TF_RETURN_IF_ERROR(PlaceLayerTensor(config.family, s, layout.layer));
    }
  }
  for (const TensorSlot& s : layout.tensors.back()) {
    if (s.tensor.name == "lm_head.weight") {
      layout.head.lm_head = s.offset;
    } else if (EndsWith(s.tensor.name, ".bias")) {
      layout.head.norm_b = s.offset;
    } else {
      layout.head.norm_w = s.offset;
    }
  }
  // Every block needs these; a config without them cannot run.
  const LayerOffsets& o = layout.layer;
  const bool complete =
      o.norm1_w >= 0 && o.norm2_w >= 0 && o.o_w >= 0 && o.down_w >= 0 &&
      (gpt2 ? (o.qkv_w >= 0 && o.fc_w >= 0)
            : (o.q_w >= 0 && o.k_w >= 0 && o.v_w >= 0 && o.gate_w >= 0 && o.up_w >= 0));
  if (!complete || layout.embedding.wte < 0 || layout.head.norm_w < 0 ||
      (gpt2 && layout.embedding.wpe < 0)) {
    return InternalError("parameter layout of '" + config.name +
                         "': the tensor list lacks a tensor the forward needs");
  }
  return layout;
}

}  // namespace tierflow
