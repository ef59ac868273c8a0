#include <ferry/backends/world_handshake.h>

#include <ferry/backends/host_identity.h>
#include <ferry/runtime/error.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace ferry::detail {

namespace {

// Every rank sends `mine` (`bytes` long, possibly 0) to every other and receives theirs into
// `theirs` (bytes apart, by world rank; its own entry untouched).
void exchange(Transport& transport, Handshake which, Clock::time_point deadline, const void* mine,
              void* theirs, size_t bytes) {
  const int me = transport.rank(), n = transport.size();
  if (n == 1) return;
  const Tag tag{0, static_cast<uint32_t>(which), kLifecycleSeq, 0};
  const char* call = which == Handshake::Close ? "ferry::finalize" : "ferry::init";
  auto at = [&](int p) { return bytes == 0 ? nullptr : static_cast<char*>(theirs) + p * bytes; };
  // Receives first: a peer's message then never waits for its receive to be posted.
  std::vector<std::unique_ptr<Request>> recvs(static_cast<size_t>(n)), sends(recvs.size());
  for (int p = 0; p < n; ++p)
    if (p != me) recvs[p] = transport.irecv(p, tag, at(p), bytes);
  for (int p = 0; p < n; ++p)
    if (p != me) sends[p] = transport.isend(p, tag, mine, bytes);
  std::vector<int> absent;
  std::exception_ptr failed;
  int failed_rank = -1;
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    if (!recvs[p]->wait_until(deadline)) {
      absent.push_back(p);
      continue;
    }
    try {
      recvs[p]->rethrow_if_failed();
    } catch (...) {
      if (!failed) {
        failed = std::current_exception();
        failed_rank = p;
      }
    }
  }
  if (failed) {
    rethrow_with_prefix(failed, str(call, " on rank ", me, " of ", n, ": rank ", failed_rank,
                                    " ended before it reached ", call, ": "));
  }
  if (!absent.empty()) {
    std::string ranks;
    for (int p : absent) ranks += (ranks.empty() ? "" : ", ") + std::to_string(p);
    FERRY_THROW(TimeoutError, call, " on rank ", me, " of ", n, ": rank", absent.size() > 1 ? "s " : " ",
                ranks, " did not reach ", call, " before the deadline (FERRY_TIMEOUT); every rank "
                "must call it (a rank that returns from main calls finalize at exit)");
  }
  // Every peer was heard from: our messages only need to have left (a peer that heard from
  // everyone may end at once, and its end may fail a send that it already took).
  for (int p = 0; p < n; ++p)
    if (p != me) (void)sends[p]->wait_until(deadline);
}

}  // namespace

void world_handshake(Transport& transport, Handshake which, Clock::time_point deadline) {
  exchange(transport, which, deadline, nullptr, nullptr, 0);
}

void exchange_host_keys(Transport& transport, Clock::time_point deadline) {
  const int me = transport.rank(), n = transport.size();
  if (transport.host_key(me) != 0) return;  // learnt already (a second world on one transport)
  // Freed only once the exchange succeeded: when it fails, a receive the transport could not
  // withdraw may still write into it, so it is then left to the process (8 B a rank).
  auto* keys = new std::vector<uint64_t>(static_cast<size_t>(n), 0);
  (*keys)[me] = this_host_key();
  exchange(transport, Handshake::HostKeys, deadline, &(*keys)[me], keys->data(),
           sizeof(uint64_t));
  // Moved, not copied: a send still leaving reads the same memory, now the transport's.
  transport.set_host_keys(std::move(*keys));
  delete keys;
}

}  // namespace ferry::detail

