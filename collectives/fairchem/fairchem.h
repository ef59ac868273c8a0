// fairchem's graph-parallel utilities (`fairchem.core.common.gp_utils`) as ferry functions, in
// namespace ferry::fairchem: the family's one public header. Three parts, as in the original
// module: the graph-parallel and data-parallel groups, the partition of an axis across a
// graph-parallel group (with pad / trim), and the model-parallel regions.
//
// gp_utils changed in behaviour over fairchem's history; ferry follows its current form (the one
// since April 2025): out-of-place ReduceFrom, a `_split` that always copies, GatherFromModelParallel-
// RegionSumGrad and ScaleBackwardGrad, a cleanup_gp that resets the groups. Where this header
// compares, "earlier gp_utils" means the forms before that: until mid-2024 ceil-size chunks, then
// numpy's array_split rule, both with an in-place ReduceFrom and gathers along dims 0 and 1 only.
#pragma once

#include <ferry/autograd/variable.h>
#include <ferry/collectives/group.h>
#include <ferry/runtime/tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace ferry::fairchem {

// ---- graph-parallel groups ----
//
// Graph-parallel group setup: fairchem's setup_gp / setup_graph_parallel_groups as an object,
// GraphParallel, holding what fairchem keeps in module globals. The module's own functions
// (setup_gp, get_gp_rank, ...) over one default GraphParallel are at the end.
//
// The W ranks of `world` are laid out as a d x g row-major matrix M[i][j] = i*g + j (g = the GP
// size, d = W / g data-parallel replicas). Each row is a graph-parallel (GP) group, each column
// a data-parallel (DP) group: gp_rank = r mod g, dp_rank = r div g. Example W = 4, g = 2: GP
// groups {0,1},{2,3}, DP groups {0,2},{1,3}.
//
// setup() is collective over `world`: every rank calls it with the same arguments, in the same
// order relative to other collectives on `world`. It creates the groups as fairchem does, all DP
// groups first and then all GP groups, here as one Group::split for the columns followed by one
// for the rows (each rank learns exactly its column and its row).
//
// Departures from fairchem, on purpose:
//  - The layout is an object rather than globals: a trainer may want several independent
//    layouts over different parent groups.
//  - Getters of an object that is not initialized (default-constructed, moved from, or cleaned
//    up) throw InvalidArgument ("... not initialized ..."); fairchem silently answers for the
//    world group before setup (gp size 1, gp rank = global rank).
//  - Re-initialisation: setup() on a world group over which another GraphParallel is still
//    initialized on this rank raises InvalidArgument (fairchem: an assertion on its globals).
//    The registry that enforces this is keyed by the identity of the world group's state on this
//    rank (each local-transport thread has its own), so threads and distinct parent groups never
//    collide. The registration ends with cleanup(), destruction, or moving into another object.
//  - cleanup() resets the object (as current gp_utils' cleanup_gp: initialized() becomes false);
//    cleanup() of an object that is not initialized raises InvalidArgument (cleanup_gp asserts
//    both groups are set).

enum class GpSizePolicy {
  Clamp,   // setup_gp: a GP size above W is lowered to W
  Strict,  // setup_graph_parallel_groups: a GP size above W is an InvalidArgument
};

class GraphParallel {
 public:
  GraphParallel() = default;  // not initialized
  ~GraphParallel();
  GraphParallel(GraphParallel&& other) noexcept;
  GraphParallel& operator=(GraphParallel&& other) noexcept;
  GraphParallel(const GraphParallel&) = delete;
  GraphParallel& operator=(const GraphParallel&) = delete;

  // Collective over `world`. Throws InvalidArgument (naming the op, this rank, W and the GP
  // size) when gp_size < 1, when gp_size > W under Strict, when W % gp_size != 0 (after
  // clamping), or on re-initialisation; these checks run before any communication.
  static GraphParallel setup(const Group& world, int gp_size,
                             GpSizePolicy policy = GpSizePolicy::Clamp);

  bool initialized() const { return gp_.valid(); }

  // These throw InvalidArgument when not initialized.
  const Group& gp_group() const;
  const Group& dp_group() const;
  int gp_rank() const;
  int gp_size() const;
  int dp_rank() const;
  int dp_size() const;

  // Releases both groups and the registration. Local (no communication).
  void cleanup();

 private:
  void release() noexcept;
  void check_initialized(const char* what) const;

  Group gp_;
  Group dp_;
  // The registry key: the world group's state on this rank (see "graph-parallel groups" above).
  std::weak_ptr<detail::GroupImpl> world_;
  bool registered_ = false;
};

