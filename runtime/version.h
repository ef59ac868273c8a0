// ferry's version, for the preprocessor and at run time.
//
// The macros are the version of the headers a program was compiled against; ferry::version() is
// the version of the libferry.so it runs with. A program that wants to refuse a mismatched
// library compares the two (NCCL's NCCL_VERSION_CODE / ncclGetVersion split).
// meson.build checks that these numbers equal the project version, so they cannot drift.
#pragma once

#define FERRY_VERSION_MAJOR 0
#define FERRY_VERSION_MINOR 1
#define FERRY_VERSION_PATCH 0
#define FERRY_VERSION_STRING "0.1.0"
// One comparable integer: FERRY_VERSION >= FERRY_VERSION_CODE(0, 2, 0).
#define FERRY_VERSION_CODE(major, minor, patch) ((major) * 10000 + (minor) * 100 + (patch))
#define FERRY_VERSION \
  FERRY_VERSION_CODE(FERRY_VERSION_MAJOR, FERRY_VERSION_MINOR, FERRY_VERSION_PATCH)

namespace ferry {

// "MAJOR.MINOR.PATCH" of the library this program is linked with.
const char* version();
// FERRY_VERSION of the library this program is linked with.
int version_code();

}  // namespace ferry
