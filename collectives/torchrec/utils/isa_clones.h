// FERRY_ISA_CLONES: one clone of a kernel per x86-64 ISA level (v4: AVX-512, v3: AVX2, and the
// baseline), picked once by the loader (ifunc) from the CPU's features, so that a loop the
// compiler vectorises runs at the machine's width without building the library for one CPU.
// Helpers a kernel calls must be inlined into it (FERRY_ISA_INLINE) to be compiled per clone.
// Other compilers and targets get the one baseline function.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FERRY_ISA_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define FERRY_ISA_CLONES
#endif

#define FERRY_ISA_INLINE __attribute__((always_inline)) inline
