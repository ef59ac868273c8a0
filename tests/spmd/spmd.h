// SPMD test cases: bodies that every rank of a group runs, written once and run either as
// threads of one process (run_ranks, local transport) or once per process under mpiexec.
//
// A suite registers its cases at static-initialization time (spmd::add); its mpiexec binary's
// main() is spmd::main_under_mpi, which runs every registered case on ferry::init()'s world.
// A case fails by throwing (its message is printed on the rank that threw). Catch2 is not
// involved under mpiexec: its macros are not used in rank code anyway.
#pragma once

#include <ferry/collectives/group.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace spmd {

// What a case throws when its checks failed (as opposed to an error of the library).
class Failed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Case {
  std::string name;
  std::string tags;  // Catch2 style, "[reductions][all_reduce]"
  // Runs on every rank with the world group.
  std::function<void(ferry::Group&)> run;
  // Asked on every rank before `run`: why the case cannot run on this world (its size, its
  // transport), or "" when it can. A case with a reason is reported as skipped, with the
  // reason, and not run; the answer must be the same on every rank.
  std::function<std::string(const ferry::Group&)> skip_reason = nullptr;
};

// Adds a case; returns true so it can initialize a static.
bool add(Case c);
// Every registered case, sorted by name (static-initialization order differs between builds,
// and every rank must run the cases in the same order).
std::vector<Case> cases();

// A check that main_under_mpi runs on every rank after the cases (unless a case poisoned the
// world group), in the order added: it returns what failed on this rank, or "" (it may run
// collectives on the world group). A binary adds one to check what the whole run did (which
// transport paths carried its messages, say). Returns true so it can initialize a static.
bool add_final_check(std::function<std::string(ferry::Group&)> check);

// The main() of an mpiexec-launched suite. Arguments: optional substrings; a case runs when its
// name or tags contain one of them (all cases without any). Each rank sets a 60 s default
// deadline unless FERRY_TIMEOUT is set. Rank 0 prints one line per case with its time (or, for a
// skipped case, the reason); a rank that failed prints why. After a case that poisoned the world group the run stops. The final
// checks run last. Returns 0 when every case and check passed on every rank.
int main_under_mpi(int argc, char** argv);

}  // namespace spmd
