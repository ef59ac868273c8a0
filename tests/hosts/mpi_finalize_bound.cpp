// MPI_Finalize's bound (finalize_within, backends/mpi_bootstrap.h) with an injected finalize, in
// child processes, since the bound ends the process it fires in:
//
//  - a finalize that returns: finalize_within returns, and the program goes on (status 42);
//  - a finalize that never returns: the process ends with the status given (0, a job that
//    finished) within a few seconds, says on stderr which rank's MPI_Finalize did not return
//    within how long, and that mpiexec could not be told (no PMI_FD here); what the program
//    wrote to stdout before, unflushed in stdio's buffer and in C++'s unsynchronized one, is
//    all there.
//
// MPICH's real MPI_Finalize hang is met only some of the time (docs/hosts.md), which a test
// cannot count on; this checks the bound itself.
#include <ferry/backends/mpi_bootstrap.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

namespace {

using namespace std::chrono_literals;

int failures = 0;

void expect(bool holds, const std::string& what) {
  if (holds) return;
  std::fprintf(stderr, "mpi_finalize_bound: FAILED: %s\n", what.c_str());
  ++failures;
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::string slurp(int fd) {
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

struct Ended {
  int status = -1;  // exit status, or -1 when killed or past the deadline
  std::string out, err;
};

// Runs `child` in a child process whose stdout and stderr are pipes (stdout fully buffered, as
// a program's output to a file is); kills it if it has not ended within 20 s.
template <class F>
Ended run_child(F&& child) {
  int out[2], err[2];
  if (::pipe(out) != 0 || ::pipe(err) != 0) std::abort();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    ::close(out[0]), ::close(err[0]), ::close(out[1]), ::close(err[1]);
    ::unsetenv("PMI_FD");
    std::setvbuf(stdout, nullptr, _IOFBF, 1 << 16);
    child();
    std::_Exit(42);
  }
  ::close(out[1]), ::close(err[1]);
  Ended e;
  int status = 0;
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > until) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(20ms);
  }
  if (WIFEXITED(status)) e.status = WEXITSTATUS(status);
  e.out = slurp(out[0]);
  e.err = slurp(err[0]);
  return e;
}

}  // namespace

int main() {
  using ferry::detail::finalize_within;
  const Ended fast = run_child([] {
    finalize_within([] {}, 5s, 1, 7, "in a test");
    std::printf("after finalize\n");
    std::fflush(stdout);
  });
  expect(fast.status == 42, "a finalize that returns lets the program go on (status " +
                                std::to_string(fast.status) + ")");
  expect(has(fast.out, "after finalize") && fast.err.empty(),
         "nothing said when finalize returns (stderr: " + fast.err + ")");

  const Ended stuck = run_child([] {
    std::ios::sync_with_stdio(false);
    std::printf("written with printf before finalize\n");
    std::cout << "written with cout before finalize\n";
    finalize_within([] { std::this_thread::sleep_for(60s); }, 300ms, 3, 0, "in a test");
  });
  expect(stuck.status == 0, "a stuck finalize ends the process with the status given, 0 (got " +
                                std::to_string(stuck.status) + ")");
  expect(has(stuck.err, "ferry: rank 3: MPI_Finalize did not return within 300 ms in a test"),
         "stderr says which rank's MPI_Finalize did not return within what (got: " + stuck.err +
             ")");
  expect(has(stuck.err, "mpiexec could not be told") && has(stuck.err, "PMI_FD is not set"),
         "stderr says why mpiexec was not told (got: " + stuck.err + ")");
  expect(has(stuck.out, "written with printf before finalize") &&
             has(stuck.out, "written with cout before finalize"),
         "what was written before finalize is not lost (stdout: " + stuck.out + ")");
  if (failures == 0) std::printf("mpi_finalize_bound: ok\n");
  return failures == 0 ? 0 : 1;
}
