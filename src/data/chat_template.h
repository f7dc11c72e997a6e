// Chat templates: how a conversation becomes the token sequence a chat model
// was tuned on, and which of its tokens are the assistant's (trained on).
//
// tierflow renders the families it trains natively rather than running Jinja:
//   llama3   Llama 3.x Instruct: <|begin_of_text|> then per message
//            <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT|trim<|eot_id|>;
//            from Llama 3.1 on (templates that say "Cutting Knowledge Date"),
//            the system message always comes first, as "Cutting Knowledge
//            Date: December 2023\nToday Date: DATE\n\n" + the system
//            content (DATE: the template's default, "26 Jul 2024"; Llama
//            3.2's template would take today's date, which would make the
//            same data render differently each day, so tierflow keeps the
//            default)
//   chatml   Qwen2/Qwen2.5: per message <|im_start|>ROLE\nCONTENT<|im_end|>\n,
//            with the template's default system prompt first when the
//            conversation has none (Qwen2.5: "You are Qwen, created by ...")
//   llama2   Llama 2 chat: <s>[INST] <<SYS>>\nSYSTEM\n<</SYS>>\n\nUSER [/INST]
//            ASSISTANT </s> per turn (roles must alternate user/assistant)
//   mistral  Mistral Instruct v0.3: <s>[INST] USER[/INST] ASSISTANT</s>...; as
//            in Mistral's own template, a system message is only shown with
//            the last user message, so in training data (which ends with the
//            assistant) it is dropped, and counted
// The output matches each model's tokenizer_config.json chat_template for
// conversations of system/user/assistant text messages (tested against
// Hugging Face's Jinja renderer). The template is detected from the chat
// template text the tokenizer ships; `tierflow train --chat-template NAME`
// overrides it.
//
// Trained tokens: each assistant message's content and the end-of-turn token
// after it (<|eot_id|>, <|im_end|>, </s>), so the model learns to stop; the
// role headers and everything else are prompt.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"
#include "tierflow/status.h"

namespace tierflow {

enum class ChatTemplateKind { kLlama3, kChatMl, kLlama2, kMistral };

// "llama3", "chatml", "llama2", "mistral". Errors: InvalidArgument listing them.
StatusOr<ChatTemplateKind> ParseChatTemplateKind(std::string_view name);
std::string_view ChatTemplateKindName(ChatTemplateKind kind);

struct ChatTemplate {
  ChatTemplateKind kind = ChatTemplateKind::kLlama3;
  // chatml: the system prompt rendered when a conversation has none ("" =
  // none).
  std::string default_system;
  // llama3 from 3.1 on: the "Today Date" of the system preamble; "" = no
  // preamble (Llama 3.0).
  std::string llama3_date;
};

// The family's template with no default system prompt and no Llama 3.1
// preamble (what --chat-template NAME gives when the tokenizer's own template
// is of another family or absent).
inline ChatTemplate TemplateOfKind(ChatTemplateKind kind) {
  ChatTemplate t;
  t.kind = kind;
  return t;
}

// Recognizes the family of a tokenizer's Jinja chat template by its markers.
// Errors: NotFound when `jinja` is empty; InvalidArgument when it is none of
// the four (both name the --chat-template choices).
StatusOr<ChatTemplate> DetectChatTemplate(std::string_view jinja);

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

// A rendered sequence: parts in order, each either text or one token id, and
// whether it is trained on.
struct RenderedPart {
  std::string text;
  int32_t token = -1;  // >= 0: this token instead of text
  bool trained = false;
};

struct RenderStats {
  int64_t dropped_system_messages = 0;  // mistral: system messages the template does not show
};

// Renders `messages` with `tmpl`; special tokens are looked up in `tokenizer`.
// Errors: InvalidArgument for an unknown role, no assistant message, an
// order the template forbids (llama2/mistral: alternating user/assistant
// after an optional leading system), or a special token the tokenizer lacks
// (naming it and the template).
StatusOr<std::vector<RenderedPart>> RenderChat(const ChatTemplate& tmpl,
                                               const std::vector<ChatMessage>& messages,
                                               const Tokenizer& tokenizer, RenderStats* stats);

}  // namespace tierflow
