#include <ferry/runtime/error.h>

#include <exception>

namespace ferry {

void rethrow_with_prefix(std::exception_ptr error, const std::string& prefix) {
  try {
    std::rethrow_exception(error);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(prefix + e.what());
  } catch (const MismatchError& e) {
    throw MismatchError(prefix + e.what());
  } catch (const TimeoutError& e) {
    throw TimeoutError(prefix + e.what());
  } catch (const PeerFailure& e) {
    throw PeerFailure(prefix + e.what());
  } catch (const TransportError& e) {
    throw TransportError(prefix + e.what());
  } catch (const Error& e) {
    throw Error(prefix + e.what());
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
