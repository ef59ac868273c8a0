// Data movement: broadcast from every root, all_gather, all_gather_v (given and exchanged sizes,
// zero-size ranks), all_to_all_single (equal and uneven with zeros), all_to_all lists, gather and
// scatter from every root, barrier, send/recv (user tags, ordering, sequence numbers).
//
// Coverage and sampling:
//   * small: every dtype x world size {1, 2, 3, 4, 7, 8} x shapes [0], [1], [37] and [5, 3]
//     (rows per rank's block; uneven cases scale their split sizes from these), with several
//     salts for the uneven cases so that the zero-size ranks move around.
//   * >= 1M elements (1 << 20): world sizes {2, 3, 8}, float32 plus one other dtype per
//     collective (broadcast: uint8, all_gather: float64, all_gather_v: bfloat16,
//     all_to_all_single: int32, all_to_all_single with splits: float16, all_to_all: uint8,
//     gather: int64, scatter: float64, send/recv: int64). "1M" is the largest buffer of a rank:
//     the output of all_gather and gather, the input/output of all_to_all, the tensor of
//     broadcast; per-rank blocks are then about 1M / W rows (uneven cases: about 1.3M in total).
#include "checks.h"
#include "spmd_case.h"

#include <catch2/catch.hpp>

using namespace ftest;