namespace ferry::detail {

// What a finalizing rank sends: fixed size (a receive is posted for exactly it), the first
// kMaxGroups groups of the rank; `complete` says whether that is all of them.
struct CloseWatch::Payload {
  static constexpr uint32_t kMagic = 0x66436c73;  // "fCls"
  static constexpr size_t kMaxGroups = 63;
  uint32_t magic = kMagic;
  uint32_t count = 0;
  uint32_t complete = 0;
  // kWorldFailed: sent by notify(), from a rank whose world failed, which skips the handshake.
  static constexpr uint32_t kWorldFailed = 1;
  uint32_t flags = 0;
  // Entry::flags: bit 0 GroupProgress::failed, the bits above failed_waiting_for + 1.
  static constexpr uint32_t kFailed = 1;
  struct Entry {
    uint32_t group = 0;
    uint32_t flags = 0;
    uint64_t issued = 0;
  } entries[kMaxGroups];
};


namespace {

Tag close_tag() { return Tag{0, static_cast<uint32_t>(Handshake::Close), kLifecycleSeq, 0}; }

std::mutex g_watch_mu;
std::shared_ptr<CloseWatch> g_watch;

}  // namespace

CloseWatch::CloseWatch(std::shared_ptr<Transport> transport)
    : transport_(std::move(transport)) {
  static_assert(sizeof(Payload) == 1024);
  const int n = transport_->size(), me = transport_->rank();
  recvs_.resize(static_cast<size_t>(n));
  sends_.resize(static_cast<size_t>(n));
  got_.assign(static_cast<size_t>(n), std::vector<char>(sizeof(Payload)));
  state_.assign(static_cast<size_t>(n), 0);
  for (int p = 0; p < n; ++p)
    if (p != me) recvs_[p] = transport_->irecv(p, close_tag(), got_[p].data(), sizeof(Payload));
}

CloseWatch::~CloseWatch() {
  std::lock_guard<std::mutex> lock(mu_);
  // All at once: a send to a stopped peer costs its transport's grace once, not once per peer.
  cancel_all(sends_);
  if (!cancel_all(recvs_)) {
    // A payload still being written into (a receive the transport could not withdraw) is
    // never freed.
    static auto* kept = new std::vector<std::vector<std::vector<char>>>();
    kept->push_back(std::move(got_));
  }
}

void CloseWatch::poll_locked(int peer) {
  if (state_[peer] != 0 || !recvs_[peer]->test()) return;
  try {
    recvs_[peer]->rethrow_if_failed();
    Payload p;
    std::memcpy(&p, got_[peer].data(), sizeof(Payload));
    state_[peer] = p.magic == Payload::kMagic && p.count <= Payload::kMaxGroups ? 1 : 2;
  } catch (...) {
    state_[peer] = 2;  // the peer died or gave up: the transport's own errors report that
  }
}

std::string CloseWatch::departed_before(uint32_t group, int peer, uint64_t seq) {
  // Never waits: finalize's handshake holds the lock while it waits, and a wait that asks here
  // (another thread's op, the progress thread) tries again in its next slice.
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return "";
  if (peer < 0 || peer >= static_cast<int>(recvs_.size()) || !recvs_[peer]) return "";
  poll_locked(peer);
  if (state_[peer] != 1) return "";
  Payload p;
  std::memcpy(&p, got_[peer].data(), sizeof(Payload));
  const std::string why = str("rank ", peer, " entered ferry::finalize() (called, or at exit ",
                              "after its main returned) ");
  for (uint32_t i = 0; i < p.count; ++i) {
    if (p.entries[i].group != group) continue;
    if (seq < p.entries[i].issued) return "";
    return str(why, "having issued ", p.entries[i].issued, " collective",
               p.entries[i].issued == 1 ? "" : "s", " on this group: it never takes part in seq ",
               seq);
  }
  if (p.complete == 0) return "";
  return str(why, "no longer holding this group: it never takes part in seq ", seq);
}

void CloseWatch::send_all(const std::vector<GroupProgress>& mine, uint32_t flags) {
  Payload p;
  p.flags = flags;
  p.count = static_cast<uint32_t>(std::min(mine.size(), Payload::kMaxGroups));
  p.complete = mine.size() <= Payload::kMaxGroups ? 1 : 0;
  for (uint32_t i = 0; i < p.count; ++i) {
    const uint32_t flags = (mine[i].failed ? Payload::kFailed : 0) |
                           (static_cast<uint32_t>(mine[i].failed_waiting_for + 1) << 1);
    p.entries[i] = {mine[i].group, flags, mine[i].issued};
  }
  sent_.resize(sizeof(Payload));
  std::memcpy(sent_.data(), &p, sizeof(Payload));
  const int n = transport_->size(), me = transport_->rank();
  for (int q = 0; q < n; ++q) {
    if (q != me && !sends_[q])
      sends_[q] = transport_->isend(q, close_tag(), sent_.data(), sent_.size());
  }
}

std::string CloseWatch::close(const std::vector<GroupProgress>& mine, Clock::time_point deadline) {
  std::lock_guard<std::mutex> lock(mu_);
  const int me = transport_->rank(), n = transport_->size();
  const char* call = "ferry::finalize";
  send_all(mine, 0);
  std::vector<int> absent;
  std::exception_ptr failed;
  int failed_rank = -1;
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    if (!recvs_[p]->wait_until(deadline)) {
      absent.push_back(p);
      continue;
    }
    try {
      recvs_[p]->rethrow_if_failed();
    } catch (...) {
      if (!failed) {
        failed = std::current_exception();
        failed_rank = p;
      }
    }
  }
  if (failed) {
    rethrow_with_prefix(failed, str(call, " on rank ", me, " of ", n, ": rank ", failed_rank,
                                    " ended before it reached ", call, ": "));
  }
  if (!absent.empty()) {
    std::string ranks;
    for (int p : absent) ranks += (ranks.empty() ? "" : ", ") + std::to_string(p);
    FERRY_THROW(TimeoutError, call, " on rank ", me, " of ", n, ": rank",
                absent.size() > 1 ? "s " : " ", ranks, " did not reach ", call,
                " before the deadline (FERRY_TIMEOUT); every rank must call it (a rank that "
                "returns from main calls finalize at exit)");
  }
  // As world_handshake: every peer was heard from, our messages only need to have left.
  for (int p = 0; p < n; ++p)
    if (p != me) (void)sends_[p]->wait_until(deadline);
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    Payload other;
    std::memcpy(&other, got_[p].data(), sizeof(Payload));
    if (other.magic == Payload::kMagic && (other.flags & Payload::kWorldFailed) != 0)
      peer_world_failed_ = true;
  }
  // Every rank issues the same collectives on a group, so every rank ends with the same count.
  // A rank that skipped one had its next call combined with the others' skipped one, without
  // any error when the two calls were alike; this is the last moment the ranks can compare.
  return compare_progress_locked(mine);
}

