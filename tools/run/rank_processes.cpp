#include "tools/run/rank_processes.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <stdexcept>

extern char** environ;

namespace ferry::run {
namespace {

using Clock = std::chrono::steady_clock;

std::string random_secret() {
  std::random_device rd;  // /dev/urandom
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < 32; ++i) s.push_back(hex[rd() % 16]);
  return s;
}

// The environment of rank `rank`: ours, with `set` replacing same-named variables.
std::vector<std::string> child_env(const std::vector<std::pair<std::string, std::string>>& set) {
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    const std::string name = kv.substr(0, kv.find('='));
    bool replaced = false;
    for (const auto& [k, v] : set) replaced = replaced || k == name;
    if (!replaced) out.push_back(kv);
  }
  // Later entries of `set` win, so a caller's variable replaces a launcher default.
  for (size_t i = 0; i < set.size(); ++i) {
    bool overridden = false;
    for (size_t j = i + 1; j < set.size(); ++j) overridden = overridden || set[j].first == set[i].first;
    if (!overridden) out.push_back(set[i].first + "=" + set[i].second);
  }
  return out;
}

// Starts one rank; `pass_fd` (unless -1) stays open across its exec.
pid_t start(const std::vector<std::string>& argv, const std::vector<std::string>& env,
            int pass_fd) {
  std::vector<char*> args, envp;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    if (pass_fd >= 0) fcntl(pass_fd, F_SETFD, 0);  // this copy only: the flag is per descriptor
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execve(args[0], args.data(), envp.data());
    execvpe(args[0], args.data(), envp.data());
    std::fprintf(stderr, "ferry-run: cannot start %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  return pid;
}

}  // namespace

int listen_on_loopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket() failed: ") + std::strerror(errno));
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t len = sizeof a;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd, 128) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    const int e = errno;
    close(fd);
    throw std::runtime_error("cannot listen on 127.0.0.1:" + std::to_string(port) + ": " +
                             std::strerror(e));
  }
  return fd;
}

int listening_port(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return 0;
  return ntohs(a.sin_port);
}

std::string describe(const RankExit& e) {
  std::string s = "rank " + std::to_string(e.rank);
  if (e.exited) return s + " exited with status " + std::to_string(e.status);
  s += " was killed by signal " + std::to_string(e.signal);
  if (e.killed_by_us)
    s += " (by the launcher: the timeout, another rank's failure, or a signal passed on)";
  return s;
}

std::vector<RankExit> launch_ranks(const LaunchOptions& o, int* forwarded) {
  if (o.ranks < 1 || o.argv.empty()) throw std::runtime_error("launch_ranks: nothing to run");
  if (forwarded) *forwarded = 0;
  // The rendezvous port is bound and listened on here, and the socket handed to rank 0: a port
  // only chosen here (bound, read, closed) would be free until rank 0 binds it, and every rank's
  // UCX worker binds ports of its own meanwhile (its TCP transport's listeners, on ports the
  // kernel picks from the same range), which can take it and fail rank 0's start.
  const int listener = listen_on_loopback(o.port);
  struct CloseListener {
    int fd;
    ~CloseListener() {
      if (fd >= 0) close(fd);
    }
  } close_listener{listener};
  const int port = listening_port(listener);
  const std::string secret = random_secret();
  // The signals waited for are blocked so that sigtimedwait can take them (the children
  // unblock everything before exec).
  sigset_t chld, old;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  if (o.forward_signals) {
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&chld, sig);
  }
  pthread_sigmask(SIG_BLOCK, &chld, &old);
  const auto t0 = Clock::now();
  std::vector<pid_t> pids(static_cast<size_t>(o.ranks), -1);
  std::vector<RankExit> exits(static_cast<size_t>(o.ranks));
  for (int r = 0; r < o.ranks; ++r) {
    std::vector<std::pair<std::string, std::string>> set = {
        {"FERRY_RENDEZVOUS", "127.0.0.1:" + std::to_string(port)},
        {"FERRY_RANK", std::to_string(r)},
        {"FERRY_WORLD_SIZE", std::to_string(o.ranks)},
        {"FERRY_SECRET", secret},
        {"FERRY_RENDEZVOUS_FD", r == 0 ? std::to_string(listener) : std::string()}};
    if (std::getenv("FERRY_BACKEND") == nullptr) set.push_back({"FERRY_BACKEND", "ucx"});
    set.insert(set.end(), o.env.begin(), o.env.end());
    exits[r].rank = r;
    try {
      pids[r] = start(o.argv, child_env(set), r == 0 ? listener : -1);
    } catch (...) {
      // The ranks already started would wait for the missing one until their deadline.
      for (int k = 0; k < r; ++k) {
        kill(pids[k], SIGKILL);
        waitpid(pids[k], nullptr, 0);
      }
      pthread_sigmask(SIG_SETMASK, &old, nullptr);
      throw;
    }
  }
  // Rank 0 holds the listening socket now; ours goes, so that a rank 0 that dies leaves nobody
  // listening and the others' connections are refused rather than left waiting.
  close(listener);
  close_listener.fd = -1;
  int running = o.ranks;
  auto kill_at = t0 + o.timeout;
  bool killing = false;
  while (running > 0) {
    for (int r = 0; r < o.ranks; ++r) {
      if (pids[r] < 0) continue;
      int status = 0;
      if (waitpid(pids[r], &status, WNOHANG) != pids[r]) continue;
      RankExit& e = exits[r];
      e.exited = WIFEXITED(status);
      e.status = e.exited ? WEXITSTATUS(status) : 0;
      e.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
      e.killed_by_us = killing;
      e.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      pids[r] = -1;
      --running;
      if (!(e.exited && e.status == 0)) kill_at = std::min(kill_at, Clock::now() + o.grace);
    }
    if (running == 0) break;
    const auto now = Clock::now();
    if (now >= kill_at) {
      const int sig = killing ? SIGKILL : SIGTERM;
      for (pid_t p : pids)
        if (p > 0) kill(p, sig);
      killing = true;
      kill_at = now + std::chrono::seconds(1);
      continue;
    }
    const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(kill_at - now).count();
    timespec ts{static_cast<time_t>(left / 1'000'000'000), static_cast<long>(left % 1'000'000'000)};
    const int sig = sigtimedwait(&chld, nullptr, &ts);
    if (sig > 0 && sig != SIGCHLD) {
      // Passed on to the ranks, which get the grace period to end before SIGKILL.
      for (pid_t p : pids)
        if (p > 0) kill(p, sig);
      if (forwarded && *forwarded == 0) *forwarded = sig;
      if (!killing) kill_at = std::min(kill_at, Clock::now() + o.grace);
      killing = true;
    }
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return exits;
}

}  // namespace ferry::run
