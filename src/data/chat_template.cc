// The four chat templates of chat_template.h.
#include "data/chat_template.h"

#include <optional>

namespace tierflow {
namespace {

constexpr std::string_view kChoices = "llama3, chatml, llama2, mistral";

// Python's str.strip() / Jinja's trim: ASCII white space at both ends.
std::string Trim(std::string_view s) {
  const char* ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return "";
  const size_t e = s.find_last_not_of(ws);
  return std::string(s.substr(b, e - b + 1));
}

StatusOr<int32_t> Special(const Tokenizer& tokenizer, std::string_view text,
                          ChatTemplateKind kind) {
  std::optional<int32_t> id = tokenizer.TokenId(text);
  if (!id) {
    return InvalidArgumentError(
        "the " + std::string(ChatTemplateKindName(kind)) + " chat template needs the token \"" +
        std::string(text) + "\", which " + tokenizer.Describe() +
        " lacks; pick the model's template with --chat-template (" + std::string(kChoices) + ")");
  }
  return *id;
}

// The special token the template `kind` uses for `use` ("starts with a BOS
// token"), or an error saying the tokenizer names none.
StatusOr<int32_t> TemplateToken(const Tokenizer& tokenizer, ChatTemplateKind kind,
                                std::optional<int32_t> token, const char* use) {
  if (!token) {
    return InvalidArgumentError("the " + std::string(ChatTemplateKindName(kind)) +
                                " chat template " + use + ", but " + tokenizer.Describe() +
                                " names none");
  }
  return *token;
}

StatusOr<int32_t> Bos(const Tokenizer& tokenizer, ChatTemplateKind kind) {
  return TemplateToken(tokenizer, kind, tokenizer.bos_token(), "starts with a BOS token");
}

StatusOr<int32_t> Eos(const Tokenizer& tokenizer, ChatTemplateKind kind) {
  return TemplateToken(tokenizer, kind, tokenizer.eos_token(), "ends turns with the EOS token");
}

Status CheckRoles(const std::vector<ChatMessage>& messages) {
  bool assistant = false;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant") {
      return InvalidArgumentError("messages[" + std::to_string(i) + "].role is \"" + role +
                                  "\"; expected system, user or assistant");
    }
    assistant = assistant || role == "assistant";
  }
  if (!assistant) {
    return InvalidArgumentError(
        "the conversation has no assistant message, so nothing to train on; end "
        "each conversation with the assistant's reply");
  }
  return Status::Ok();
}

// llama2/mistral: optional system first, then user/assistant alternating from user.
// Returns the index of the first turn (1 after a system message, else 0).
StatusOr<size_t> FirstAlternatingTurn(const std::vector<ChatMessage>& messages,
                                      ChatTemplateKind kind) {
  const size_t first = messages.front().role == "system" ? 1 : 0;
  for (size_t i = first; i < messages.size(); ++i) {
    const bool want_user = (i - first) % 2 == 0;
    if ((messages[i].role == "user") != want_user) {
      return InvalidArgumentError(
          "messages[" + std::to_string(i) + "] is \"" + messages[i].role + "\": the " +
          std::string(ChatTemplateKindName(kind)) +
          " template needs user/assistant turns alternating from a user message (after an "
          "optional first system message)");
    }
  }
  return first;
}

// What the llama2 and mistral templates both take: the BOS and EOS tokens and
// the alternating turns (checked in that order).
struct InstConversation {
  int32_t bos = 0;
  int32_t eos = 0;
  size_t first = 0;         // the first user turn (FirstAlternatingTurn)
  bool has_system = false;  // messages[0] is a system message
};

StatusOr<InstConversation> CheckInstConversation(const Tokenizer& tokenizer,
                                                 const std::vector<ChatMessage>& messages,
                                                 ChatTemplateKind kind) {
  InstConversation c;
  TF_ASSIGN_OR_RETURN(c.bos, Bos(tokenizer, kind));
  TF_ASSIGN_OR_RETURN(c.eos, Eos(tokenizer, kind));
  TF_ASSIGN_OR_RETURN(c.first, FirstAlternatingTurn(messages, kind));
  c.has_system = c.first == 1;
  return c;
}