// ---- partition, pad, trim ----
//
// The canonical partition of one axis across the ranks of a graph-parallel group, and fairchem's
// pad / trim helpers, without fairchem's global group.
//
// Partition followed: numpy's array_split rule (gp_utils' since mid-2024), any dim, negative dims
// allowed. Where fairchem reads the GP world size from its globals, the *_to_multiple forms take
// `parts` explicitly; pad_tensor without a target and trim_tensor read it from the default layout (see
// "module functions" below), as fairchem's do.
//
// Departures from fairchem, on purpose:
//  - pad_tensor fills the padding with ZEROS; every gp_utils leaves it uninitialised (garbage
//    that no correct caller ever reads, but that makes results depend on memory contents).
//  - trim_tensor returns the trimmed tensor and the adjusted sizes instead of decrementing the
//    caller's sizes in place, and works along any dim (gp_utils: dims 0 and 1 only).
//  - Bad arguments (dim out of range, a target smaller than the current size, parts < 1, a sizes
//    list that would go negative) raise InvalidArgument instead of a shape/allocation error.

// array_split rule: q = n / parts, m = n % parts; part k has q + 1 elements for k < m, else q.
// Always exactly `parts` entries, possibly zeros (n = 1, parts = 3 -> [1, 0, 0]).
// n >= 0 and parts >= 1, else InvalidArgument.
std::vector<int64_t> canonical_partition(int64_t n, int parts);

// Offset of part `part` (0 <= part < parts): the sum of the parts before it.
int64_t partition_start(int64_t n, int parts, int part);

// fairchem's pad_tensor(tensor, dim=-1, target_size=None): `t` extended along `dim` with zeros
// to `target_size`, or without one to the next multiple of the default layout's GP size
// (get_gp_world_size(), InvalidArgument when none is set up). Returns `t` itself (no copy, the
// same storage) when nothing is added; a target smaller than t.size(dim) is an InvalidArgument.
Tensor pad_tensor(const Tensor& t, int64_t dim = -1,
                  std::optional<int64_t> target_size = std::nullopt);
// pad_tensor without a target, to the next multiple of `parts` instead of the GP size.
Tensor pad_tensor_to_multiple(const Tensor& t, int parts, int64_t dim = -1);

struct TrimmedTensor {
  Tensor tensor;
  std::vector<int64_t> sizes;
};

// Drops the last t.size(dim) % parts entries along `dim` and, when `sizes` is not empty,
// subtracts the same amount from its last entry. Nothing to drop: {t, sizes} unchanged (t
// itself). Along dim 0 the trimmed tensor is a view of t; along other dims a copy.
TrimmedTensor trim_tensor_to_multiple(const Tensor& t, int parts,
                                      std::vector<int64_t> sizes = {}, int64_t dim = 0);
// fairchem's trim_tensor(tensor, sizes=None, dim=0): trim_tensor_to_multiple with the default
// layout's GP size (InvalidArgument when none is set up).
TrimmedTensor trim_tensor(const Tensor& t, std::vector<int64_t> sizes = {}, int64_t dim = 0);

// ---- model-parallel regions ----
//
// fairchem's model-parallel regions (gp_utils, Megatron style) as differentiable ferry functions.
//
// Semantics followed: current gp_utils' (out-of-place ReduceFrom, scatter returns an independent
// copy, GatherFromModelParallelRegionSumGrad and ScaleBackwardGrad exist, canonical array_split
// partition) along ANY dim, negative dims counting from the back; `dim` defaults to -1 like
// fairchem's wrappers (fairchem's models pass 0).
//
// Every op takes the graph-parallel group explicitly (`gp`, usually GraphParallel::gp_group());
// the overloads taking a GraphParallel use its GP group and throw InvalidArgument when it is not
// initialized, as fairchem's wrappers assert initialized(). Every rank of the group must call
// the same ops in the same order, and every rank then runs their backward (ferry's tape runs a
// collective node's backward even where the loss ignores its output, if the loss was recorded
// after it: see collectives/differentiable/differentiable.h).
//
// Adjoint convention of each backward (P = per-rank, R = replicated; differentiable.h): copy_to R
// forward identity; backward sum all_reduce of G (x replicated).
//   reduce_from    R  forward sum all_reduce (a new tensor); backward identity.
//   scatter_to     R  forward my canonical part of x along dim (x replicated); backward the full
//                     gradient, every rank's G concatenated in rank order, on every rank.
//   gather_from    R  forward the concatenation of every rank's x along dim; backward my
//                     canonical slice of MY OWN G (correct when the downstream computation is
//                     replicated; under P it misses sum_{r != me} G_r[my slice]).
//   gather_from_model_parallel_region_sum_grad
//                  P  forward as gather_from; backward sum_r G_r[my slice] (a reduce_scatter_v).
//   scale_backward_grad  neither: a deliberate rescale, forward identity, backward G * gp size.
//
// Departures from fairchem, on purpose:
//  - Non-canonical sizes in gather_from / _sum_grad (the per-rank sizes along dim are not the
//    canonical partition of their total) raise InvalidArgument on every rank, before the data
//    moves, naming the sizes given and expected; fairchem gives a silently wrong gradient on one
//    rank and a shape error on another (tests/families/test_fairchem.cpp). The ranks must also agree on the size
//    of every other dim (also InvalidArgument on every rank).
//  - ReduceFrom is out of place (as in current gp_utils) in every case; earlier gp_utils overwrite
//    the caller's tensor.
//  - Nothing is padded on the wire: after the size exchange (one all_gather of two int64 per
//    rank: the size along dim and a fingerprint of the other dims) the gathers move exactly
//    the elements that exist (an all_gather_v, of the flattened tensors for dims other than 0),
//    so padding contents never matter. scatter_to's backward knows the sizes (the canonical
//    partition of x's length) and skips the exchange.
//  - A tensor that is empty on every rank returns the empty result and empty gradients at once
//    (the original hangs on a zero-byte all_gather under gloo).
//  - No process-global group (see "graph-parallel groups" above).
// scatter_to, gather_from and _sum_grad are collective nodes (ferry::Function::is_collective):
// their backward runs on every rank even where the loss ignores their output.
// Group size 1: every op is the identity in both directions. Inputs are float32 or float64;
// bad arguments raise InvalidArgument naming the op and the rank.

