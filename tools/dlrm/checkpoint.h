// ferry-dlrm's checkpoint: the file format (full tables, dense parameters and their momentum
// buffers, epochs done) and the dense optimizer whose buffers it holds.
#pragma once

#include <ferry/ferry.h>

#include <map>
#include <string>
#include <vector>

namespace ferry::dlrm_tool {

// SGD with momentum (torch's rule with dampening 0: b = g at the first step, then
// b = momentum b + g; p -= lr b), as ferry's Sgd computes it, with the momentum buffers
// reachable so that a checkpoint can hold them. Float32 parameters.
class MomentumSgd : public Optimizer {
 public:
  MomentumSgd(std::vector<Variable> parameters, double lr, double momentum)
      : Optimizer(std::move(parameters), "MomentumSgd"), lr_(lr), momentum_(momentum),
        buffers(parameters_.size()) {}
  void step() override;
  double lr_, momentum_;
  std::vector<Tensor> buffers;  // undefined until a parameter's first step
};

// A checkpoint: full tables, dense parameters and their momentum buffers, and the epochs done.
// One file, written by rank 0, read by every rank: any world size and plan can resume it (the
// tables are loaded into whatever shards this rank holds).
struct Checkpoint {
  int64_t epochs_done = 0;
  std::map<std::string, Tensor> tensors;
};

// Writes `c` to `path` (rank 0); throws InvalidArgument naming the file when it cannot.
void save_checkpoint(const std::string& path, const Checkpoint& c);
// Reads a file save_checkpoint wrote; InvalidArgument for a missing, truncated or foreign file.
Checkpoint load_checkpoint(const std::string& path);

}  // namespace ferry::dlrm_tool
