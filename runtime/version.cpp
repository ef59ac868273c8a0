#include <ferry/runtime/version.h>

namespace ferry {

// Compiled into the library: the header a user compiles against may be another version's.
const char* version() { return FERRY_VERSION_STRING; }

int version_code() { return FERRY_VERSION; }

}  // namespace ferry
