#include <ferry/collectives/shm/shared_segment.h>

#include <ferry/runtime/error.h>
#include <ferry/runtime/log.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <dirent.h>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ferry::detail::shm {
namespace {

// The exchange's steps, at the top of the range an algorithm's steps use (OpContext's
// fingerprint step is the last one): the messages carry the op's sequence number, so they
// never meet another op's.
constexpr uint32_t kNameStep = (1u << 14) - 4;
constexpr uint32_t kConfirmStep = (1u << 14) - 3;
constexpr uint32_t kReadyStep = (1u << 14) - 2;

// What rank 0 sends: whether it created the segment, and its name or why it could not.
struct NameMessage {
  uint32_t ok = 0;
  uint32_t pad = 0;
  char text[248] = {};
};
// A peer's confirmation, and rank 0's final word: 1 mapped / ready, 0 not (with why).
struct StatusMessage {
  uint32_t ok = 0;
  uint32_t pad = 0;
  char text[120] = {};
};

void put(char* dst, size_t cap, const std::string& s) {
  const size_t n = std::min(cap - 1, s.size());
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

uint64_t random64() {
  uint64_t v = 0;
  if (getrandom(&v, sizeof v, GRND_NONBLOCK) == static_cast<ssize_t>(sizeof v)) return v;
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd();
}

std::string segment_name(uint32_t group) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "/%s%d-g%u-%016llx", SharedSegment::kNamePrefix,
                static_cast<int>(getpid()), group, static_cast<unsigned long long>(random64()));
  return buf;
}

// Maps the named segment (`create`: makes it, exclusively); "" or why not.
std::string map_named(const std::string& name, size_t bytes, bool create, void** base) {
  const int fd = create ? shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600)
                        : shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) return str("shm_open(", name, "): ", std::strerror(errno));
  std::string why;
  if (create && ftruncate(fd, static_cast<off_t>(bytes)) != 0)
    why = str("ftruncate(", bytes, " B): ", std::strerror(errno));
  struct stat st {};
  if (why.empty() && !create && (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes))
    why = str("the segment holds ", st.st_size, " B, expected ", bytes);
  if (why.empty()) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
      why = str("mmap(", bytes, " B): ", std::strerror(errno));
    else
      *base = p;
  }
  close(fd);
  return why;
}

// The requests and their buffers: freed only when every request finished. A request a failed
// exchange could not withdraw may still write into its buffer, so on failure the whole is left
// to the process (a few hundred bytes, once per failed group).
struct Exchange {
  GroupImpl& g;
  uint64_t seq;
  Clock::time_point deadline;
  NameMessage name;
  std::vector<StatusMessage> status;  // by group rank
  StatusMessage ready;
  std::vector<std::unique_ptr<Request>> requests;

  Exchange(GroupImpl& group, uint64_t s, Clock::time_point d)
      : g(group), seq(s), deadline(d), status(static_cast<size_t>(group.size())) {}

  Tag tag(uint32_t step) const { return Tag{g.id(), step, seq, 0}; }
  int world(int r) const { return g.members()[static_cast<size_t>(r)]; }
  Request& post(std::unique_ptr<Request> r) {
    requests.push_back(std::move(r));
    return *requests.back();
  }
  // Waits for `r` from group rank `peer`; throws TimeoutError or the request's failure.
  void wait(Request& r, int peer, const char* what) {
    if (!r.wait_until(deadline))
      FERRY_THROW(TimeoutError, "shared memory of ", g.describe(), ": rank ", peer,
                  " did not ", what, " before the op's deadline (FERRY_TIMEOUT)");
    r.rethrow_if_failed();
  }
  bool all_finished() {
    for (auto& r : requests)
      if (!r->test()) return false;
    return true;
  }
};

void unmap(void* base, size_t bytes) {
  if (base != nullptr) munmap(base, bytes);
}

}  // namespace

