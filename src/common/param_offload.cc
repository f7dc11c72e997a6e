// ParamOffload names and parsing.
#include "tierflow/param_offload.h"

#include <string>

namespace tierflow {

std::string_view ParamOffloadName(ParamOffload where) {
  switch (where) {
    case ParamOffload::kAuto:
      return "auto";
    case ParamOffload::kNone:
      return "none";
    case ParamOffload::kHost:
      return "host";
    case ParamOffload::kNvme:
      return "nvme";
  }
  return "?";
}

StatusOr<ParamOffload> ParseParamOffload(std::string_view what, std::string_view text) {
  if (text == "auto") return ParamOffload::kAuto;
  if (text == "none" || text == "device" || text == "gpu") return ParamOffload::kNone;
  if (text == "host" || text == "cpu") return ParamOffload::kHost;
  if (text == "nvme") return ParamOffload::kNvme;
  return InvalidArgumentError(std::string(what) + ": unknown parameter placement '" +
                              std::string(text) +
                              "': use auto, none (weights on the device), host (or cpu) or nvme");
}

}  // namespace tierflow