std::string CloseWatch::compare_progress_locked(const std::vector<GroupProgress>& mine) const {
  const int me = transport_->rank();
  for (const GroupProgress& g : mine) {
    for (int p : g.members) {
      if (p == me || p < 0 || p >= static_cast<int>(state_.size()) || state_[p] == 2) continue;
      Payload other;
      std::memcpy(&other, got_[p].data(), sizeof(Payload));
      if (other.magic != Payload::kMagic || other.count > Payload::kMaxGroups) continue;
      for (uint32_t i = 0; i < other.count; ++i) {
        const Payload::Entry& e = other.entries[i];
        if (e.group != g.group) continue;
        GroupProgress theirs;
        theirs.group = e.group;
        theirs.issued = e.issued;
        theirs.failed = (e.flags & Payload::kFailed) != 0;
        theirs.failed_waiting_for = static_cast<int>(e.flags >> 1) - 1;
        std::string differs = progress_mismatch(me, g, p, theirs);
        if (!differs.empty()) return differs;
      }
    }
  }
  return "";
}

std::string progress_mismatch(int a, const GroupProgress& ga, int b, const GroupProgress& gb) {
  if (ga.failed || ga.issued == gb.issued) return "";
  // Where `b` failed for another reason, or `a` issued more, `b` raised the error itself.
  const bool waited_for_a = gb.failed_waiting_for == a && ga.issued > 0 && ga.issued < gb.issued;
  if (gb.failed && !waited_for_a) return "";
  return str("the ranks did not issue the same collectives on group ", ga.group, ": rank ", a,
             " issued ", ga.issued, ", rank ", b, " issued ", gb.issued,
             gb.failed ? str(" and failed waiting for rank ", a, "'s seq ", ga.issued) : "",
             " (every rank must issue the same collectives in the same order; a rank that "
             "skipped one had its later calls combined with the others' earlier ones, so its "
             "results since the skipped call are not the collectives it asked for)");
}

void CloseWatch::notify(const std::vector<GroupProgress>& mine, Clock::time_point deadline) {
  std::lock_guard<std::mutex> lock(mu_);
  try {
    send_all(mine, Payload::kWorldFailed);
  } catch (...) {
    return;  // best effort
  }
  // A notice is small: a transport hands it over at once (eagerly) unless the peer's queue is
  // full because that peer does not drain it (stopped, or stuck outside ferry), and then it
  // would wait until `deadline` for nothing. So the wait also ends once no send has completed
  // for kNoticeStall: the rest go to peers not taking messages (their own deadlines end them).
  constexpr auto kNoticeStall = std::chrono::milliseconds(50);
  constexpr auto kSlice = std::chrono::milliseconds(5);
  size_t left = sends_.size() + 1;
  auto last_progress = Clock::now();
  for (;;) {
    Request* waiting = nullptr;
    size_t now_left = 0;
    for (auto& s : sends_) {
      if (!s || s->test()) continue;
      ++now_left;
      if (waiting == nullptr) waiting = s.get();
    }
    const auto now = Clock::now();
    if (now_left < left) {
      left = now_left;
      last_progress = now;
    }
    if (waiting == nullptr || now >= deadline || now - last_progress >= kNoticeStall) return;
    (void)waiting->wait_until(std::min(deadline, now + kSlice));
  }
}

bool CloseWatch::peer_world_failed() {
  std::lock_guard<std::mutex> lock(mu_);
  return peer_world_failed_;
}

void set_close_watch(std::shared_ptr<CloseWatch> watch) {
  std::lock_guard<std::mutex> lock(g_watch_mu);
  g_watch = std::move(watch);
}

std::shared_ptr<CloseWatch> close_watch() {
  std::lock_guard<std::mutex> lock(g_watch_mu);
  return g_watch;
}

}  // namespace ferry::detail
