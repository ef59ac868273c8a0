#include <ferry/runtime/error.h>

#include <cctype>
#include <cstdlib>
#include <exception>

namespace ferry {

Error::Error(const std::string& message, const std::string& where)
    : std::runtime_error(message),
      where_(where.empty() ? nullptr : std::make_shared<const std::string>(where)) {}

const std::string& Error::where() const noexcept {
  static const std::string none;
  return where_ ? *where_ : none;
}

std::string Error::what_with_location() const {
  const std::string text = what();
  if (!where_) return text;
  const std::string suffix = " [" + *where_ + "]";
  if (text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0)
    return text;
  return text + suffix;
}

namespace detail {

std::string source_location(const char* file, int line) {
  std::string path = file ? file : "?";
  // Meson compiles from the build folder, so __FILE__ reads "../runtime/x.cpp".
  while (path.rfind("../", 0) == 0 || path.rfind("./", 0) == 0) path.erase(0, path.find('/') + 1);
  return path + ":" + std::to_string(line);
}

namespace {
// Read at every raise, not cached: errors are rare, and tests change the setting in-process.
// Any value but off asks for locations; the value's validity is config's business.
bool locations_wanted() {
  const char* v = std::getenv("FERRY_DEBUG");
  if (!v || !*v) return false;
  std::string s(v);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s != "off" && s != "0";
}
}  // namespace

std::string error_text(const std::string& message, const std::string& location) {
  if (locations_wanted()) return "ferry: " + message + " [" + location + "]";
  return "ferry: " + message;
}

}  // namespace detail

void rethrow_with_prefix(std::exception_ptr error, const std::string& prefix) {
  try {
    std::rethrow_exception(error);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(prefix + e.what(), e.where());
  } catch (const MismatchError& e) {
    throw MismatchError(prefix + e.what(), e.where());
  } catch (const TimeoutError& e) {
    throw TimeoutError(prefix + e.what(), e.where());
  } catch (const PeerFailure& e) {
    throw PeerFailure(prefix + e.what(), e.where());
  } catch (const TransportError& e) {
    throw TransportError(prefix + e.what(), e.where());
  } catch (const Error& e) {
    throw Error(prefix + e.what(), e.where());
  } catch (const std::exception& e) {
    throw Error(prefix + e.what());
  } catch (...) {
    throw Error(prefix + "unknown exception");
  }
}

std::string error_message(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

}  // namespace ferry