void Text(std::vector<RenderedPart>* out, std::string text, bool trained = false) {
  if (!text.empty()) out->push_back({std::move(text), -1, trained});
}
void Token(std::vector<RenderedPart>* out, int32_t id, bool trained = false) {
  out->push_back({"", id, trained});
}

}  // namespace

StatusOr<ChatTemplateKind> ParseChatTemplateKind(std::string_view name) {
  if (name == "llama3") return ChatTemplateKind::kLlama3;
  if (name == "chatml") return ChatTemplateKind::kChatMl;
  if (name == "llama2") return ChatTemplateKind::kLlama2;
  if (name == "mistral") return ChatTemplateKind::kMistral;
  return InvalidArgumentError("unknown chat template \"" + std::string(name) +
                              "\"; choose one of " + std::string(kChoices));
}

std::string_view ChatTemplateKindName(ChatTemplateKind kind) {
  switch (kind) {
    case ChatTemplateKind::kLlama3:
      return "llama3";
    case ChatTemplateKind::kChatMl:
      return "chatml";
    case ChatTemplateKind::kLlama2:
      return "llama2";
    case ChatTemplateKind::kMistral:
      return "mistral";
  }
  return "?";
}

StatusOr<ChatTemplate> DetectChatTemplate(std::string_view jinja) {
  if (jinja.empty()) {
    return NotFoundError("the tokenizer ships no chat template; name one with --chat-template (" +
                         std::string(kChoices) + ")");
  }
  ChatTemplate t;
  if (jinja.find("<|start_header_id|>") != std::string_view::npos) {
    t.kind = ChatTemplateKind::kLlama3;
    if (jinja.find("Cutting Knowledge Date") != std::string_view::npos) {
      // The template's default date: set date_string = "26 Jul 2024".
      t.llama3_date = "26 Jul 2024";
      constexpr std::string_view kDefault = "set date_string = \"";
      if (const size_t at = jinja.find(kDefault); at != std::string_view::npos) {
        const size_t begin = at + kDefault.size();
        const size_t end = jinja.find('"', begin);
        if (end != std::string_view::npos && end - begin <= 32) {
          t.llama3_date = std::string(jinja.substr(begin, end - begin));
        }
      }
    }
    return t;
  }
  if (jinja.find("<|im_start|>") != std::string_view::npos) {
    t.kind = ChatTemplateKind::kChatMl;
    // The default system prompt, written as a literal in the template:
    // '<|im_start|>system\nTEXT<|im_end|>\n'.
    constexpr std::string_view kOpen = "<|im_start|>system\\n";
    for (size_t at = jinja.find(kOpen); at != std::string_view::npos;
         at = jinja.find(kOpen, at + 1)) {
      const size_t begin = at + kOpen.size();
      const size_t end = jinja.find("<|im_end|>", begin);
      if (end == std::string_view::npos) break;
      const std::string_view literal = jinja.substr(begin, end - begin);
      if (literal.find_first_of("'\"+{}") == std::string_view::npos && !literal.empty()) {
        t.default_system = std::string(literal);
        break;
      }
    }
    return t;
  }
  if (jinja.find("[INST]") != std::string_view::npos) {
    t.kind = jinja.find("<<SYS>>") != std::string_view::npos ? ChatTemplateKind::kLlama2
                                                             : ChatTemplateKind::kMistral;
    return t;
  }
  return InvalidArgumentError(
      "the tokenizer's chat template is not one tierflow renders (it has none of the markers of "
      "Llama 3, ChatML, Llama 2 or Mistral); name the model's family with --chat-template (" +
      std::string(kChoices) + ")");
}

