// ferry-dlrm's checkpoint, on the library's distributed checkpoints (ferry::checkpoint): each
// rank saves the table shards it holds (data_parallel tables once, by rank 0), the fused
// optimizers' state, and rank 0 the dense parameters and their momentum buffers; a resume loads
// the shards this rank holds under its own plan and world size, whatever wrote them. Also the
// dense optimizer whose buffers it holds.
#pragma once

#include <ferry/ferry.h>
#include <ferry/collectives/torchrec/torchrec.h>

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

// Collective: saves the model after `epochs_done` epochs as checkpoint step `epochs_done`
// under the directory `root` (root/ckpt-<step>, the newest 2 kept). Returns its directory.
// Every rank throws the same InvalidArgument when any rank's part cannot be written; the
// previous checkpoints stay intact.
std::string save_dlrm_checkpoint(const std::string& root, int64_t epochs_done,
                                 const torchrec::ShardedEmbeddingBagCollection& sebc,
                                 const std::vector<Variable>& dense, const MomentumSgd& dense_opt,
                                 const Group& world);

struct Resumed {
  std::string directory;
  int64_t epochs_done = 0;
};

// Collective: loads `path` (a checkpoint directory, or a root: its newest) into the model. The
// checkpoint must match the model exactly (tables, their shapes and dtypes, the dense
// parameters, the optimizer state) and hold epochs_done in [0, max_epochs]; otherwise, or when
// a file is damaged, every rank throws the same InvalidArgument and nothing was changed.
Resumed load_dlrm_checkpoint(const std::string& path, int64_t max_epochs,
                             torchrec::ShardedEmbeddingBagCollection& sebc,
                             const std::vector<Variable>& dense, MomentumSgd& dense_opt,
                             const Group& world);

}  // namespace ferry::dlrm_tool
