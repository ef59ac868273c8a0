// Heap allocations of the whole process, counted by an interposed malloc (heap_allocations.cpp),
// for ferry-dlrm's allocations per step and for tests that bound what an operation allocates.
// Link heap_allocations.cpp into an executable of its own (meson: heap_allocations_src): the
// executable's malloc then takes precedence over libc's for every library of the process (ELF
// interposition), and the count covers every thread, of the library and the program alike.
//
//   const uint64_t before = ferry::tools::heap_allocations();
//   op();
//   const uint64_t made = ferry::tools::heap_allocations() - before;
//
// Under a sanitizer, whose runtime owns malloc, nothing is interposed: counting() is false and
// the count stays 0, so a test skips its bounds.
#pragma once

#include <cstdint>

namespace ferry::tools {

// Allocations so far through malloc, calloc, realloc, the aligned forms and (through them)
// operator new; frees are not counted.
uint64_t heap_allocations();
// Whether allocations are counted in this build.
bool counting_heap_allocations();

}  // namespace ferry::tools
