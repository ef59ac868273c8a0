// The algorithm table's choice for an op, made when it is issued (internal).
//
// Every collective in ops/ asks here once, on the issuing thread, before it takes a sequence
// number: the table (algorithm_table.h) answers an enum from what all ranks agree on, and the
// op's body switches on it. An op records the algorithm it ran (GroupImpl::count_run) where
// that algorithm runs, so a test sees what ran rather than what was asked for.
//
// The transport's own ways (Native, Persistent, Exchange) are one call of the transport's
// NativeCollectives per op, told the way the table chose; each op writes that call once
// (call_native), for its start at issue and its queued body alike.
#pragma once

#include <ferry/collectives/algorithm_table.h>
#include <ferry/collectives/engine/group_impl.h>
#include <ferry/collectives/group.h>
#include <ferry/runtime/error.h>

namespace ferry::detail {

// Where a tensor's bytes start.
inline char* data_of(Tensor& t) { return static_cast<char*>(t.raw_data()); }
inline const char* data_of(const Tensor& t) { return static_cast<const char*>(t.raw_data()); }

// The elements of one row (dim 0 index), which must agree across ranks whose rows may differ.
inline int64_t elements_per_row(const Tensor& t) {
  int64_t n = 1;
  for (int64_t d = 1; d < t.dim(); ++d) n *= t.size(d);
  return n;
}

// The table's choice for `c` on `group`. Every form of a collective the table may give shared
// memory has a path there (all_reduce, reduce, reduce_scatter, all_gather, broadcast, barrier,
// and all_to_all single, laid out and of lists); gather and scatter are never given it.
inline Algorithm algorithm_of(const Group& group, Collective c, size_t bytes) {
  const GroupImpl& g = group.impl();
  return choose_algorithm(c, bytes, group.size(), g.native() != nullptr, g.placement());
}

// The table's choice among the transport's own ways, as the transport is told it.
constexpr NativePath native_path(Algorithm a) {
  return a == Algorithm::Persistent ? NativePath::Persistent
         : a == Algorithm::Exchange ? NativePath::Exchange
                                    : NativePath::Call;
}
constexpr Algorithm algorithm_of(NativePath p) {
  return p == NativePath::Persistent ? Algorithm::Persistent
         : p == NativePath::Exchange ? Algorithm::Exchange
                                     : Algorithm::Native;
}

// Starts `c` by `call(native, path)` on the way `a` asks for, and records the way the
// transport took (it falls to the next when the op's form or size does not fit the one asked
// for). A call that refuses the op (InvalidArgument) records nothing.
template <class Call>
std::unique_ptr<NativeRequest> call_native(GroupImpl& g, Collective c, Algorithm a,
                                           Call&& call) {
  NativePath path = native_path(a);
  std::unique_ptr<NativeRequest> request = call(*g.native(), path);
  g.count_run(c, algorithm_of(path));
  return request;
}

// A transport's request followed by a step of ferry's own (an average's division, a laid-out
// receive's unpacking), run once by whichever test or wait first sees the request finished, and
// only if it succeeded: a failed request leaves the outputs as the failure left them. A
// subclass sets `inner_` in its constructor.
class NativeRequestThen : public NativeRequest {
 public:
  bool test() override { return then_if(inner_->test()); }
  bool wait_until(Clock::time_point deadline) override {
    return then_if(inner_->wait_until(deadline));
  }
  void rethrow_if_failed() override { inner_->rethrow_if_failed(); }
  void give_up() override { inner_->give_up(); }

 protected:
  virtual void after_success() = 0;
  std::unique_ptr<NativeRequest> inner_;

 private:
  bool then_if(bool finished) {
    if (finished && !done_) {
      done_ = true;
      try {
        inner_->rethrow_if_failed();
      } catch (...) {
        return true;
      }
      after_success();
    }
    return finished;
  }
  bool done_ = false;
};

// For a switch's default: the table gave `c` an algorithm its op has no code for (the table
// and the op disagree; the parse refuses such a choice before it gets here).
[[noreturn]] inline void no_such_algorithm(Collective c, Algorithm a) {
  FERRY_THROW(InvalidArgument, collective_name(c), " has no algorithm ", algorithm_name(a),
              " (internal error: the algorithm table lists one its op does not run)");
}

}  // namespace ferry::detail
