// cpuid/XCR0 feature detection and the process-wide level choice.
#include "common/cpu_isa.h"

#include <cpuid.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace tierflow {
namespace {

struct CpuidRegs {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
};

// Leaf `leaf`, sub-leaf `sub`; all zero when the CPU lacks the leaf.
CpuidRegs Cpuid(unsigned leaf, unsigned sub) {
  CpuidRegs r;
  if (__get_cpuid_count(leaf, sub, &r.eax, &r.ebx, &r.ecx, &r.edx) == 0) return CpuidRegs{};
  return r;
}

bool Bit(unsigned reg, int bit) { return ((reg >> bit) & 1u) != 0; }

// The XCR0 register: which register states the OS saves. Only readable when
// the OS set CR4.OSXSAVE (cpuid 1, ecx bit 27).
uint64_t Xcr0() {
  unsigned eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

struct Features {
  bool avx2_level = false;
  bool avx512_level = false;
};

Features Detect() {
  Features f;
  const CpuidRegs l1 = Cpuid(1, 0);
  const CpuidRegs l7 = Cpuid(7, 0);
  const CpuidRegs ext = Cpuid(0x80000001u, 0);
  const bool osxsave = Bit(l1.ecx, 27);
  const uint64_t xcr0 = osxsave ? Xcr0() : 0;
  const bool os_ymm = (xcr0 & 0x6) == 0x6;    // SSE and AVX state
  const bool os_zmm = (xcr0 & 0xe0) == 0xe0;  // opmask, ZMM_Hi256, Hi16_ZMM state
  // x86-64-v2 (implied by v3): SSE3, SSSE3, SSE4.1, SSE4.2, POPCNT, CX16, LAHF/SAHF.
  const bool v2 = Bit(l1.ecx, 0) && Bit(l1.ecx, 9) && Bit(l1.ecx, 19) && Bit(l1.ecx, 20) &&
                  Bit(l1.ecx, 23) && Bit(l1.ecx, 13) && Bit(ext.ecx, 0);
  // x86-64-v3: AVX, AVX2, BMI1, BMI2, F16C, FMA, LZCNT, MOVBE (and XSAVE).
  const bool v3 = v2 && osxsave && os_ymm && Bit(l1.ecx, 28) && Bit(l7.ebx, 5) && Bit(l7.ebx, 3) &&
                  Bit(l7.ebx, 8) && Bit(l1.ecx, 29) && Bit(l1.ecx, 12) && Bit(ext.ecx, 5) &&
                  Bit(l1.ecx, 22);
  // x86-64-v4: AVX-512 F, BW, CD, DQ, VL.
  const bool v4 = v3 && os_zmm && Bit(l7.ebx, 16) && Bit(l7.ebx, 30) && Bit(l7.ebx, 28) &&
                  Bit(l7.ebx, 17) && Bit(l7.ebx, 31);
  f.avx2_level = v3;
  f.avx512_level = v4;
  return f;
}

const Features& CachedFeatures() {
  static const Features features = Detect();
  return features;
}

std::string NameList(const std::vector<Isa>& levels) {
  std::string s;
  for (Isa isa : levels) {
    if (!s.empty()) s += ", ";
    s += IsaName(isa);
  }
  return s;
}

}  // namespace

std::string_view IsaName(Isa isa) {
  switch (isa) {
    case Isa::kBaseline:
      return "baseline";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "?";
}

StatusOr<Isa> ParseIsa(std::string_view name) {
  for (Isa isa : {Isa::kBaseline, Isa::kAvx2, Isa::kAvx512}) {
    if (name == IsaName(isa)) return isa;
  }
  return InvalidArgumentError("unknown instruction-set level '" + std::string(name) +
                              "': use one of baseline, avx2, avx512");
}

bool CpuSupportsIsa(Isa isa) {
  switch (isa) {
    case Isa::kBaseline:
      return true;
    case Isa::kAvx2:
      return CachedFeatures().avx2_level;
    case Isa::kAvx512:
      return CachedFeatures().avx512_level;
  }
  return false;
}

std::vector<Isa> SupportedIsas() {
  std::vector<Isa> levels;
  for (Isa isa : {Isa::kBaseline, Isa::kAvx2, Isa::kAvx512}) {
    if (CpuSupportsIsa(isa)) levels.push_back(isa);
  }
  return levels;
}

StatusOr<Isa> ChooseIsa(const char* forced, const std::vector<Isa>& supported) {
  if (forced == nullptr || *forced == '\0') {
    if (supported.empty()) return InternalError("no instruction-set level is supported");
    return supported.back();
  }
  StatusOr<Isa> parsed = ParseIsa(forced);
  if (!parsed.ok()) {
    return InvalidArgumentError("TIERFLOW_ISA=" + std::string(forced) +
                                ": unknown instruction-set level; use one of baseline, avx2, "
                                "avx512 (this CPU supports " +
                                NameList(supported) + "), or unset it to use the best");
  }
  for (Isa isa : supported) {
    if (isa == *parsed) return isa;
  }
  return InvalidArgumentError("TIERFLOW_ISA=" + std::string(forced) + ": this CPU cannot run the " +
                              std::string(IsaName(*parsed)) + " level (it supports " +
                              NameList(supported) + "); choose one of those or unset it");
}

StatusOr<Isa> SelectedIsa() {
  static const StatusOr<Isa> selected = ChooseIsa(std::getenv("TIERFLOW_ISA"), SupportedIsas());
  return selected;
}

Isa SelectedIsaOrExit() {
  static const Isa isa = [] {
    StatusOr<Isa> selected = SelectedIsa();
    if (!selected.ok()) {
      std::fprintf(stderr, "tierflow: %s\n", selected.status().ToString().c_str());
      std::fflush(stderr);
      std::_Exit(2);
    }
    return *selected;
  }();
  return isa;
}

Status CheckIsaSupported(Isa isa, std::string_view what) {
  if (CpuSupportsIsa(isa)) return Status::Ok();
  return FailedPreconditionError(std::string(what) + ": this CPU cannot run the " +
                                 std::string(IsaName(isa)) + " level (it supports " +
                                 NameList(SupportedIsas()) + ")");
}

StatusOr<Isa> IsaToRun(std::optional<Isa> requested, std::string_view what) {
  Isa isa = Isa::kBaseline;
  if (requested.has_value()) {
    isa = *requested;
  } else {
    TF_ASSIGN_OR_RETURN(isa, SelectedIsa());
  }
  TF_RETURN_IF_ERROR(CheckIsaSupported(isa, what));
  return isa;
}

}  // namespace tierflow
