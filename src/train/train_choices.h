// The settings of `tierflow train` that take one of a fixed set of names, as
// enums with their name tables (common/named_choice.h): ChoiceName,
// ChoiceList and ParseChoice work on each.
#pragma once

#include <cstdint>

#include "common/named_choice.h"

namespace tierflow {

// optimizer: AdamW (decoupled weight decay) or Adam (L2 in the gradient).
enum class TrainOptimizer : uint8_t { kAdamW, kAdam };
// scheduler.type, DeepSpeed's names.
enum class LrScheduleType : uint8_t { kConstant, kWarmupLR, kWarmupDecayLR, kWarmupCosineLR };
// scheduler.warmup_type (DeepSpeed's default: log).
enum class WarmupType : uint8_t { kLog, kLinear };
// pipeline: the engine's step pipeline.
enum class TrainPipeline : uint8_t { kOverlapped, kSync };
// collectives: where several ranks sum the gradient (train/collectives_choice.h).
enum class TrainCollectives : uint8_t { kAuto, kHost, kDevice };
// final_save: what the run saves when its last step is done.
enum class FinalSave : uint8_t { kAll, kModel, kNone };
// truncation: instruction samples longer than seq_len.
enum class Truncation : uint8_t { kTruncate, kDrop };
// data_format: kByFileName ("") or a plain or instruction format.
enum class TrainDataFormat : uint8_t {
  kByFileName,
  kText,
  kJsonl,
  kTokens,
  kPromptCompletion,
  kAlpaca,
  kChat,
};
// token_dtype: kNone ("", text data) or a token file's element.
enum class TrainTokenDtype : uint8_t { kNone, kU16, kU32 };
// chat_template: kTokenizers ("", the tokenizer's own) or a named one.
enum class TrainChatTemplate : uint8_t { kTokenizers, kLlama3, kChatMl, kLlama2, kMistral };

// Instruction data (trained on responses only).
inline bool IsInstructionFormat(TrainDataFormat f) {
  return f == TrainDataFormat::kPromptCompletion || f == TrainDataFormat::kAlpaca ||
         f == TrainDataFormat::kChat;
}

template <>
struct ChoiceNames<TrainOptimizer> {
  static constexpr NamedChoice<TrainOptimizer> kTable[] = {
      {"adamw", TrainOptimizer::kAdamW},
      {"adam", TrainOptimizer::kAdam},
  };
};
template <>
struct ChoiceNames<LrScheduleType> {
  static constexpr NamedChoice<LrScheduleType> kTable[] = {
      {"constant", LrScheduleType::kConstant},
      {"WarmupLR", LrScheduleType::kWarmupLR},
      {"WarmupDecayLR", LrScheduleType::kWarmupDecayLR},
      {"WarmupCosineLR", LrScheduleType::kWarmupCosineLR},
  };
};
template <>
struct ChoiceNames<WarmupType> {
  static constexpr NamedChoice<WarmupType> kTable[] = {
      {"log", WarmupType::kLog},
      {"linear", WarmupType::kLinear},
  };
};
template <>
struct ChoiceNames<TrainPipeline> {
  static constexpr NamedChoice<TrainPipeline> kTable[] = {
      {"overlapped", TrainPipeline::kOverlapped},
      {"sync", TrainPipeline::kSync},
  };
};
template <>
struct ChoiceNames<TrainCollectives> {
  static constexpr NamedChoice<TrainCollectives> kTable[] = {
      {"auto", TrainCollectives::kAuto},
      {"host", TrainCollectives::kHost},
      {"device", TrainCollectives::kDevice},
  };
};
template <>
struct ChoiceNames<FinalSave> {
  static constexpr NamedChoice<FinalSave> kTable[] = {
      {"all", FinalSave::kAll},
      {"model", FinalSave::kModel},
      {"none", FinalSave::kNone},
  };
};
template <>
struct ChoiceNames<Truncation> {
  static constexpr NamedChoice<Truncation> kTable[] = {
      {"truncate", Truncation::kTruncate},
      {"drop", Truncation::kDrop},
  };
};
template <>
struct ChoiceNames<TrainDataFormat> {
  static constexpr NamedChoice<TrainDataFormat> kTable[] = {
      {"", TrainDataFormat::kByFileName},
      {"auto", TrainDataFormat::kByFileName},
      {"text", TrainDataFormat::kText},
      {"jsonl", TrainDataFormat::kJsonl},
      {"tokens", TrainDataFormat::kTokens},
      {"prompt-completion", TrainDataFormat::kPromptCompletion},
      {"alpaca", TrainDataFormat::kAlpaca},
      {"chat", TrainDataFormat::kChat},
  };
};
template <>
struct ChoiceNames<TrainTokenDtype> {
  static constexpr NamedChoice<TrainTokenDtype> kTable[] = {
      {"", TrainTokenDtype::kNone},
      {"u16", TrainTokenDtype::kU16},
      {"u32", TrainTokenDtype::kU32},
  };
};
template <>
struct ChoiceNames<TrainChatTemplate> {
  static constexpr NamedChoice<TrainChatTemplate> kTable[] = {
      {"", TrainChatTemplate::kTokenizers},     {"llama3", TrainChatTemplate::kLlama3},
      {"chatml", TrainChatTemplate::kChatMl},   {"llama2", TrainChatTemplate::kLlama2},
      {"mistral", TrainChatTemplate::kMistral},
  };
};

}  // namespace tierflow
