// Graph-parallel group setup: fairchem's setup_gp / setup_graph_parallel_groups (spec §1.2) as
// an object instead of module globals.
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
//  - No process-global state: the local transport runs ranks as threads of one process, and a
//    trainer may want several independent layouts over different parent groups.
//  - Getters of an object that is not initialized (default-constructed, moved from, or cleaned
//    up) throw InvalidArgument ("... not initialized ..."); fairchem silently answers for the
//    world group before setup (gp size 1, gp rank = global rank).
//  - Re-initialisation: setup() on a world group over which another GraphParallel is still
//    initialized on this rank raises InvalidArgument (fairchem: an assertion on its globals).
//    The registry that enforces this is keyed by the identity of the world group's state on this
//    rank (each local-transport thread has its own), so threads and distinct parent groups never
//    collide. The registration ends with cleanup(), destruction, or moving into another object.
//  - cleanup() resets the object (G3 semantics: initialized() becomes false); cleanup() of an
//    object that is not initialized raises InvalidArgument (G3 asserts both groups are set).
#pragma once

#include "collectives/group.h"

#include <memory>

namespace ferry {

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
  // The registry key: the world group's state on this rank (see the header comment).
  std::weak_ptr<detail::GroupImpl> world_;
  bool registered_ = false;
};

}  // namespace ferry
