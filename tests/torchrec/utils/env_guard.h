// Sets the launcher variables the torchrec topology helpers read for one test, and restores the
// process environment afterwards. The environment is process-wide: only the test's main thread
// may change it, never while rank threads (run_ranks) are reading it.
#pragma once

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

namespace torchrec_test {

inline constexpr const char* kLauncherVars[] = {
    "LOCAL_WORLD_SIZE", "MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE",
    "MV2_COMM_WORLD_LOCAL_SIZE", "LOCAL_RANK", "MPI_LOCALRANKID",
    "OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK"};

// Clears every launcher variable on construction (so the test sees only what it sets), puts
// back what was there on destruction.
class EnvGuard {
 public:
  EnvGuard() {
    for (const char* name : kLauncherVars) {
      const char* v = std::getenv(name);
      saved_[name] = v ? std::optional<std::string>(v) : std::nullopt;
      ::unsetenv(name);
    }
  }
  ~EnvGuard() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }
  EnvGuard(const EnvGuard&) = delete;
  EnvGuard& operator=(const EnvGuard&) = delete;

  void set(const char* name, const std::string& value) { ::setenv(name, value.c_str(), 1); }
  void unset(const char* name) { ::unsetenv(name); }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

}  // namespace torchrec_test
