// For tests that start ranks through the binary (--nproc-per-node or
// mpirun): under ASan, OpenMPI's own leaks are suppressed by name, as for the
// other MPI tests (tests/CMakeLists.txt); OpenMPI keeps its components loaded
// so the suppressions can name them. Include it once per test binary: it
// registers itself. Needs TIERFLOW_SOURCE_DIR.
#pragma once

#include <stdlib.h>

#include <string>

#include <gtest/gtest.h>

namespace tierflow::testing_common {

class MpiEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    setenv("OMPI_MCA_mca_base_component_disable_dlclose", "1", 1);
    setenv("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=1:fast_unwind_on_malloc=0", 1);
    setenv("LSAN_OPTIONS",
           ("suppressions=" + std::string(TIERFLOW_SOURCE_DIR) +
            "/scripts/lsan-mpi.supp:print_suppressions=0")
               .c_str(),
           1);
  }
};

inline const auto* const kMpiEnvironment = ::testing::AddGlobalTestEnvironment(new MpiEnvironment);

}  // namespace tierflow::testing_common
