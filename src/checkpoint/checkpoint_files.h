// The files of a checkpoint directory: the "files" entries of
// trainer_state.json (size, CRC32C, and for safetensors files each tensor's
// byte range and CRC32C) and how they are checked, and reading a path inside
// a checkpoint without following a link at any component.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/path_component.h"
#include "tierflow/status.h"

namespace tierflow {

// The "files" entry of trainer_state.json for `rel` under `dir`: size,
// CRC32C, and for safetensors files each tensor's range and CRC32C.
StatusOr<nlohmann::json> DescribeCheckpointFile(const std::string& dir, const std::string& rel);

// Checks one "files" entry; "" when it matches, else what is wrong (for a
// changed safetensors file: which tensor and which bytes; for a path that
// is not inside `dir`, passes through a symlink or is mistyped: the field).
// `code` (optional) receives the kind of problem (CheckpointInfo::problem_code).
std::string CheckCheckpointFile(const std::string& dir, const nlohmann::json& entry,
                                StatusCode* code = nullptr);

// `rel` ("model/config.json") as validated components. Errors: InvalidArgument
// from PathComponent naming `what`.
StatusOr<std::vector<PathComponent>> SplitInsidePath(const std::string& rel, std::string_view what);

// The size of the regular file `rel` under `dir`, found without following a
// symlink at any component: a checkpoint whose files are links would make
// tier commands read (and, for migrate, write) outside it. Errors: the errno
// status of lstat naming the path (NotFound when missing); DataLoss naming a
// component that is a symlink or not a directory / regular file.
StatusOr<uint64_t> RegularFileSizeInside(const std::string& dir,
                                         const std::vector<PathComponent>& rel);

}  // namespace tierflow
