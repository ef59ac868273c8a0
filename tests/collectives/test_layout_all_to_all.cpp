// all_to_all_single with a layout per block: column blocks of a matrix (torchrec's pooled
// layout), element-scattered blocks in a random order on both sides (seeded), zero-size blocks,
// and the bad layouts the call must refuse before anything moves; each on the path the table
// chooses (for ranks on one host, the shared-memory path) and, for ranks on one host, on the
// transports' own paths forced (UCX reads large scattered blocks straight into place; MPI's
// take them in one call).
#include "spmd_case.h"

#include <ferry/collectives/engine/group_impl.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>
#include <random>

using namespace ftest;

namespace {

using ferry::BlockLayout;
using ferry::StridedRun;

// Columns of rank `from`'s embeddings, and the batch (rows) of rank `receiver`; rank 3 has
// none, so its blocks are empty both ways.
int64_t cols(int from) { return 1 + from % 2 + (from == 2 ? 2 : 0); }
int64_t batch(int receiver) { return receiver == 3 ? 0 : 1 + receiver; }

// Runs `body` on the path the table chooses, then, where the ranks share a host (whose
// all-to-alls the table gives the shared-memory path), again with the pairwise exchange forced,
// whose messages the transport carries, and with MPI's own ways (its all-to-all call and its
// point-to-point rounds), which groups across hosts take.
template <class Body>
void on_each_path(const Group& g, Body&& body) {
  body();
  if (!g.impl().one_host()) return;
  std::vector<const char*> others = {"all_to_all:pairwise"};
  if (g.impl().native() != nullptr) {
    others.push_back("all_to_all:native");
    others.push_back("all_to_all:exchange");
  }
  for (const char* algo : others) {
    ScopedAlgorithm forced(algo);
    body();
  }
}

}  // namespace

// Rank r owns D_r columns for every rank's rows; rank k receives them side by side in
// [B_k, sum D]: the received blocks are columns (strided), the sent ones row blocks.
FT_SPMD_CASE("all_to_all_single (layouts): column blocks side by side", "[movement][layout]", 1, 2, 3, 4) {
  on_each_path(g, [&] {
    const int W = g.size(), me = g.rank();
    int64_t total_cols = 0, sent_rows = 0;
    for (int k = 0; k < W; ++k) total_cols += cols(k);
    for (int k = 0; k < W; ++k) sent_rows += batch(k);
    Tensor input = ferry::empty({sent_rows, cols(me)}, DType::Float64);
    double* in = input.data<double>();
    std::vector<BlockLayout> send(W), recv(W);
    for (int k = 0, row = 0; k < W; ++k) {
      send[k] = {StridedRun{row * cols(me), 1, batch(k) * cols(me), 0}};
      for (int64_t i = 0; i < batch(k); ++i, ++row)
        for (int64_t c = 0; c < cols(me); ++c) in[row * cols(me) + c] = 1000 * me + 100 * k + 10 * i + c;
    }
    const int64_t b = batch(me);
    Tensor output = ferry::full({b, total_cols}, -1.0, DType::Float64);
    for (int k = 0, col = 0; k < W; col += cols(k), ++k)
      recv[k] = {StridedRun{col, b, cols(k), total_cols}};
    ferry::all_to_all_single(input, send, output, recv, g).wait();
    std::vector<double> expected;
    for (int64_t i = 0; i < b; ++i)
      for (int k = 0; k < W; ++k)
        for (int64_t c = 0; c < cols(k); ++c) expected.push_back(1000 * k + 100 * me + 10 * i + c);
    ctx.expect_tensor(where(g, "columns side by side"), output, DType::Float64, {b, total_cols},
                      expected);
  });
}