// fairchem's _gather_with_padding, not differentiable: every rank's x concatenated along `dim`
// in rank order, whatever each rank's size along `dim` (no canonical partition needed); the
// other dims must agree (else InvalidArgument on every rank). The sizes are exchanged first;
// nothing is padded on the wire (see above). Any dtype.
Tensor gather_with_padding(const Tensor& x, const Group& group, int64_t dim = -1);

Variable copy_to_model_parallel_region(const Variable& x, const Group& gp);
Variable reduce_from_model_parallel_region(const Variable& x, const Group& gp);
Variable scatter_to_model_parallel_region(const Variable& x, const Group& gp, int64_t dim = -1);
Variable gather_from_model_parallel_region(const Variable& x, const Group& gp, int64_t dim = -1);
Variable gather_from_model_parallel_region_sum_grad(const Variable& x, const Group& gp,
                                                    int64_t dim = -1);
Variable scale_backward_grad(const Variable& x, const Group& gp);

Variable copy_to_model_parallel_region(const Variable& x, const GraphParallel& gp);
Variable reduce_from_model_parallel_region(const Variable& x, const GraphParallel& gp);
Variable scatter_to_model_parallel_region(const Variable& x, const GraphParallel& gp,
                                          int64_t dim = -1);
Variable gather_from_model_parallel_region(const Variable& x, const GraphParallel& gp,
                                           int64_t dim = -1);
Variable gather_from_model_parallel_region_sum_grad(const Variable& x, const GraphParallel& gp,
                                                    int64_t dim = -1);
Variable scale_backward_grad(const Variable& x, const GraphParallel& gp);

// ---- module functions ----
//
// gp_utils' module-level API, for code ported from Python: the same names and argument order,
// over one default layout that setup_gp() creates and cleanup_gp() ends, next to the
// GraphParallel objects above (what the functions do is that object's, named as in fairchem).
//
// The default is process-wide, as fairchem's globals are: under mpiexec (one rank per process)
// any thread of the process sees it. Ranks that run as threads of one process (run_ranks, the
// local transport) each have their own, set up and seen by the rank's thread and released when
// that thread ends, since one process-wide layout cannot serve several ranks.
//
// Departures from fairchem, on purpose (besides those of GraphParallel above):
//  - setup_gp takes the world group and the GP size (fairchem: a config dict's "gp_gpus") and
//    setup_graph_parallel_groups the world group and the size (fairchem: a size and a backend).
//  - The getters, pad_tensor without a target and trim_tensor raise InvalidArgument before
//    setup_gp and after cleanup_gp, where fairchem answers for the world group (gp size 1).
//  - get_gp_group / get_dp_group return Group handles (copies of the default's).

// Collective over `world`: GraphParallel::setup(world, gp_gpus, Clamp) as the default layout.
// InvalidArgument when a default is set up already (fairchem: an assertion).
void setup_gp(const Group& world, int gp_gpus);
// The same with GpSizePolicy::Strict.
void setup_graph_parallel_groups(const Group& world, int graph_parallel_group_size);
// Ends the default layout (local). InvalidArgument when none is set up.
void cleanup_gp();
bool initialized();
Group get_gp_group();
Group get_dp_group();
int get_gp_rank();
int get_dp_rank();
int get_gp_world_size();
int get_dp_world_size();

// The regions on the default layout's GP group (InvalidArgument when none is set up, as
// fairchem's wrappers assert initialized()).
Variable copy_to_model_parallel_region(const Variable& x);
Variable reduce_from_model_parallel_region(const Variable& x);
Variable scatter_to_model_parallel_region(const Variable& x, int64_t dim = -1);
Variable gather_from_model_parallel_region(const Variable& x, int64_t dim = -1);
Variable gather_from_model_parallel_region_sum_grad(const Variable& x, int64_t dim = -1);
Variable scale_backward_grad(const Variable& x);

}  // namespace ferry::fairchem
