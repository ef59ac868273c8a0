// One "start and verify" routine per collective, shared by the suites.
//
// start_x() builds the rank's inputs from Gen, issues the collective and returns a Pending whose
// verify() compares every output (and the inputs that must stay unchanged) with a reference
// computed in the test from the same generators. Splitting start from verify lets the
// outstanding-ops tests issue many collectives before waiting on any.
#pragma once

#include "test_helpers.h"

#include <functional>
#include <string>
#include <vector>

namespace ftest {

struct OpCase {
  DType dtype = DType::Float32;
  int64_t rows = 0;   // rows of one rank's block; see each start_* for its meaning
  int64_t inner = 0;  // 0: 1-D tensors; otherwise tensors are [rows, inner]
  ReduceOp op = ReduceOp::Sum;
  int root = 0;
  int variant = 0;    // op-specific, see each start_*
  uint64_t salt = 0;  // varies the data between ops issued together
  std::string describe(const std::string& name) const;
};

struct Pending {
  std::string where;
  std::vector<Work> works;
  std::function<void()> verify;  // records into the Ctx; call after every work completed
};

using Starter = Pending (*)(Ctx&, const Group&, const OpCase&);

// Waits for every work of p, then verifies. An exception is recorded with p.where and rethrown
// (so the rank ends and its peers fail fast instead of running on a broken group).
void finish(Ctx& ctx, Pending& p);
// start + finish, recording an exception from the start call too.
void run_case(Ctx& ctx, const Group& g, Starter start, const OpCase& c);

// rows: elements along dim 0 of the tensor. variant 0: in place; 1: out of place into a
// separate tensor; 2: out of place with output and input the very same tensor.
Pending start_all_reduce(Ctx&, const Group&, const OpCase&);
// variant 0: non-root ranks pass an undefined output; 1: a filled one that must stay untouched.
Pending start_reduce(Ctx&, const Group&, const OpCase&);
// rows: rows per rank's output block. variant 1: output is the caller's block of input.
Pending start_reduce_scatter(Ctx&, const Group&, const OpCase&);
// rows: scale of uneven_sizes(W, rows, salt) (zeros included). variant 1: reduce_scatter's
// list form, each block cloned into a tensor of its own.
Pending start_reduce_scatter_v(Ctx&, const Group&, const OpCase&);
Pending start_broadcast(Ctx&, const Group&, const OpCase&);
// rows: rows per rank. variant 1: input is the caller's block of output.
Pending start_all_gather(Ctx&, const Group&, const OpCase&);
// rows: scale of uneven_sizes; the given-sizes form.
Pending start_all_gather_v(Ctx&, const Group&, const OpCase&);
// The exchanged-sizes form: work.output(0) and work.output(1).
Pending start_all_gather_v_exchanged(Ctx&, const Group&, const OpCase&);
// rows: rows per block (input and output [W*rows, ...]).
Pending start_all_to_all_single(Ctx&, const Group&, const OpCase&);
// rows: scale of a2a_rows (uneven, zeros included).
Pending start_all_to_all_single_v(Ctx&, const Group&, const OpCase&);
// Lists; inputs are 1-D, outputs shape_of(rows, inner): shapes differ, bytes match.
Pending start_all_to_all(Ctx&, const Group&, const OpCase&);
Pending start_gather(Ctx&, const Group&, const OpCase&);
Pending start_scatter(Ctx&, const Group&, const OpCase&);
// Verifies that every member arrived before anyone left (verify() exchanges the arrival times
// with an all_gather, so every member must call it). variant 1: the last rank arrives late.
Pending start_barrier(Ctx&, const Group&, const OpCase&);
// send/recv around the ring (tag 100 + salt % 1000); nothing to do on one rank.
Pending start_ring_send_recv(Ctx&, const Group&, const OpCase&);

struct NamedStarter {
  const char* name;
  Starter start;
};

}  // namespace ftest
