// Writing a TraceRecorder's spans to a Chrome trace file (the JSON that
// Perfetto and chrome://tracing open), replaced crash-safely like every file
// tierflow writes (io/file_system.h).
#pragma once

#include <string>

#include "common/trace.h"
#include "io/file_system.h"
#include "tierflow/status.h"

namespace tierflow {

// Replaces `path` with trace.ChromeTraceJson(). Errors name the path; on any
// failure the old file (if any) is left as it was. `fs` may be null
// (DefaultFileSystem).
Status WriteTraceFile(const TraceRecorder& trace, const std::string& path,
                      FileSystem* fs = nullptr);

}  // namespace tierflow
