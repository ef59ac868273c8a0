#include <ferry/backends/ucx/ucx_cma.h>

#include <ferry/backends/ucx/ucx_tag.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/object_pool.h>

#include <limits.h>
#include <sys/random.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

namespace ferry::detail {
namespace {

constexpr uint32_t kDescriptorMagic = 0x414D'4346;  // "FCMA"
constexpr uint32_t kAckMagic = 0x4B43'4146;         // "FACK"
constexpr uint16_t kVersion = 1;

struct DescriptorWire {
  uint32_t magic;
  uint16_t version;
  uint16_t reserved;
  uint64_t cookie;
  uint64_t address;
  uint64_t bytes;
};
static_assert(sizeof(DescriptorWire) == 32 && sizeof(DescriptorWire) == kCmaDescriptorBytes);

struct AckWire {
  uint32_t magic;
  uint16_t version;
  uint16_t status;
  uint64_t cookie;
  uint64_t value;
};
static_assert(sizeof(AckWire) == kCmaAckBytes);

// What a failed process_vm_readv means (a read that moved nothing counts as EFAULT).
CmaReadResult read_failure(ssize_t n) {
  const int e = n == 0 ? EFAULT : errno;
  if (e == EPERM || e == EACCES || e == ENOSYS) return {CmaReadOutcome::Refused, e};
  if (e == ESRCH) return {CmaReadOutcome::Gone, e};
  return {CmaReadOutcome::Failed, e};
}

bool cookie_valid(uint64_t cookie) { return cookie >= 1 && cookie <= kUcxMaxCmaCookie; }

// Copies `bytes` of `data` into `w` and checks what every message of the protocol carries:
// its size, `magic`, the version and the cookie. False with `error` saying what is wrong.
template <class Wire>
bool read_wire(const void* data, size_t bytes, const char* what, uint32_t magic, Wire& w,
               std::string& error) {
  if (data == nullptr || bytes != sizeof w) {
    error = str(what, " is ", sizeof w, " bytes, this one ", bytes);
    return false;
  }
  std::memcpy(&w, data, sizeof w);
  if (w.magic != magic) {
    error = str("bad magic ", hex(w.magic));
  } else if (w.version != kVersion) {
    error = str("version ", w.version, " (this build speaks ", kVersion, ")");
  } else if (!cookie_valid(w.cookie)) {
    error = str("cookie ", w.cookie, " out of range");
  } else {
    return true;
  }
  return false;
}

}  // namespace

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

void encode_cma_descriptor(const CmaDescriptor& d, unsigned char (&out)[kCmaDescriptorBytes]) {
  const DescriptorWire w{kDescriptorMagic, kVersion, 0, d.cookie, d.address, d.bytes};
  std::memcpy(out, &w, sizeof w);
}

std::optional<CmaDescriptor> decode_cma_descriptor(const void* data, size_t bytes,
                                                   std::string& error) {
  DescriptorWire w{};
  if (!read_wire(data, bytes, "a descriptor", kDescriptorMagic, w, error)) return std::nullopt;
  if (w.address == 0 || w.bytes == 0 || w.address + w.bytes < w.address) {
    error = str("address range ", hex(w.address), " + ", w.bytes, " bytes is empty or wraps");
    return std::nullopt;
  }
  return CmaDescriptor{w.cookie, w.address, w.bytes};
}

void encode_cma_ack(const CmaAck& a, unsigned char (&out)[kCmaAckBytes]) {
  const AckWire w{kAckMagic, kVersion, static_cast<uint16_t>(a.status), a.cookie, a.value};
  std::memcpy(out, &w, sizeof w);
}

std::optional<CmaAck> decode_cma_ack(const void* data, size_t bytes, std::string& error) {
  AckWire w{};
  if (!read_wire(data, bytes, "an acknowledgement", kAckMagic, w, error)) return std::nullopt;
  if (w.status < static_cast<uint16_t>(CmaAckStatus::Done) ||
      w.status > static_cast<uint16_t>(CmaAckStatus::ReadFailed)) {
    error = str("unknown status ", w.status);
    return std::nullopt;
  }
  return CmaAck{w.cookie, static_cast<CmaAckStatus>(w.status), w.value};
}

CmaReadResult cma_read(uint32_t pid, uint64_t remote, void* local, size_t bytes) {
  // One call usually moves everything; the kernel stops early at an unmapped page or a signal,
  // and the loop then resumes where it stopped (a read that moves nothing is an error).
  auto* out = static_cast<char*>(local);
  size_t done = 0;
  while (done < bytes) {
    iovec to{out + done, bytes - done};
    iovec from{reinterpret_cast<void*>(remote + done), bytes - done};
    const ssize_t n = process_vm_readv(static_cast<pid_t>(pid), &to, 1, &from, 1, 0);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return read_failure(n);
  }
  return {CmaReadOutcome::Done, 0};
}

CmaReadResult cma_read_scattered(uint32_t pid, uint64_t remote, const ByteLayout& to) {
  // The pieces in order, as iovecs, at most IOV_MAX per call; the remote side is the one
  // contiguous range they fill. A partial read resumes at the piece and offset where it stopped.
  // A list from this thread's spares (no allocation per read), safe to take from an exit
  // handler, unlike a plain thread_local, which the main thread's exit destroys first.
  ScopedSpare<std::vector<iovec>> spare;
  std::vector<iovec>& pieces = *spare;
  for (const ByteRun& r : to.runs)
    for (size_t j = 0; r.block > 0 && j < r.count; ++j)
      pieces.push_back(iovec{to.base + r.offset + j * r.stride, r.block});
  size_t next = 0, done = 0;
  while (next < pieces.size()) {
    const size_t n = std::min<size_t>(pieces.size() - next, IOV_MAX);
    size_t want = 0;
    for (size_t j = next; j < next + n; ++j) want += pieces[j].iov_len;
    iovec from{reinterpret_cast<void*>(remote + done), want};
    const ssize_t got = process_vm_readv(static_cast<pid_t>(pid), &pieces[next], n, &from, 1, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return read_failure(got);
    done += static_cast<size_t>(got);
    for (size_t left = static_cast<size_t>(got); left > 0;) {
      iovec& p = pieces[next];
      const size_t step = std::min(left, p.iov_len);
      p.iov_base = static_cast<char*>(p.iov_base) + step;
      p.iov_len -= step;
      left -= step;
      if (p.iov_len == 0) ++next;
    }
  }
  return {CmaReadOutcome::Done, 0};
}

bool cma_worth_scattering(const ByteLayout& l) {
  size_t pieces = 0;
  for (const ByteRun& r : l.runs)
    if (r.block > 0) pieces += r.count;
  return pieces > 0 && l.bytes() / pieces >= kCmaScatterMinPiece;
}

const CmaToken& cma_self_token() {
  // The value lives in this static array (its address is published); the CmaToken copy says
  // where it is and what it holds.
  static unsigned char held[kCmaTokenBytes];
  static const CmaToken token = [] {
    size_t got = 0;
    while (got < sizeof held) {
      const ssize_t n = getrandom(held + got, sizeof held - got, 0);
      if (n > 0) {
        got += static_cast<size_t>(n);
      } else if (n < 0 && errno != EINTR) {
        break;
      }
    }
    if (got < sizeof held) {  // no getrandom (an old kernel, seccomp): the C++ library's source
      std::random_device rd;
      for (unsigned char& b : held) b = static_cast<unsigned char>(rd());
    }
    // Only other processes read `held`: keep the compiler from dropping the stores.
    __asm__ __volatile__("" : : "r"(held) : "memory");
    CmaToken t;
    t.address = reinterpret_cast<uint64_t>(held);
    std::memcpy(t.value, held, sizeof held);
    return t;
  }();
  return token;
}

bool cma_token_matches(uint32_t pid, const CmaToken& token, std::string& why) {
  unsigned char seen[kCmaTokenBytes] = {};
  if (token.address == 0) {
    why = "it published no token";
    return false;
  }
  const CmaReadResult r = cma_read(pid, token.address, seen, sizeof seen);
  if (r.outcome != CmaReadOutcome::Done) {
    why = str("its token could not be read (", std::strerror(r.error), ")");
    return false;
  }
  if (std::memcmp(seen, token.value, sizeof seen) != 0) {
    why = str("pid ", pid, " holds another token: another process (another pid namespace?)");
    return false;
  }
  return true;
}

CmaCounters& cma_counters() {
  static CmaCounters counters;
  return counters;
}

}  // namespace ferry::detail
