// The distributed gradcheck of the differentiable collectives, once per process on
// ferry::init()'s world (any backend; the UCX suites run it under mpiexec and ferry-run):
//   mpiexec -n 3 env FERRY_BACKEND=ucx build/tests/ucx/test_gradcheck_spmd
// The thread-based versions of these checks are in tests/differentiable.
#include "ferry.h"
#include "tests/spmd/spmd.h"

#include <string>

namespace {

using namespace ferry;

Tensor rank_input(const Shape& shape, int rank) {
  return uniform(shape, -1.0, 1.0, 100 + rank, DType::Float64);
}

void require_ok(const DistributedGradcheckResult& r, int64_t elements, const std::string& what) {
  if (!r.ok || r.elements_checked != elements)
    throw spmd::Failed(what + ": " + r.message + " (" + std::to_string(r.elements_checked) +
                       " elements checked, expected " + std::to_string(elements) + ")");
}

const bool kAllReduce = spmd::add({"gradcheck: all_reduce, several shapes", "[gradcheck]",
    [](Group& g) {
      for (Shape shape : {Shape{3}, Shape{2, 2}, Shape{0, 2}, Shape{}}) {
        auto fn = [&](const std::vector<Variable>& in) {
          return std::vector<Variable>{all_reduce(in[0], g)};
        };
        require_ok(distributed_gradcheck(fn, {rank_input(shape, g.rank())}, g),
                   g.size() * shape_numel(shape), "all_reduce " + shape_str(shape));
      }
    }});

const bool kAllGather = spmd::add({"gradcheck: all_gather, even and empty blocks", "[gradcheck]",
    [](Group& g) {
      for (int64_t rows : {0, 1, 3}) {
        auto fn = [&](const std::vector<Variable>& in) {
          return std::vector<Variable>{all_gather(in[0], g)};
        };
        require_ok(distributed_gradcheck(fn, {rank_input({rows, 2}, g.rank())}, g),
                   g.size() * rows * 2, "all_gather rows " + std::to_string(rows));
      }
    }});

const bool kChain = spmd::add({"gradcheck: collectives in a row, mean objective", "[gradcheck]",
    [](Group& g) {
      auto fn = [&](const std::vector<Variable>& in) {
        Variable gathered = all_gather(in[0], g);
        return std::vector<Variable>{all_reduce(gathered, g), all_reduce(in[1], g)};
      };
      DistributedGradcheckOptions options;
      options.objective = GradcheckObjective::Mean;
      require_ok(distributed_gradcheck(fn, {rank_input({2, 2}, g.rank()), rank_input({3}, g.rank())},
                                       g, options),
                 g.size() * 7, "all_gather then all_reduce");
    }});

const bool kSubGroups = spmd::add({"gradcheck: sub-groups check their own collectives",
    "[gradcheck]", [](Group& world) {
      Group part = world.split(world.rank() % 2, world.rank());
      auto fn = [&](const std::vector<Variable>& in) {
        return std::vector<Variable>{all_gather(all_reduce(in[0], part), part)};
      };
      require_ok(distributed_gradcheck(fn, {rank_input({2}, world.rank())}, part),
                 part.size() * 2, "split by parity");
    }});

}  // namespace

int main(int argc, char** argv) { return spmd::main_under_mpi(argc, argv); }
