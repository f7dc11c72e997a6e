// The per-level tables of the host hot loops (common/cpu_isa.h): each loop
// file is compiled once per instruction-set level, in the namespace
// tierflow::isa_baseline, isa_avx2 or isa_avx512, and defines its table of
// functions there; the dispatch side picks one with TF_ISA_TABLE.
//
// Macros only, so the per-level objects can include it without pulling in any
// inline function.
#pragma once

// Declares `extern const Type name;` in each level's namespace. Use at global
// scope; Type is looked up from inside namespace tierflow.
#define TF_DECLARE_ISA_TABLES(Type, name) \
  namespace tierflow::isa_baseline {      \
  extern const Type name;                 \
  }                                       \
  namespace tierflow::isa_avx2 {          \
  extern const Type name;                 \
  }                                       \
  namespace tierflow::isa_avx512 {        \
  extern const Type name;                 \
  }

// The table `name` of the level `isa` (TableForIsa, common/cpu_isa.h, which
// the dispatch side includes).
#define TF_ISA_TABLE(isa, name)                                                              \
  ::tierflow::TableForIsa((isa), ::tierflow::isa_baseline::name, ::tierflow::isa_avx2::name, \
                          ::tierflow::isa_avx512::name)
