// A failed op whose transport could not confirm that it let go of a message keeps that
// message's memory for the rest of the process: the caller's tensors, and the buffers the op's
// body allocated itself (all_gather_v's size exchange and its output), which would otherwise be
// freed as the body unwinds and handed to the next allocation while the transport may still
// write into them (a receive) or read them (a send MPI cannot cancel).
//
// The transport here is rank 0 of a world whose other ranks exist only in it: deterministic,
// one thread, no deadline involved.
#include <ferry/backends/transport.h>
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/engine/group_impl.h>
#include <ferry/collectives/engine/op_context.h>
#include <ferry/collectives/group.h>
#include <ferry/runtime/block_cache.h>
#include <ferry/runtime/config.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/tensor.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

using namespace ferry;

namespace {

// What the scripted transport did with the message it could not withdraw.
struct Stuck {
  void* data = nullptr;
  size_t bytes = 0;
  bool posted = false;
};

// A request that finished: successfully, or (`fails`) as a receive whose peer died while its
// data was arriving, which the transport then never confirms it let go of (`kept`).
class Scripted final : public Request {
 public:
  Scripted(int peer, bool is_send, bool fails, bool kept)
      : Request(peer, is_send), fails_(fails), kept_(kept) {}
  bool test() override { return true; }
  bool wait_until(Clock::time_point) override { return true; }
  void cancel() override {}
  bool let_go() const override { return !kept_; }
  void rethrow_if_failed() override {
    if (fails_) throw PeerFailure("ferry: world rank 1 died while its message was arriving");
  }

 private:
  bool fails_, kept_;
};

// A send or receive still under way that the transport cannot withdraw (MPICH cannot cancel a
// send; a receive whose data is moving): it never finishes, and after a cancel let_go() is false.
class Unwithdrawable final : public Request {
 public:
  Unwithdrawable(int peer, bool is_send) : Request(peer, is_send) {}
  bool test() override { return false; }
  bool wait_until(Clock::time_point) override { return false; }
  void cancel() override { cancelled_ = true; }
  bool let_go() const override { return !cancelled_; }
  void rethrow_if_failed() override {}

 private:
  bool cancelled_ = false;
};

// Rank 0 of `size` ranks. Sends complete at once. all_gather_v's size exchange (phase 0) is
// answered with (`rows` rows of `row_numel` elements) for rank 1 and no rows for the others.
// The receive from rank 1 in phase `fail_phase` fails and is never let go of.
class ScriptedTransport final : public Transport {
 public:
  ScriptedTransport(int size, int fail_phase, int64_t rows, int64_t row_numel)
      : size_(size), fail_phase_(fail_phase), rows_(rows), row_numel_(row_numel) {}
  std::string name() const override { return "scripted"; }
  int rank() const override { return 0; }
  int size() const override { return size_; }
  std::unique_ptr<Request> isend(int dst, const Tag&, const void*, size_t) override {
    return std::make_unique<Scripted>(dst, true, false, false);
  }
  std::unique_ptr<Request> irecv(int src, const Tag& tag, void* data, size_t bytes) override {
    const int phase = static_cast<int>(tag.slot >> 24);
    if (src == 1 && phase == fail_phase_) {
      stuck = Stuck{data, bytes, true};
      return std::make_unique<Scripted>(src, false, true, true);
    }
    if (phase == 0 && bytes == 2 * sizeof(int64_t)) {
      const int64_t entry[2] = {src == 1 ? rows_ : 0, row_numel_};
      std::memcpy(data, entry, sizeof(entry));
    }
    return std::make_unique<Scripted>(src, false, false, false);
  }
  Stuck stuck;

 private:
  int size_, fail_phase_;
  int64_t rows_, row_numel_;
};

// Rank 0 of 2 whose messages never finish and are never let go of once withdrawn.
class NeverTransport final : public Transport {
 public:
  std::string name() const override { return "never"; }
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::unique_ptr<Request> isend(int dst, const Tag&, const void*, size_t) override {
    return std::make_unique<Unwithdrawable>(dst, true);
  }
  std::unique_ptr<Request> irecv(int src, const Tag&, void*, size_t) override {
    return std::make_unique<Unwithdrawable>(src, false);
  }
};

class ScopedCheckMode {
 public:
  explicit ScopedCheckMode(bool on) : previous_(check_mode()) { set_check_mode(on); }
  ~ScopedCheckMode() { set_check_mode(previous_); }
  ScopedCheckMode(const ScopedCheckMode&) = delete;
  ScopedCheckMode& operator=(const ScopedCheckMode&) = delete;

