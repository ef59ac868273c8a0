// The ferry::Error hierarchy and the checks that raise it.
//
// Every error that reaches a user is one of these types. Messages say which op, which rank,
// what was expected and what was given. FERRY_CHECK / FERRY_THROW record the source line that
// raised the error: what() leaves it out (a user reads the message alone) unless FERRY_DEBUG is
// set to warn, info or trace; where() and what_with_location() give it at any time.
#pragma once

#include <exception>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>

namespace ferry {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
  Error(const std::string& message, const std::string& where);

  // "runtime/config_parse.cpp:117": the line of ferry's source that raised the error; empty for an
  // error not raised by FERRY_CHECK / FERRY_THROW.
  const std::string& where() const noexcept;
  // what() followed by " [where()]" (what() alone when there is no location or it already ends so).
  std::string what_with_location() const;

 private:
  // Shared so that copying the exception cannot throw.
  std::shared_ptr<const std::string> where_;
};

// The caller passed something the op cannot accept. Raised on the calling rank before any data
// moves, so the group stays usable.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// Ranks disagree about a call (different sizes, dtypes, ops). Detected while data moves.
class MismatchError : public Error {
 public:
  using Error::Error;
};

// A deadline expired. The group the op ran on is poisoned afterwards.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// A peer died or was declared dead.
class PeerFailure : public Error {
 public:
  using Error::Error;
};

// The transport failed for a reason of its own (MPI or UCX error, closed connection, ...).
class TransportError : public Error {
 public:
  using Error::Error;
};

namespace detail {

template <class... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

// "runtime/error.cpp:12" from __FILE__ and __LINE__, the build folder's "../" removed.
std::string source_location(const char* file, int line);
// "ferry: " + message, with " [location]" appended when FERRY_DEBUG is warn, info or trace.
std::string error_text(const std::string& message, const std::string& location);

template <class E>
[[noreturn]] void raise(const char* file, int line, const std::string& message) {
  const std::string location = source_location(file, line);
  throw E(error_text(message, location), location);
}

}  // namespace detail
}  // namespace ferry

// FERRY_CHECK(cond, ErrorType, message parts...): throws ErrorType when cond is false.
#define FERRY_CHECK(cond, ErrorType, ...)                                                 \
  do {                                                                                    \
    if (!(cond)) [[unlikely]]                                                             \
      ::ferry::detail::raise<ErrorType>(__FILE__, __LINE__, ::ferry::detail::str(__VA_ARGS__)); \
  } while (0)

// FERRY_THROW(ErrorType, message parts...): throws unconditionally.
#define FERRY_THROW(ErrorType, ...) \
  ::ferry::detail::raise<ErrorType>(__FILE__, __LINE__, ::ferry::detail::str(__VA_ARGS__))

namespace ferry {
// Throws a new exception of the same ferry::Error type as `error` whose message is
// `prefix` + the original message. Anything that is not a ferry::Error becomes a ferry::Error.
// Used where an error crosses a boundary that adds context (a rank, a group, an op).
[[noreturn]] void rethrow_with_prefix(std::exception_ptr error, const std::string& prefix);
// The what() of the exception `error` holds ("unknown exception" for a non-std one).
std::string error_message(std::exception_ptr error);
}  // namespace ferry
