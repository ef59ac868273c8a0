// What a fault test's op raised, by kind and message: the tests that kill, stop or mismatch a
// peer run an op on each survivor and check which ferry error it raised and what it says.
#pragma once

#include <ferry/runtime/error.h>

#include <exception>
#include <functional>
#include <string>

namespace ferry::test {

struct Caught {
  std::string kind;  // "PeerFailure", "MismatchError", ...; empty when nothing was thrown
  std::string what;
};

// Runs `fn`; returns the exception it threw, or empty strings.
inline Caught capture(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const PeerFailure& e) {
    return {"PeerFailure", e.what()};
  } catch (const MismatchError& e) {
    return {"MismatchError", e.what()};
  } catch (const TimeoutError& e) {
    return {"TimeoutError", e.what()};
  } catch (const InvalidArgument& e) {
    return {"InvalidArgument", e.what()};
  } catch (const TransportError& e) {
    return {"TransportError", e.what()};
  } catch (const Error& e) {
    return {"Error", e.what()};
  } catch (const std::exception& e) {
    return {"other", e.what()};
  }
  return {};
}

}  // namespace ferry::test