 private:
  bool previous_;
};

// Runs all_gather_v on rank 0 of `transport`'s world, which fails, then allocates a block of
// the size of the op's buffer that the stuck receive wrote into: true when it is that buffer
// (freed, the block cache hands it to the next request of its size), false when it was kept.
bool stuck_buffer_reused(const std::shared_ptr<ScriptedTransport>& transport, size_t block_bytes) {
  ScopedCheckMode unchecked(false);  // the scripted peers send no fingerprints
  release_cached_blocks();           // no other block of that size to hand out instead
  {
    Group world = Group::world(transport);
    Tensor input = ones({1, 256});
    Work work = all_gather_v(input, world);
    CHECK_THROWS_AS(work.wait(), PeerFailure);
  }
  REQUIRE(transport->stuck.posted);
  // The op's buffer began at most one row of rank 0 before the stuck receive's place.
  const char* stuck = static_cast<const char*>(transport->stuck.data);
  Tensor probe = empty({static_cast<int64_t>(block_bytes)}, DType::UInt8);
  const char* at = static_cast<const char*>(probe.raw_data());
  return stuck >= at && stuck < at + probe.nbytes();
}

}  // namespace

TEST_CASE("kept buffers: all_gather_v's output stays allocated when a receive into it could not "
          "be withdrawn", "[kept_buffers]") {
  // Rank 1 sends 1024 rows of 256 floats (1 MiB, a cached block size); the receive of its rows
  // fails and is never let go of.
  auto transport = std::make_shared<ScriptedTransport>(2, /*fail_phase=*/1, 1024, 256);
  CHECK_FALSE(stuck_buffer_reused(transport, 1025 * 256 * sizeof(float)));
  CHECK(transport->stuck.bytes == 1024 * 256 * sizeof(float));
}

TEST_CASE("kept buffers: all_gather_v's size exchange buffer stays allocated when a receive into "
          "it could not be withdrawn", "[kept_buffers]") {
  // 2 int64 per rank: with 16384 ranks the buffer is 256 KiB, a cached block size.
  const int ranks = 16384;
  auto transport = std::make_shared<ScriptedTransport>(ranks, /*fail_phase=*/0, 1, 256);
  CHECK_FALSE(stuck_buffer_reused(transport, 2 * sizeof(int64_t) * ranks));
  CHECK(transport->stuck.bytes == 2 * sizeof(int64_t));
}

TEST_CASE("kept buffers: what an op holds is kept when a send or a receive could not be "
          "withdrawn, and let go of otherwise", "[kept_buffers]") {
  struct Case {
    bool is_send;
    bool posted;  // false: nothing pending when the op is withdrawn, nothing to keep
  };
  for (const Case c : {Case{true, true}, Case{false, true}, Case{false, false}}) {
    detail::GroupImpl group(std::make_shared<NeverTransport>(), {0, 1}, 0, 9);
    Tensor held = ones({64});
    bool kept = false;
    {
      detail::OpContext ctx(group, "all_gather", 1, Clock::now() + std::chrono::seconds(5));
      ctx.hold(held);
      if (c.posted) {
        if (c.is_send)
          ctx.send(1, 0, held.raw_data(), held.nbytes());
        else
          ctx.recv(1, 0, held.raw_data(), held.nbytes());
      }
      ctx.withdraw();  // as a failed wait does
      kept = ctx.buffers_kept();
    }
    INFO((c.is_send ? "send" : "receive") << (c.posted ? " withdrawn" : " never posted"));
    CHECK(kept == c.posted);
    // Kept: a handle lives on (for the rest of the process) besides ours.
    CHECK(held.owns_storage_alone() == !c.posted);
  }
}
