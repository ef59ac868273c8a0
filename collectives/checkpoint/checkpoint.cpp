// The parts of checkpoints that saving and loading share: the collective decision (agree), the
// names of checkpoint directories and the listing of a root.
#include "collectives/checkpoint/checkpoint.h"

#include "collectives/checkpoint/checkpoint_internal.h"

#include <ferry/collectives/collectives.h>
#include <ferry/runtime/error.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace ferry::checkpoint {

namespace detail {

std::string errno_text(int e) { return std::strerror(e); }

std::string inner(const std::string& m) { return m.rfind("ferry: ", 0) == 0 ? m.substr(7) : m; }

[[noreturn]] void fail(const std::string& what) { throw InvalidArgument("ferry: " + what); }

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "ckpt-%08lld", static_cast<long long>(step));
  return buf;
}

int64_t step_of(const std::string& name) {
  if (name.rfind("ckpt-", 0) != 0 || name.size() <= 5 || name.size() > 5 + 19) return -1;
  int64_t v = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, name[i] - '0', &v))
      return -1;
  }
  return v;
}

std::vector<std::pair<int64_t, std::string>> committed(const std::string& root) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  std::filesystem::directory_iterator it(root, ec), end;
  if (ec) return out;
  for (; it != end; it.increment(ec)) {
    if (ec) break;
    const std::string name = it->path().filename().string();
    const int64_t step = step_of(name);
    if (step < 0) continue;
    std::error_code e2;
    if (std::filesystem::is_regular_file(it->path() / "metadata", e2))
      out.emplace_back(step, name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string broadcast_string(const Group& group, int root, const std::string& s) {
  Tensor len = full({1}, group.rank() == root ? static_cast<double>(s.size()) : 0.0, DType::Int64);
  broadcast(len, root, group).wait();
  const auto n = static_cast<int64_t>(len.item());
  if (n <= 0) return "";
  Tensor bytes = empty({n}, DType::UInt8);
  if (group.rank() == root) std::memcpy(bytes.raw_data(), s.data(), static_cast<size_t>(n));
  broadcast(bytes, root, group).wait();
  return std::string(static_cast<const char*>(bytes.raw_data()), static_cast<size_t>(n));
}

}  // namespace detail

using namespace detail;

void agree(const Group& group, const std::string& what, const std::function<void()>& fn) {
  std::string message;
  bool failed = false;
  try {
    fn();
  } catch (const TimeoutError&) {
    throw;
  } catch (const PeerFailure&) {
    throw;
  } catch (const TransportError&) {
    throw;
  } catch (const MismatchError&) {
    throw;
  } catch (const std::exception& e) {
    failed = true;
    message = inner(e.what());
  } catch (...) {
    failed = true;
    message = "unknown exception";
  }
  const int W = group.size();
  Tensor first = full({1}, failed ? group.rank() : W, DType::Int64);
  all_reduce(first, group, ReduceOp::Min).wait();
  const int r = static_cast<int>(first.item());
  if (r >= W) return;
  if (message.size() > 16384) message.resize(16384);
  const std::string shared = broadcast_string(group, r, message);
  std::string where = inner(what);
  throw InvalidArgument("ferry: " + where + ": rank " + std::to_string(r) + ": " + shared);
}

std::string latest(const std::string& root) {
  const auto c = committed(root);
  return c.empty() ? std::string() : root + "/" + c.back().second;
}

}  // namespace ferry::checkpoint
