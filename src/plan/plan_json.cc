// PlanToJson: every number the planner computed, in bytes and seconds.
#include "plan/plan_json.h"

#include <algorithm>

namespace tierflow {
namespace {

nlohmann::json TierJson(const TierPlan& tier) {
  nlohmann::json components = nlohmann::json::object();
  for (const PlanComponent& c : tier.components) components[c.name] = c.bytes;
  return {{"total_bytes", tier.total_bytes()},
          {"capacity_bytes", tier.capacity_bytes},
          {"fits", tier.total_bytes() <= tier.capacity_bytes},
          {"components", components}};
}

// What was planned for: the model, the step, the hardware.
void AddSetup(const PlanInput& in, const Hardware& hw, const Plan& plan, nlohmann::json& j) {
  const ModelConfig& m = in.model;
  j["model"] = {{"name", m.name},
                {"family", std::string(ModelFamilyName(m.family))},
                {"model_type", m.model_type},
                {"layers", m.n_layers},
                {"d_model", m.d_model},
                {"heads", m.n_heads},
                {"kv_heads", m.n_kv_heads},
                {"d_ff", m.d_ff},
                {"vocab_size", m.vocab_size},
                {"tie_embeddings", m.tie_embeddings}};
  j["params"] = plan.params;
  j["input"] = {{"micro_batch", in.micro_batch},
                {"seq_len", in.seq_len},
                {"grad_accum", in.grad_accum},
                {"tokens_per_step", plan.tokens_per_step},
                {"dtype", std::string(DTypeName(in.dtype))},
                {"checkpointing", in.checkpointing},
                {"offload_activations", std::string(ChoiceName(in.offload_activations))},
                {"offload_gradients", std::string(ChoiceName(in.offload_gradients))},
                {"optimizer", std::string(OptimizerKindName(in.optimizer))},
                {"pipeline", in.pipeline == PipelineKind::kOverlapped ? "overlapped" : "sync"},
                {"offload_optimizer", std::string(OffloadPlacementName(in.offload))},
                {"offload_param", std::string(ParamOffloadName(in.param_offload))},
                {"param_slots", in.param_slots.has_value() ? nlohmann::json(*in.param_slots)
                                                           : nlohmann::json("auto")},
                {"state_bytes_per_param", plan.state_bytes_per_param}};
  const Bandwidths& bw = hw.bandwidths;
  j["hardware"] = {{"device", hw.device_description},
                   {"device_is_gpu", hw.device_is_gpu},
                   {"device_memory_bytes", hw.device_memory_bytes},
                   {"host_memory_bytes", hw.host_memory_bytes},
                   {"nvme_capacity_bytes", hw.nvme_capacity_bytes},
                   {"cores", hw.cores},
                   {"rates_source", bw.source},
                   {"h2d_gb_per_second", bw.h2d_gb_per_second},
                   {"d2h_gb_per_second", bw.d2h_gb_per_second},
                   {"host_memory_gb_per_second", bw.host_memory_gb_per_second},
                   {"adam_params_per_second", bw.adam_params_per_second},
                   {"nvme_read_gb_per_second", bw.nvme_read_gb_per_second},
                   {"nvme_write_gb_per_second", bw.nvme_write_gb_per_second},
                   {"device_tflops", bw.device_tflops},
                   {"device_efficiency", bw.device_efficiency},
                   {"intra_node_busbw_gb_per_second", bw.intra_node_busbw_gb_per_second},
                   {"inter_node_busbw_gb_per_second", bw.inter_node_busbw_gb_per_second}};
}

// Whether it fits: the verdict, the tiers, the activations.
void AddTiers(const Plan& plan, nlohmann::json& j) {
  j["feasible"] = plan.feasible;
  j["binding_constraint"] = plan.binding_constraint;
  j["explanation"] = plan.explanation;
  j["tiers"] = {{"device", TierJson(plan.device)},
                {"host", TierJson(plan.host)},
                {"nvme", TierJson(plan.nvme)}};
  j["tiers"]["host"]["pinned_bytes"] = plan.pinned_bytes;
  j["tiers"]["host"]["pageable_bytes"] =
      plan.host.total_bytes() - std::min(plan.pinned_bytes, plan.host.total_bytes());
  j["activations"] = {{"with_checkpointing_bytes", plan.activations_with_checkpointing_bytes},
                      {"without_checkpointing_bytes", plan.activations_without_checkpointing_bytes},
                      {"planned",
                       {{"residual", plan.activations.residual},
                        {"blocks", plan.activations.blocks},
                        {"final_norm", plan.activations.final_norm},
                        {"logits", plan.activations.logits},
                        {"inputs", plan.activations.inputs},
                        {"gradients", plan.activations.gradients},
                        {"total", plan.activations.total()}}}};
}

// Where the optimizer state and the weights go.
void AddPlacement(const ModelConfig& m, const Plan& plan, nlohmann::json& j) {
  const Placement& p = plan.placement;
  j["placement"] = {
      {"optimizer_state", p.where()},
      {"offload", std::string(OffloadPlacementName(p.offload()))},
      {"nvme_ratio", p.nvme_ratio},
      {"host_state_params", p.host_state_params},
      {"nvme_state_params", p.nvme_state_params},
      {"sub_group_params", p.sub_group_params},
      {"sub_group_cut", p.sub_group_cut == SubGroupCut::kSlices ? "slices" : "whole_tensors"},
      {"num_sub_groups", p.num_sub_groups},
      {"nvme_sub_groups", p.nvme_sub_groups},
      {"buffer_count", p.buffer_count},
      {"grad_buckets", p.grad_buckets},
      {"grad_bucket_params", p.grad_bucket_params},
      {"vocab_sliced", p.vocab_sliced},
      {"speculation_params", p.speculation_params},
      {"speculation_from", p.speculation_from},
      {"grad_transfer_dtype", std::string(DTypeName(plan.grad_transfer_dtype))},
      {"chosen_by", p.chosen_by_planner ? "planner" : "user"}};
  const ParamPlacement& w = p.params;
  j["placement"]["params"] = {{"where", std::string(ParamOffloadName(w.where))},
                              {"streamed_units", w.streamed_units},
                              {"units", m.n_layers + 2},
                              {"resident_params", w.resident_params},
                              {"streamed_params", w.streamed_params},
                              {"slot_params", w.slot_params},
                              {"device_slots", w.device_slots},
                              {"prefetch_depth", w.prefetch_depth},
                              {"nvme_staging", w.nvme_staging},
                              {"fetch_bytes_per_micro_batch", w.fetch_bytes_per_micro_batch},
                              {"chosen_by", w.chosen_by_planner ? "planner" : "user"}};
  j["placement"]["activations"] = {
      {"where", std::string(ChoiceName(p.activations))},
      {"host_bytes", plan.activations.host_checkpoints},
      {"transfer_bytes_per_micro_batch", plan.activations.checkpoint_transfer},
      {"mlp_tile_rows", p.mlp_tile_rows},
      {"chosen_by", p.activations_chosen ? "planner" : "user"}};
  const Plan::Gradients& g = plan.gradients;
  j["placement"]["gradients"] = {{"where", std::string(ChoiceName(p.gradients))},
                                 {"chosen_by", p.gradients_chosen ? "planner" : "user"},
                                 {"spill_slots", p.grad_spill_slots},
                                 {"host_bytes", g.host_bytes},
                                 {"nvme_bytes", g.nvme_bytes},
                                 {"nvme_write_bytes_per_step", g.nvme_write_bytes_per_step},
                                 {"nvme_read_bytes_per_step", g.nvme_read_bytes_per_step},
                                 {"nvme_seconds_per_step", g.nvme_seconds_per_step}};
}

// How fast: the stages, the step, and the advice.
void AddStepTime(const Plan& plan, nlohmann::json& j) {
  nlohmann::json stages = nlohmann::json::object();
  for (const StageTime& s : plan.stages) stages[s.name] = s.seconds;
  j["stages"] = stages;
  j["flops_per_step"] = plan.flops_per_step;
  j["predicted_step_seconds"] = plan.predicted_step_seconds;
  j["serial_step_seconds"] = plan.serial_step_seconds;
  j["tokens_per_second"] =
      plan.predicted_step_seconds > 0
          ? static_cast<double>(plan.tokens_per_step) / plan.predicted_step_seconds
          : 0.0;
  if (!plan.compute_bound.advice.empty()) {
    j["compute_bound"] = {{"grad_accum", plan.compute_bound.grad_accum},
                          {"tokens_per_step", plan.compute_bound.tokens_per_step},
                          {"step_seconds", plan.compute_bound.step_seconds},
                          {"advice", plan.compute_bound.advice}};
  }
}

// Data parallelism: the ranks, the collectives, and the scaling table.
void AddDataParallel(const PlanInput& in, const Plan& plan, nlohmann::json& j) {
  if (in.ranks() > 1) {
    const Plan::DataParallel& dp = plan.data_parallel;
    nlohmann::json points = nlohmann::json::array();
    for (const Plan::DataParallel::Point& pt : dp.scaling) {
      points.push_back({{"gpus_per_node", pt.gpus_per_node},
                        {"feasible", pt.feasible},
                        {"tokens_per_second", pt.tokens_per_second},
                        {"step_seconds", pt.step_seconds},
                        {"slowest_stage", pt.slowest},
                        {"slowest_seconds", pt.slowest_seconds},
                        {"binding_tier", pt.binding}});
    }
    j["data_parallel"] = {{"ranks", dp.ranks},
                          {"gpus_per_node", dp.gpus_per_node},
                          {"nodes", dp.nodes},
                          {"gpus_per_pcie_link", in.gpus_per_pcie_link},
                          {"rank_state_params", dp.rank_params},
                          {"reduce_scatter_seconds", dp.reduce_scatter_seconds},
                          {"all_gather_seconds", dp.all_gather_seconds},
                          {"collectives", in.device_collectives ? "device" : "host"},
                          {"interconnect", dp.interconnect},
                          {"tiers", "device: one GPU; host and nvme: one node, its ranks together"},
                          {"scaling", points},
                          {"scaling_advice", dp.scaling_advice}};
  }
}

}  // namespace

nlohmann::json PlanToJson(const PlanInput& in, const Hardware& hw, const Plan& plan,
                          const LargestModel* largest, const LongestContext* longest) {
  nlohmann::json j;
  AddSetup(in, hw, plan, j);
  AddTiers(plan, j);
  AddPlacement(in.model, plan, j);
  AddStepTime(plan, j);
  AddDataParallel(in, plan, j);
  if (largest != nullptr) {
    j["max_params"] = largest->params;
    j["max_model"] = largest->description;
  }
  if (longest != nullptr) {
    j["max_seq_len"] = {{"checkpoints_on_device", longest->on_device},
                        {"checkpoints_in_host_memory", longest->offloaded}};
  }
  return j;
}

}  // namespace tierflow