SharedSegment::SharedSegment(SharedSegment&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

SharedSegment& SharedSegment::operator=(SharedSegment&& other) noexcept {
  if (this != &other) {
    unmap(base_, bytes_);
    base_ = std::exchange(other.base_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

SharedSegment::~SharedSegment() { unmap(base_, bytes_); }

SharedSegment SharedSegment::map_for_group(GroupImpl& g, size_t bytes, uint64_t seq,
                                           Clock::time_point deadline,
                                           const std::function<void(void*)>& on_mapped) {
  const int me = g.rank(), n = g.size();
  auto* x = new Exchange(g, seq, deadline);
  void* base = nullptr;
  std::string name;
  bool unlinked = true;  // whether this rank still has to remove `name`
  auto remove_name = [&] {
    if (!unlinked) shm_unlink(name.c_str());
    unlinked = true;
  };
  try {
    if (me == 0) {
      name = segment_name(g.id());
      unlinked = false;  // removed below on every path (ENOENT when shm_open failed)
      const std::string why = map_named(name, bytes, /*create=*/true, &base);
      if (why.empty()) on_mapped(base);
      for (int p = 1; p < n; ++p)
        x->post(g.transport().irecv(x->world(p), x->tag(kConfirmStep), &x->status[p],
                                    sizeof(StatusMessage)));
      x->name.ok = why.empty() ? 1 : 0;
      put(x->name.text, sizeof x->name.text, why.empty() ? name : why);
      std::vector<Request*> sends;
      for (int p = 1; p < n; ++p)
        sends.push_back(&x->post(
            g.transport().isend(x->world(p), x->tag(kNameStep), &x->name, sizeof(NameMessage))));
      std::string failed = why.empty() ? "" : str("rank 0 could not create it: ", why);
      for (int p = 1; p < n; ++p) {
        x->wait(*x->requests[static_cast<size_t>(p - 1)], p, "map it");
        if (failed.empty() && x->status[p].ok != 1)
          failed = str("rank ", p, " could not map it: ", x->status[p].text);
      }
      remove_name();  // every rank mapped it, or gave up: the name has served
      x->ready.ok = failed.empty() ? 1 : 0;
      put(x->ready.text, sizeof x->ready.text, failed);
      for (int p = 1; p < n; ++p)
        x->post(g.transport().isend(x->world(p), x->tag(kReadyStep), &x->ready,
                                    sizeof(StatusMessage)));
      for (Request* s : sends) x->wait(*s, -1, "take the segment's name");
      for (size_t k = sends.size() + static_cast<size_t>(n - 1); k < x->requests.size(); ++k)
        x->wait(*x->requests[k], -1, "take the word that the segment is ready");
      if (!failed.empty())
        FERRY_THROW(TransportError, "shared memory of ", g.describe(), ": ", failed);
    } else {
      Request& got = x->post(
          g.transport().irecv(x->world(0), x->tag(kNameStep), &x->name, sizeof(NameMessage)));
      Request& ready = x->post(
          g.transport().irecv(x->world(0), x->tag(kReadyStep), &x->ready, sizeof(StatusMessage)));
      x->wait(got, 0, "send the segment's name");
      x->name.text[sizeof x->name.text - 1] = '\0';
      std::string why = x->name.ok == 1 ? "" : "rank 0 failed";
      if (x->name.ok == 1) {
        name = x->name.text;
        unlinked = false;  // removed by rank 0, or by us if the exchange fails
        why = map_named(name, bytes, /*create=*/false, &base);
        if (why.empty()) on_mapped(base);
      }
      StatusMessage& mine = x->status[static_cast<size_t>(me)];
      mine.ok = why.empty() ? 1 : 0;
      put(mine.text, sizeof mine.text, why);
      Request& sent =
          x->post(g.transport().isend(x->world(0), x->tag(kConfirmStep), &mine, sizeof mine));
      x->wait(ready, 0, "say that the segment is ready");
      x->wait(sent, 0, "take this rank's confirmation");
      unlinked = true;  // rank 0 removed it before it said ready
      x->ready.text[sizeof x->ready.text - 1] = '\0';
      if (x->name.ok != 1)
        FERRY_THROW(TransportError, "shared memory of ", g.describe(), ": ", x->name.text);
      if (x->ready.ok != 1)
        FERRY_THROW(TransportError, "shared memory of ", g.describe(), ": ", x->ready.text);
    }
  } catch (...) {
    remove_name();
    unmap(base, bytes);
    if (x->all_finished()) delete x;  // else left to the process, see Exchange
    throw;
  }
  delete x;
  FERRY_LOG(Info, "shm", g.describe(), ": shared segment of ", bytes, " B mapped by ", n,
            " rank(s); its name is removed");
  return SharedSegment(base, bytes);
}

bool SharedSegment::names_left_in_dev_shm(int creator) {
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return false;
  const std::string prefix =
      creator == 0 ? std::string(kNamePrefix) : str(kNamePrefix, creator, "-");
  bool found = false;
  while (dirent* e = readdir(dir)) {
    if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) found = true;
  }
  closedir(dir);
  return found;
}

}  // namespace ferry::detail::shm