namespace {

struct SmallShape {
  int64_t rows;
  int64_t inner;
};
constexpr SmallShape kSmallShapes[] = {{0, 0}, {1, 0}, {37, 0}, {5, 3}};

OpCase make_case(DType dt, int64_t rows, int64_t inner, int root = 0, int variant = 0,
                 uint64_t salt = 0) {
  OpCase c;
  c.dtype = dt;
  c.rows = rows;
  c.inner = inner;
  c.root = root;
  c.variant = variant;
  c.salt = salt;
  return c;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Runs `start` for every dtype and small shape, with the given roots / variants / salts.
void small_sweep(Group& g, Ctx& ctx, Starter start, bool every_root, std::vector<int> variants,
                 std::vector<uint64_t> salts) {
  const int roots = every_root ? g.size() : 1;
  for (int root = 0; root < roots; ++root)
    for (DType dt : ferry::kAllDTypes)
      for (const SmallShape& s : kSmallShapes)
        for (int variant : variants)
          for (uint64_t salt : salts)
            run_case(ctx, g, start, make_case(dt, s.rows, s.inner, root, variant, salt));
}

}  // namespace

FT_SPMD_CASE("broadcast: from every root", "[movement][broadcast]", 1, 2, 3, 4, 7, 8) {
  small_sweep(g, ctx, start_broadcast, true, {0}, {0});
}

FT_SPMD_CASE("all_gather: equal blocks", "[movement][all_gather]", 1, 2, 3, 4, 7, 8) {
  small_sweep(g, ctx, start_all_gather, false, {0, 1}, {0});  // 1: input is own block of output
}

FT_SPMD_CASE("all_gather_v: given sizes; zero-size ranks", "[movement][all_gather_v]", 1, 2, 3, 4, 7, 8) {
  small_sweep(g, ctx, start_all_gather_v, false, {0}, {0, 1, 2});
}

FT_SPMD_CASE("all_gather_v: exchanged sizes; zero-size ranks", "[movement][all_gather_v]", 1, 2, 3, 4, 7, 8) {
  small_sweep(g, ctx, start_all_gather_v_exchanged, false, {0}, {0, 1, 2});
}

FT_SPMD_CASE("all_to_all_single: equal blocks", "[movement][all_to_all]", 1, 2, 3, 4, 7, 8) {
  small_sweep(g, ctx, start_all_to_all_single, false, {0}, {0});
}

FT_SPMD_CASE("all_to_all_single: uneven splits with zeros", "[movement][all_to_all]", 1, 2, 3, 4, 7, 8) {
  small_sweep(g, ctx, start_all_to_all_single_v, false, {0}, {0, 1, 2});
}

// Rank 0's blocks are all one row and every other rank's are not: the MPI transport must still
// make the same MPI call on every rank (it once chose MPI_Ialltoall where one rank's blocks
// looked equal, and MPI_Ialltoallv elsewhere).
FT_SPMD_CASE("all_to_all_single: split lists equal on one rank only", "[movement][all_to_all]", 2, 3, 4) {
  const int W = g.size(), me = g.rank();
  auto rows = [](int from, int to) -> int64_t { return from == 0 || to == 0 ? 1 : 2; };
  for (int round = 0; round < 3; ++round) {  // repeated: small ops may reuse a cached request
    std::vector<int64_t> in_splits, out_splits;
    int64_t in_rows = 0, out_rows = 0;
    for (int k = 0; k < W; ++k) {
      in_splits.push_back(rows(me, k));
      out_splits.push_back(rows(k, me));
      in_rows += in_splits.back();
      out_rows += out_splits.back();
    }
    // Row i of the block rank `from` sends to rank `to` holds 1000 * from + 10 * to + i + round.
    Tensor input = ferry::empty({in_rows}, DType::Int32);
    int32_t* in = input.data<int32_t>();
    for (int k = 0, at = 0; k < W; ++k)
      for (int64_t i = 0; i < in_splits[k]; ++i) in[at++] = 1000 * me + 10 * k + static_cast<int32_t>(i) + round;
    Tensor output = ferry::empty({out_rows}, DType::Int32);
    ferry::all_to_all_single(input, output, out_splits, in_splits, g).wait();
    const int32_t* out = output.data<int32_t>();
    bool right = true;
    for (int k = 0, at = 0; k < W; ++k)
      for (int64_t i = 0; i < out_splits[k]; ++i)
        right = right && out[at++] == 1000 * k + 10 * me + static_cast<int32_t>(i) + round;
    FT_CHECK(ctx, right, where(g, "every row from its sender, in order"));
  }
}

FT_SPMD_CASE("all_to_all: lists; shapes differ but bytes match", "[movement][all_to_all]", 1, 2, 3, 4, 7, 8) {
  small_sweep(g, ctx, start_all_to_all, false, {0}, {0, 1});
}

FT_SPMD_CASE("gather and scatter: every root", "[movement][gather][scatter]", 1, 2, 3, 4, 7, 8) {
  small_sweep(g, ctx, start_gather, true, {0}, {0});
  small_sweep(g, ctx, start_scatter, true, {0}, {0});
}

FT_SPMD_CASE("movement: 1M elements", "[movement][large]", 2, 3, 8) {
  struct Large {
    const char* name;
    Starter start;
    DType other;
    bool per_rank_block;  // rows = ceil(1M / W) instead of 1M
    bool uneven;          // rows = 2M / W: uneven sizes sum to about 1.3M
  };
  const Large large[] = {
      {"broadcast", start_broadcast, DType::UInt8, false, false},
      {"all_gather", start_all_gather, DType::Float64, true, false},
      {"all_gather_v", start_all_gather_v, DType::BFloat16, false, true},
      {"all_gather_v exchanged", start_all_gather_v_exchanged, DType::BFloat16, false, true},
      {"all_to_all_single", start_all_to_all_single, DType::Int32, true, false},
      {"all_to_all_single splits", start_all_to_all_single_v, DType::Float16, false, true},
      {"all_to_all", start_all_to_all, DType::UInt8, false, true},
      {"gather", start_gather, DType::Int64, true, false},
      {"scatter", start_scatter, DType::Float64, true, false},
      {"send/recv", start_ring_send_recv, DType::Int64, false, false},
  };
  // Each failure message names the op and dtype (Pending::where).
  for (const Large& op : large) {
    for (DType dt : {DType::Float32, op.other}) {
      const int W = g.size();
      const int64_t rows = op.uneven ? 2 * kLarge / W : op.per_rank_block ? ceil_div(kLarge, W) : kLarge;
      run_case(ctx, g, op.start, make_case(dt, rows, 0, /*root=*/W - 1, 0, 1));
    }
  }
}

FT_SPMD_CASE("barrier: nobody leaves before everyone arrived", "[movement][barrier]", 1, 2, 3, 4, 7, 8) {
  for (int round = 0; round < 6; ++round)
    run_case(ctx, g, start_barrier, make_case(DType::Float32, 0, 0, 0, round % 2));
}

FT_SPMD_CASE("send/recv: ring; every dtype", "[movement][p2p]", 2, 3, 4, 7, 8) {
  const uint64_t seq = g.sequence_number();
  small_sweep(g, ctx, start_ring_send_recv, false, {0}, {0, 5});
  FT_CHECK(ctx, g.sequence_number() == seq, where(g, "send/recv must not advance the sequence"));
}

FT_SPMD_CASE("send/recv: user tags match regardless of posting order", "[movement][p2p]", 2, 3, 4) {
  const int W = g.size(), me = g.rank(), next = (me + 1) % W, prev = (me + W - 1) % W;
  const DType dt = DType::Int32;
  // Tag 7 is sent first, tag 3 second; the receiver posts tag 3 first.
  Tensor a = make_tensor(Gen(Pattern::Move, dt, me, 7), {11}, dt);
  Tensor b = make_tensor(Gen(Pattern::Move, dt, me, 3), {11}, dt);
  Tensor ra = ferry::zeros({11}, dt), rb = ferry::zeros({11}, dt);
  std::vector<Work> works;
  works.push_back(ferry::send(a, next, g, 7));
  works.push_back(ferry::send(b, next, g, 3));
  works.push_back(ferry::recv(rb, prev, g, 3));
  works.push_back(ferry::recv(ra, prev, g, 7));
  for (Work& w : works) w.wait();
  ctx.expect_tensor(where(g, "tag 7"), ra, dt, {11}, gen_values(Gen(Pattern::Move, dt, prev, 7), 0, 11));
  ctx.expect_tensor(where(g, "tag 3"), rb, dt, {11}, gen_values(Gen(Pattern::Move, dt, prev, 3), 0, 11));
}

FT_SPMD_CASE("send/recv: one tag keeps posting order", "[movement][p2p]", 2, 3, 8) {
  const int W = g.size(), me = g.rank(), next = (me + 1) % W, prev = (me + W - 1) % W;
  const DType dt = DType::Float32;
  constexpr int kMessages = 5;
  std::vector<Work> works;
  std::vector<Tensor> sent, received;
  // Receives are posted first for odd ranks and last for even ones: order must not matter.
  auto post_recvs = [&] {
    for (int i = 0; i < kMessages; ++i) {
      received.push_back(ferry::zeros({37}, dt));
      works.push_back(ferry::recv(received.back(), prev, g, 5));
    }
  };
  if (me % 2 == 1) post_recvs();
  for (int i = 0; i < kMessages; ++i) {
    sent.push_back(make_tensor(Gen(Pattern::Move, dt, me, 50 + i), {37}, dt));
    works.push_back(ferry::send(sent.back(), next, g, 5));
  }
  if (me % 2 == 0) post_recvs();
  for (Work& w : works) w.wait();
  for (int i = 0; i < kMessages; ++i)
    ctx.expect_tensor(where(g, "message " + std::to_string(i) + " on tag 5"), received[i], dt, {37},
                      gen_values(Gen(Pattern::Move, dt, prev, 50 + i), 0, 37));
}

FT_SPMD_CASE("send/recv: every pair; tagged by sender", "[movement][p2p]", 2, 3, 4, 7) {
  const int W = g.size(), me = g.rank();
  const DType dt = DType::BFloat16;
  std::vector<Work> works;
  std::vector<Tensor> out(W), in(W);
  for (int k = W - 1; k >= 0; --k) {  // receives posted in reverse rank order
    if (k == me) continue;
    in[k] = ferry::zeros({k + 1, 2}, dt);
    works.push_back(ferry::recv(in[k], k, g, k));
  }
  for (int k = 0; k < W; ++k) {  // rank `me` sends me's data sized for the destination
    if (k == me) continue;
    out[k] = make_tensor(Gen(Pattern::Move, dt, me, static_cast<uint64_t>(k)), {me + 1, 2}, dt);
  }
  // Every rank sends to k a tensor of (me + 1) rows; k receives (me + 1) rows from me.
  for (int k = 0; k < W; ++k) {
    if (k == me) continue;
    works.push_back(ferry::send(out[k], k, g, me));
  }
  for (Work& w : works) w.wait();
  for (int k = 0; k < W; ++k) {
    if (k == me) continue;
    ctx.expect_tensor(where(g, "from rank " + std::to_string(k)), in[k], dt, {k + 1, 2},
                      gen_values(Gen(Pattern::Move, dt, k, static_cast<uint64_t>(me)), 0, 2 * (k + 1)));
  }
}