// The same with wide pieces, 4-6 KiB a row and 64 KiB or more a message: large enough that
// UCX's CMA reads scatter them straight into the columns (cma_worth_scattering) instead of
// staging the message, in every UCX suite; the CMA-from-1-KiB suite checks that they did.
FT_SPMD_CASE("all_to_all_single (layouts): wide column blocks", "[movement][layout]", 1, 2, 3, 4) {
  on_each_path(g, [&] {
    const int W = g.size(), me = g.rank();
    auto wide = [](int from) -> int64_t { return 512 + 128 * from; };
    auto rows = [](int receiver) -> int64_t { return 16 + 5 * receiver; };
    auto value = [&](int from, int to, int64_t row, int64_t col) {
      return static_cast<double>(((from * W + to) * 1000 + row) * 1000 + col);
    };
    int64_t total_cols = 0, sent_rows = 0;
    for (int k = 0; k < W; ++k) total_cols += wide(k), sent_rows += rows(k);
    Tensor input = ferry::empty({sent_rows, wide(me)}, DType::Float64);
    std::vector<BlockLayout> send(W), recv(W);
    for (int k = 0, row = 0; k < W; ++k) {
      send[k] = {StridedRun{row * wide(me), 1, rows(k) * wide(me), 0}};
      for (int64_t i = 0; i < rows(k); ++i, ++row)
        for (int64_t c = 0; c < wide(me); ++c)
          input.data<double>()[row * wide(me) + c] = value(me, k, i, c);
    }
    Tensor output = ferry::full({rows(me), total_cols}, -1.0, DType::Float64);
    for (int k = 0, col = 0; k < W; col += wide(k), ++k)
      recv[k] = {StridedRun{col, rows(me), wide(k), total_cols}};
    ferry::all_to_all_single(input, send, output, recv, g).wait();
    std::vector<double> expected;
    for (int64_t i = 0; i < rows(me); ++i)
      for (int k = 0; k < W; ++k)
        for (int64_t c = 0; c < wide(k); ++c) expected.push_back(value(k, me, i, c));
    ctx.expect_tensor(where(g, "wide columns"), output, DType::Float64, {rows(me), total_cols},
                      expected);
  });
}

// Blocks of more pieces than one system call takes (the shared-memory path reads 1024 pieces a
// call per side): rank r sends column k of its [R, W] matrix to rank k, which receives it as
// column r of its own [R, W] (pieces on both sides) and, in a second exchange, as row r of a
// [W, R] matrix (many pieces sent, one received).
FT_SPMD_CASE("all_to_all_single (layouts): columns of more than 1024 rows", "[movement][layout]", 1, 2, 3, 4) {
  on_each_path(g, [&] {
    const int W = g.size(), me = g.rank();
    const int64_t R = 1500;
    auto value = [](int from, int to, int64_t row) {
      return static_cast<double>((from * 10 + to) * 100000 + row);
    };
    Tensor input = ferry::empty({R, W}, DType::Float64);
    for (int64_t i = 0; i < R; ++i)
      for (int k = 0; k < W; ++k) input.data<double>()[i * W + k] = value(me, k, i);
    std::vector<BlockLayout> columns(W), rows(W);
    for (int k = 0; k < W; ++k) {
      columns[k] = {StridedRun{k, R, 1, W}};
      rows[k] = {StridedRun{k * R, 1, R, 0}};
    }
    Tensor as_columns = ferry::full({R, W}, -1.0, DType::Float64);
    Tensor as_rows = ferry::full({W, R}, -1.0, DType::Float64);
    ferry::all_to_all_single(input, columns, as_columns, columns, g).wait();
    ferry::all_to_all_single(input, columns, as_rows, rows, g).wait();
    std::vector<double> want_columns, want_rows;
    for (int64_t i = 0; i < R; ++i)
      for (int r = 0; r < W; ++r) want_columns.push_back(value(r, me, i));
    for (int r = 0; r < W; ++r)
      for (int64_t i = 0; i < R; ++i) want_rows.push_back(value(r, me, i));
    ctx.expect_tensor(where(g, "column to column"), as_columns, DType::Float64, {R, W},
                      want_columns);
    ctx.expect_tensor(where(g, "column to row"), as_rows, DType::Float64, {W, R}, want_rows);
  });
}

