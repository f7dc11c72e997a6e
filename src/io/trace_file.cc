// Chrome trace files.
#include "io/trace_file.h"

namespace tierflow {

Status WriteTraceFile(const TraceRecorder& trace, const std::string& path, FileSystem* fs) {
  return WriteStringToFileAtomically(fs, path, trace.ChromeTraceJson()).WithContext("trace file");
}

}  // namespace tierflow
