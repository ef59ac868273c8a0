// Heap allocations made by this process, counted by an interposed malloc (alloc_count.cpp,
// linked into ferry-dlrm only): the benchmark reports allocations per step and a test checks
// their bound. Every allocation through malloc, calloc, realloc, the aligned forms and (through
// them) operator new is counted, on every thread, by the library and the tool alike.
#pragma once

#include <cstdint>

namespace ferry::dlrm_tool {

// Allocations so far (a relaxed atomic counter: read it around the code to measure); always 0
// in a sanitizer build, whose runtime owns malloc.
uint64_t heap_allocations();

}  // namespace ferry::dlrm_tool