// Every element goes through its own run, in a random order on both sides, with block sizes
// 0..5 per pair: whatever the layouts, element j of the block from rank i lands where this
// rank's layout for i says its j-th element goes.
FT_SPMD_CASE("all_to_all_single (layouts): random scattered blocks, seeded", "[movement][layout]", 1, 2, 3, 4) {
  on_each_path(g, [&] {
    const int W = g.size(), me = g.rank();
    for (uint64_t seed = 1; seed <= 20; ++seed) {
      auto size = [&](int from, int to) {
        return static_cast<int64_t>((seed * 7919 + from * 31 + to * 17) % 6);
      };
      int64_t n_in = 0, n_out = 0;
      for (int k = 0; k < W; ++k) {
        n_in += size(me, k);
        n_out += size(k, me);
      }
      std::mt19937_64 rng(seed * 101 + me);
      std::vector<int64_t> in_place(n_in), out_place(n_out);
      std::iota(in_place.begin(), in_place.end(), 0);
      std::iota(out_place.begin(), out_place.end(), 0);
      std::shuffle(in_place.begin(), in_place.end(), rng);
      std::shuffle(out_place.begin(), out_place.end(), rng);
      Tensor input = ferry::empty({n_in}, DType::Int32);
      Tensor output = ferry::full({n_out}, -1, DType::Int32);
      std::vector<BlockLayout> send(W), recv(W);
      std::vector<double> expected(n_out);
      for (int k = 0, a = 0, c = 0; k < W; ++k) {
        for (int64_t j = 0; j < size(me, k); ++j, ++a) {
          input.data<int32_t>()[in_place[a]] = static_cast<int32_t>(10000 * me + 100 * k + j);
          send[k].push_back(StridedRun{in_place[a], 1, 1, 0});
        }
        for (int64_t j = 0; j < size(k, me); ++j, ++c) {
          expected[out_place[c]] = 10000 * k + 100 * me + j;
          recv[k].push_back(StridedRun{out_place[c], 1, 1, 0});
        }
      }
      ferry::all_to_all_single(input, send, output, recv, g).wait();
      ctx.expect_tensor(where(g, "seed " + std::to_string(seed)), output, DType::Int32, {n_out},
                        expected);
    }
  });
}

FT_SPMD_CASE("all_to_all_single (layouts): bad layouts refused before anything moves", "[movement][layout][bad_input]", 1, 2, 3) {
  const int W = g.size(), me = g.rank();
  Tensor input = ferry::zeros({4 * W}, DType::Float32);
  Tensor output = ferry::zeros({4 * W}, DType::Float32);
  std::vector<BlockLayout> ok(W);
  for (int k = 0; k < W; ++k) ok[k] = {StridedRun{4 * k, 1, 4, 0}};
  auto refused = [&](const std::string& name, std::vector<BlockLayout> send,
                     std::vector<BlockLayout> recv) {
    const uint64_t seq = g.sequence_number();
    expect_invalid(ctx, where(g, name),
                   [&] { return ferry::all_to_all_single(input, send, output, recv, g); });
    FT_CHECK(ctx, g.sequence_number() == seq && !g.poisoned(),
             where(g, name + ": no sequence number taken, the group usable"));
  };
  std::vector<BlockLayout> past_end = ok;
  past_end[me] = {StridedRun{4 * me, 3, 2, 4 * W}};  // the 2nd piece starts past the end
  refused("a run past the end", ok, past_end);
  std::vector<BlockLayout> negative = ok;
  negative[me] = {StridedRun{-1, 1, 4, 0}};
  refused("a negative offset", negative, ok);
  refused("one layout too few", std::vector<BlockLayout>(ok.begin(), ok.end() - 1), ok);
  std::vector<BlockLayout> own = ok;
  own[me] = {StridedRun{4 * me, 1, 3, 0}};
  refused("own block of another size", own, ok);
  // The group still works: the good layouts exchange.
  ferry::all_to_all_single(input, ok, output, ok, g).wait();
  FT_CHECK(ctx, !g.poisoned(), where(g, "a good exchange after the refusals"));
}

