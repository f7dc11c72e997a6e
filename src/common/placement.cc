// OffloadPlacement names and parsing.
#include "tierflow/placement.h"

#include <string>

namespace tierflow {

std::string_view OffloadPlacementName(OffloadPlacement placement) {
  switch (placement) {
    case OffloadPlacement::kAuto:
      return "auto";
    case OffloadPlacement::kHost:
      return "host";
    case OffloadPlacement::kNvme:
      return "nvme";
  }
  return "?";
}

StatusOr<OffloadPlacement> ParseOffloadPlacement(std::string_view what, std::string_view text) {
  if (text == "auto") return OffloadPlacement::kAuto;
  if (text == "host" || text == "cpu") return OffloadPlacement::kHost;
  if (text == "nvme") return OffloadPlacement::kNvme;
  return InvalidArgumentError(std::string(what) + ": unknown optimizer placement '" +
                              std::string(text) + "': use auto, host (or cpu) or nvme");
}

}  // namespace tierflow
