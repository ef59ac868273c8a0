#include <ferry/backends/mpi/mpi_launcher_exit.h>

#include <mpi.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

namespace ferry::detail {
namespace {

// The socket Hydra handed this rank for PMI-1, or -1 (with why).
int pmi_socket(std::string* why) {
  const char* v = std::getenv("PMI_FD");
  if (v == nullptr || *v == '\0') {
    *why = "PMI_FD is not set (not started by MPICH's mpiexec)";
    return -1;
  }
  int fd = -1;
  const char* end = v + std::strlen(v);
  const auto [ptr, ec] = std::from_chars(v, end, fd);
  struct stat st{};
  if (ec != std::errc() || ptr != end || fd < 0 || fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) {
    *why = std::string("PMI_FD=") + v + " is not an open socket";
    return -1;
  }
  // The wire protocol is the MPI library's choice: MPICH's own PMI client speaks PMI-1 unless it
  // was configured for PMI-2 or PMIx, which the version string's configure line names.
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(version, &length);
  const std::string lib(version, static_cast<size_t>(length > 0 ? length : 0));
  if (lib.find("MPICH") == std::string::npos) {
    *why = "the MPI library is not MPICH";
    return -1;
  }
  if (lib.find("pmi2") != std::string::npos || lib.find("pmix") != std::string::npos ||
      lib.find("PMIx") != std::string::npos) {
    *why = "this MPICH was built for PMI-2 or PMIx";
    return -1;
  }
  return fd;
}

bool write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// One reply line, within `wait_ms` in all.
bool read_line(int fd, int wait_ms, std::string* line) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  char c = 0;
  while (line->size() < 256) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return false;
    const ssize_t n = ::read(fd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    if (c == '\n') return true;
    line->push_back(c);
  }
  return false;
}

}  // namespace

bool tell_launcher_rank_ends(int wait_ms, std::string* why) {
  const int fd = pmi_socket(why);
  if (fd < 0) return false;
  static constexpr char kFinalize[] = "cmd=finalize\n";
  if (!write_all(fd, kFinalize, sizeof(kFinalize) - 1)) {
    *why = std::string("writing to PMI_FD failed: ") + std::strerror(errno);
    return false;
  }
  std::string reply;
  if (!read_line(fd, wait_ms, &reply)) {
    *why = "mpiexec did not acknowledge within " + std::to_string(wait_ms) + " ms";
    return false;
  }
  if (reply.find("cmd=finalize_ack") == std::string::npos) {
    *why = "mpiexec answered '" + reply + "' instead of cmd=finalize_ack";
    return false;
  }
  // As MPICH's own PMI_Finalize: the socket is done with.
  ::shutdown(fd, SHUT_RDWR);
  ::close(fd);
  return true;
}

}  // namespace ferry::detail
