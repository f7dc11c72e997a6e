// Deliberately wrong per-level code, compiled like the real host loops
// (tierflow_isa_objects) but never linked: check_isa_objects.py --expect must
// report each violation planted here, so the check on the real objects is
// known to catch them.
#include <immintrin.h>

namespace tierflow::planted {
// An inline function with external linkage, used by every level: each
// level's object gets a weak copy under the same name ("weak", "shared").
inline float SumOfSquares(const float* p, int n) {
  float s = 0;
  for (int i = 0; i < n; ++i) s += p[i] * p[i];
  return s;
}
// Defined elsewhere: an outside C++ call ("undefined").
float DefinedElsewhere(float x);
}  // namespace tierflow::planted

namespace tierflow::TIERFLOW_ISA_NS {
float PlantedEntry(const float* p, int n) {
  return planted::SumOfSquares(p, n) + planted::DefinedElsewhere(p[0]);
}
// Taking the address keeps an out-of-line (weak) copy even though the call
// above is inlined.
float (*PlantedHelper())(const float*, int) { return &planted::SumOfSquares; }
}  // namespace tierflow::TIERFLOW_ISA_NS

// A global outside the level's namespace ("namespace").
float tierflow_planted_global = 1.0f;

#if TIERFLOW_ISA_LEVEL == 2
// zmm code, checked as if it were an avx2 or baseline object ("evex").
namespace tierflow::TIERFLOW_ISA_NS {
void PlantedWide(float* p) {
  _mm512_storeu_ps(p, _mm512_add_ps(_mm512_loadu_ps(p), _mm512_loadu_ps(p)));
}
}  // namespace tierflow::TIERFLOW_ISA_NS
#elif TIERFLOW_ISA_LEVEL == 1
// ymm code, checked as if it were a baseline object ("vex").
namespace tierflow::TIERFLOW_ISA_NS {
void PlantedWide(float* p) {
  _mm256_storeu_ps(p, _mm256_add_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(p)));
}
}  // namespace tierflow::TIERFLOW_ISA_NS
#endif