StatusOr<std::vector<RenderedPart>> RenderChat(const ChatTemplate& tmpl,
                                               const std::vector<ChatMessage>& messages,
                                               const Tokenizer& tokenizer, RenderStats* stats) {
  TF_RETURN_IF_ERROR(CheckRoles(messages));
  std::vector<RenderedPart> out;
  const ChatTemplateKind kind = tmpl.kind;
  switch (kind) {
    case ChatTemplateKind::kLlama3: {
      TF_ASSIGN_OR_RETURN(int32_t bos, Bos(tokenizer, kind));
      TF_ASSIGN_OR_RETURN(int32_t start, Special(tokenizer, "<|start_header_id|>", kind));
      TF_ASSIGN_OR_RETURN(int32_t end, Special(tokenizer, "<|end_header_id|>", kind));
      TF_ASSIGN_OR_RETURN(int32_t eot, Special(tokenizer, "<|eot_id|>", kind));
      Token(&out, bos);
      size_t first = 0;
      if (!tmpl.llama3_date.empty()) {
        // Llama 3.1+: the system turn, with its preamble, always first.
        const bool has_system = messages.front().role == "system";
        Token(&out, start);
        Text(&out, "system");
        Token(&out, end);
        Text(&out, "\n\nCutting Knowledge Date: December 2023\nToday Date: " + tmpl.llama3_date +
                       "\n\n" + (has_system ? Trim(messages.front().content) : std::string()));
        Token(&out, eot);
        first = has_system ? 1 : 0;
      }
      for (size_t i = first; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        const bool trained = m.role == "assistant";
        Token(&out, start);
        Text(&out, m.role);
        Token(&out, end);
        Text(&out, "\n\n");
        Text(&out, Trim(m.content), trained);
        Token(&out, eot, trained);
      }
      return out;
    }
    case ChatTemplateKind::kChatMl: {
      TF_ASSIGN_OR_RETURN(int32_t start, Special(tokenizer, "<|im_start|>", kind));
      TF_ASSIGN_OR_RETURN(int32_t end, Special(tokenizer, "<|im_end|>", kind));
      if (messages.front().role != "system" && !tmpl.default_system.empty()) {
        Token(&out, start);
        Text(&out, "system\n" + tmpl.default_system);
        Token(&out, end);
        Text(&out, "\n");
      }
      for (const ChatMessage& m : messages) {
        const bool trained = m.role == "assistant";
        Token(&out, start);
        Text(&out, m.role + "\n");
        Text(&out, m.content, trained);
        Token(&out, end, trained);
        Text(&out, "\n");
      }
      return out;
    }
    case ChatTemplateKind::kLlama2: {
      TF_ASSIGN_OR_RETURN(const InstConversation c,
                          CheckInstConversation(tokenizer, messages, kind));
      const auto [bos, eos, first, has_system] = c;
      for (size_t i = first; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        std::string content = m.content;
        if (i == first && has_system) {
          content = "<<SYS>>\n" + messages[0].content + "\n<</SYS>>\n\n" + content;
        }
        if (m.role == "user") {
          Token(&out, bos);
          Text(&out, "[INST] " + Trim(content) + " [/INST]");
        } else {
          Text(&out, " ");
          Text(&out, Trim(content) + " ", true);
          Token(&out, eos, true);
        }
      }
      return out;
    }
    case ChatTemplateKind::kMistral: {
      TF_ASSIGN_OR_RETURN(const InstConversation c,
                          CheckInstConversation(tokenizer, messages, kind));
      const auto [bos, eos, first, has_system] = c;
      Token(&out, bos);
      for (size_t i = first; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (m.role == "user") {
          const bool last = i + 1 == messages.size();
          if (last && has_system) {
            Text(&out, "[INST] " + messages[0].content + "\n\n" + m.content + "[/INST]");
          } else {
            Text(&out, "[INST] " + m.content + "[/INST]");
          }
        } else {
          Text(&out, " ");
          Text(&out, Trim(m.content), true);
          Token(&out, eos, true);
        }
      }
      if (has_system && messages.back().role != "user" && stats != nullptr) {
        ++stats->dropped_system_messages;
      }
      return out;
    }
  }
  return InternalError("unknown chat template kind");
}

}  // namespace tierflow