// Several parts in one collective: an int32 part scattered element by element (reversed on
// receipt), a float64 part of column blocks, and an empty int64 part; one sequence number for
// all of them, each part's data where its own layouts say.
FT_SPMD_CASE("all_to_all_single (layout parts): three dtypes in one collective", "[movement][layout]", 1, 2, 3, 4) {
  on_each_path(g, [&] {
    const int W = g.size(), me = g.rank();
    auto n = [](int from, int to) { return static_cast<int64_t>(1 + (from + 2 * to) % 3); };
    int64_t n_in = 0, n_out = 0;
    for (int k = 0; k < W; ++k) n_in += n(me, k), n_out += n(k, me);
    ferry::LayoutAllToAllPart ints{ferry::empty({n_in}, DType::Int32), std::vector<BlockLayout>(W),
                                   ferry::full({n_out}, -1, DType::Int32), std::vector<BlockLayout>(W)};
    std::vector<double> want_ints(n_out);
    for (int k = 0, a = 0, c = 0; k < W; ++k) {
      for (int64_t j = 0; j < n(me, k); ++j, ++a) {
        ints.input.data<int32_t>()[a] = static_cast<int32_t>(1000 * me + 10 * k + j);
        ints.send_layouts[k].push_back(StridedRun{a, 1, 1, 0});
      }
      for (int64_t j = 0; j < n(k, me); ++j, ++c) {
        const int64_t at = n_out - 1 - c;  // reversed
        want_ints[at] = 1000 * k + 10 * me + j;
        ints.recv_layouts[k].push_back(StridedRun{at, 1, 1, 0});
      }
    }
    // Two doubles to every rank; each rank stands the pairs it receives as the columns of [2, W].
    ferry::LayoutAllToAllPart cols{ferry::empty({2 * W}, DType::Float64), std::vector<BlockLayout>(W),
                                   ferry::full({2, W}, -1.0, DType::Float64), std::vector<BlockLayout>(W)};
    std::vector<double> want_cols(2 * W);
    for (int k = 0; k < W; ++k) {
      cols.input.data<double>()[2 * k] = 100.0 * me + k;
      cols.input.data<double>()[2 * k + 1] = -100.0 * me - k;
      cols.send_layouts[k] = {StridedRun{2 * k, 1, 2, 0}};
      cols.recv_layouts[k] = {StridedRun{k, 2, 1, W}};  // column k of [2, W]
      want_cols[k] = 100.0 * k + me;
      want_cols[W + k] = -100.0 * k - me;
    }
    ferry::LayoutAllToAllPart none{ferry::empty({0}, DType::Int64), std::vector<BlockLayout>(W),
                                   ferry::empty({0}, DType::Int64), std::vector<BlockLayout>(W)};
    const uint64_t seq = g.sequence_number();
    ferry::all_to_all_single({ints, cols, none}, g).wait();
    FT_CHECK(ctx, g.sequence_number() == seq + 1, where(g, "one sequence number for three parts"));
    ctx.expect_tensor(where(g, "int32 part"), ints.output, DType::Int32, {n_out}, want_ints);
    ctx.expect_tensor(where(g, "float64 part"), cols.output, DType::Float64, {2, W}, want_cols);

    // Refusals before anything moves: an output overlapping another part's, no parts at all.
    ferry::LayoutAllToAllPart clash = cols;
    clash.input = ferry::empty({2 * W}, DType::Float64);
    expect_invalid(ctx, where(g, "overlapping outputs"),
                   [&] { return ferry::all_to_all_single({cols, clash}, g); });
    expect_invalid(ctx, where(g, "no parts"), [&] { return ferry::all_to_all_single({}, g); });
    FT_CHECK(ctx, g.sequence_number() == seq + 1 && !g.poisoned(),
             where(g, "the refusals took no sequence number"));
  });
}
