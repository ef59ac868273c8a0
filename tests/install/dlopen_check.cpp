// Opens libferry.so with dlopen, as a plugin host or a language binding would, and uses its
// thread-locals from two threads. Built without linking the library (the path is the first
// argument). Whether the open must succeed is the second argument, which meson passes from the
// build's initial_exec_tls option: a library built with its thread-locals in the initial-exec
// model cannot be opened after the program started (glibc keeps too little static TLS for its
// 11 KiB), and the README says so; one built with -Dinitial_exec_tls=false can.
#include <ferry/autograd/grad_mode.h>
#include <ferry/runtime/version.h>

#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "dlopen_check: %s\n", what.c_str());
    ++failures;
  }
}

template <class F>
F symbol(void* library, const char* name) {
  void* at = dlsym(library, name);
  expect(at != nullptr, std::string("no symbol ") + name);
  return reinterpret_cast<F>(at);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: dlopen_check LIBFERRY_SO true|false (whether the open must succeed)\n");
    return 2;
  }
  const bool must_open = std::strcmp(argv[2], "true") == 0;
  void* library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!must_open) {
    // The failure the README documents, and nothing else (a missing file would also fail).
    const char* error = library == nullptr ? dlerror() : nullptr;
    expect(error != nullptr && std::strstr(error, "static TLS") != nullptr,
           std::string("expected dlopen to fail for want of static TLS, got: ") +
               (error != nullptr ? error : "success"));
    return failures == 0 ? 0 : 1;
  }
  if (library == nullptr) {
    std::fprintf(stderr, "dlopen_check: dlopen failed: %s\n", dlerror());
    return 1;
  }
  // ferry::version(), ferry::grad_enabled() and ferry::NoGradGuard's constructor and destructor,
  // by their mangled names (the program does not link the library).
  using Version = const char* (*)();
  using GradEnabled = bool (*)();
  using GuardFn = void (*)(void*);
  const auto version = symbol<Version>(library, "_ZN5ferry7versionEv");
  const auto grad_enabled = symbol<GradEnabled>(library, "_ZN5ferry12grad_enabledEv");
  const auto guard_on = symbol<GuardFn>(library, "_ZN5ferry11NoGradGuardC1Ev");
  const auto guard_off = symbol<GuardFn>(library, "_ZN5ferry11NoGradGuardD1Ev");
  if (failures != 0) return 1;
  expect(std::strcmp(version(), FERRY_VERSION_STRING) == 0,
         std::string("version ") + version() + ", headers " + FERRY_VERSION_STRING);
  // The grad mode is a thread-local: off in this thread while the guard lives, on in another.
  expect(grad_enabled(), "grad mode off at start");
  // Room for a NoGradGuard, its size from the header (the program only declares the class).
  alignas(ferry::NoGradGuard) unsigned char guard[sizeof(ferry::NoGradGuard)];
  guard_on(guard);
  expect(!grad_enabled(), "grad mode on inside a NoGradGuard");
  bool other_thread = false;
  std::thread([&] { other_thread = grad_enabled(); }).join();
  expect(other_thread, "another thread's grad mode turned off with this thread's");
  guard_off(guard);
  expect(grad_enabled(), "grad mode off after the NoGradGuard ended");
  dlclose(library);
  if (failures == 0) std::printf("dlopen_check: %s opened, thread-locals per thread\n", argv[1]);
  return failures == 0 ? 0 : 1;
}
