#include <ferry/backends/transport.h>

#include <ferry/runtime/error.h>
#include <ferry/runtime/object_pool.h>
#include <ferry/runtime/tensor.h>

#include <mutex>
#include <vector>

namespace ferry {
namespace {

void keep_for_life(Tensor t) {
  static std::mutex mu;
  static auto* kept = new std::vector<Tensor>();  // never destroyed, on purpose
  std::lock_guard<std::mutex> lock(mu);
  kept->push_back(std::move(t));
}

// isend_layout / irecv_layout of a transport without layouts of its own: a layout that is one
// contiguous span goes as plain bytes; any other through a contiguous staging buffer, packed
// before the send is posted, unpacked once the receive succeeded. The staging is a tensor, as in
// the native path, so it comes from the block cache: a fresh zero-filled std::vector<char> per
// message cost a zero fill, and above 128 KiB an mmap and its page faults, on every call. The
// request itself comes from the thread's pool (object_pool.h).
class StagedRequest final : public Request, public detail::Pooled {
 public:
  StagedRequest(int peer, bool is_send, ByteLayout layout)
      : Request(peer, is_send),
        layout_(std::move(layout)),
        staging_(empty({static_cast<int64_t>(layout_.bytes())}, DType::UInt8)) {
    if (is_send_) pack_layout(layout_, staging());
  }
  char* staging() { return static_cast<char*>(staging_.raw_data()); }
  size_t bytes() const { return staging_.nbytes(); }
  const ByteLayout& layout() const { return layout_; }
  void start(std::unique_ptr<Request> inner) { inner_ = std::move(inner); }

  bool test() override { return unpack_if(inner_->test()); }
  bool wait_until(Clock::time_point deadline) override {
    return unpack_if(inner_->wait_until(deadline));
  }
  void cancel() override { inner_->cancel(); }
  void start_cancel() override { inner_->start_cancel(); }
  void cancel_by(Clock::time_point limit) override { inner_->cancel_by(limit); }
  bool let_go() const override { return inner_->let_go(); }
  ~StagedRequest() override {
    if (!inner_) return;
    inner_->cancel();
    // The transport may still write into the staging: it lives as long as the process.
    if (!inner_->let_go()) keep_for_life(std::move(staging_));
  }
  void rethrow_if_failed() override { inner_->rethrow_if_failed(); }

 private:
  // Once, and only after success: a failed receive leaves the caller's buffer alone.
  bool unpack_if(bool finished) {
    if (finished && !is_send_ && !unpacked_) {
      unpacked_ = true;
      try {
        inner_->rethrow_if_failed();
      } catch (...) {
        return true;
      }
      if (!inner_->filled_layout()) unpack_layout(staging(), layout_);
    }
    return finished;
  }

  ByteLayout layout_;
  Tensor staging_;
  std::unique_ptr<Request> inner_;  // declared last, so destroyed before the staging it uses
  bool unpacked_ = false;
};

}  // namespace

std::unique_ptr<Request> Transport::isend_layout(int dst, const Tag& tag, ByteLayout layout) {
  if (const char* span = contiguous_span(layout)) return isend(dst, tag, span, layout.bytes());
  auto request = std::make_unique<StagedRequest>(dst, true, std::move(layout));
  request->start(isend(dst, tag, request->staging(), request->bytes()));
  return request;
}

std::unique_ptr<Request> Transport::irecv_layout(int src, const Tag& tag, ByteLayout layout) {
  if (char* span = contiguous_span(layout)) return irecv(src, tag, span, layout.bytes());
  auto request = std::make_unique<StagedRequest>(src, false, std::move(layout));
  request->start(irecv_staged(src, tag, request->staging(), request->bytes(), request->layout()));
  return request;
}

std::string tag_str(const Tag& tag) {
  if (tag.seq == kP2PSeq) return detail::str("group ", tag.group, " send/recv tag ", tag.slot);
  if (tag.seq == kDiagnosisSeq) return detail::str("group ", tag.group, " timeout diagnosis");
  if (tag.seq == kLifecycleSeq)
    return tag.slot == 2
               ? std::string("the host keys' exchange of a new world group")
               : detail::str("the world handshake of ", tag.slot == 0 ? "init" : "finalize");
  return detail::str("group ", tag.group, " seq ", tag.seq, " step ", tag.slot);
}

void Transport::adopt_group_id(uint32_t id) {
  uint32_t next = next_group_id_.load();
  while (next <= id && !next_group_id_.compare_exchange_weak(next, id + 1)) {
  }
}

}  // namespace ferry
