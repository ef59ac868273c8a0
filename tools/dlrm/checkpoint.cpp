#include "tools/dlrm/checkpoint.h"

#include <ferry/collectives/checkpoint/checkpoint.h>

#include <map>
#include <set>

namespace ferry::dlrm_tool {

void MomentumSgd::step() {
  for (size_t i = 0; i < parameters_.size(); ++i) {
    Variable& p = parameters_[i];
    if (!p.grad().defined()) continue;
    Tensor value = p.value();
    auto w = value.vec<float>();
    // torch.optim.SGD with momentum (no dampening): buf = g on the first step, then
    // buf = momentum * buf + g; p -= lr * buf. Read in place: no copy of the gradient.
    if (!buffers[i].defined()) {
      buffers[i] = p.grad().clone();
    } else {
      const Tensor& grad = p.grad();
      auto b = buffers[i].vec<float>();
      b = float(momentum_) * b + float(1.0) * grad.vec<float>();
    }
    w -= float(lr_) * buffers[i].vec<float>();
    value.bump_version();
  }
}

namespace {

std::string table_key(const std::string& table) { return "embedding_bags." + table + ".weight"; }
std::string dense_key(size_t i) { return "dense." + std::to_string(i); }
std::string momentum_key(size_t i) { return "momentum." + std::to_string(i); }

// What must agree between the writer and a resume, beyond the tensors' shapes.
std::map<std::string, std::string> model_config(const torchrec::ShardedEmbeddingBagCollection& sebc,
                                                const std::vector<Variable>& dense) {
  return {{"model", "dlrm"},
          {"tables", std::to_string(sebc.embedding_bag_configs().size())},
          {"dense_parameters", std::to_string(dense.size())}};
}

}  // namespace

std::string save_dlrm_checkpoint(const std::string& root, int64_t epochs_done,
                                 const torchrec::ShardedEmbeddingBagCollection& sebc,
                                 const std::vector<Variable>& dense, const MomentumSgd& dense_opt,
                                 const Group& world) {
  const int me = world.rank(), W = world.size();
  std::vector<checkpoint::Block> blocks;
  std::map<std::string, Shape> shapes;
  for (const auto& c : sebc.embedding_bag_configs())
    shapes[table_key(c.name)] = {c.num_embeddings, c.embedding_dim};
  std::set<std::string> replicated;
  for (const auto& t : sebc.data_parallel_tables()) replicated.insert(table_key(t->name()));
  // The shards this rank holds, where they lie in their tables (no gathering).
  for (const auto& [key, shards] : sebc.local_state_dict()) {
    if (replicated.count(key) && me != 0) continue;
    auto shape = shapes.find(key);
    if (shape == shapes.end())
      throw InvalidArgument("ferry-dlrm: checkpoint: no table config for " + key);
    for (const torchrec::LocalShard& s : shards) {
      if (s.tensor.numel() == 0) continue;
      blocks.push_back({key, shape->second, s.metadata.shard_offsets, s.tensor});
    }
  }
  // The fused optimizers' state (whole tensors, collective), spread over the ranks.
  size_t i = 0;
  for (const auto& [key, t] : sebc.optimizer_state_dict())
    if (static_cast<int>(i++ % static_cast<size_t>(W)) == me) blocks.push_back({key, t.shape(), {}, t});
  // The dense part is replicated: rank 0's copy.
  if (me == 0) {
    for (size_t k = 0; k < dense.size(); ++k) {
      blocks.push_back({dense_key(k), dense[k].value().shape(), {}, dense[k].value()});
      if (dense_opt.buffers[k].defined())
        blocks.push_back({momentum_key(k), dense_opt.buffers[k].shape(), {}, dense_opt.buffers[k]});
    }
  }
  checkpoint::Record record;
  record.counters["epochs_done"] = epochs_done;
  record.config = model_config(sebc, dense);
  return checkpoint::save(root, epochs_done, blocks, record, world);
}

Resumed load_dlrm_checkpoint(const std::string& path, int64_t max_epochs,
                             torchrec::ShardedEmbeddingBagCollection& sebc,
                             const std::vector<Variable>& dense, MomentumSgd& dense_opt,
                             const Group& world) {
  checkpoint::Expectation expect;
  for (const auto& c : sebc.embedding_bag_configs())
    expect.tensors.push_back({table_key(c.name), {c.num_embeddings, c.embedding_dim}, c.data_type});
  // The fused optimizers' state depends on the plan that wrote it (a data_parallel table has
  // none before its first step, row-wise state one column per column block):
  // load_optimizer_state_dict checks what it takes.
  for (const auto& c : sebc.embedding_bag_configs())
    expect.unchecked_prefixes.push_back(table_key(c.name) + ".");
  for (size_t k = 0; k < dense.size(); ++k) {
    const Tensor v = dense[k].value();
    expect.tensors.push_back({dense_key(k), v.shape(), v.dtype()});
    expect.tensors.push_back({momentum_key(k), v.shape(), v.dtype(), /*required=*/false});
  }
  expect.counters.push_back({"epochs_done", 0, max_epochs});
  expect.config = model_config(sebc, dense);
  const checkpoint::Reader reader = checkpoint::Reader::open(path, expect, world);  // collective

  // Everything was checked; a read that still fails (the file changed since) fails every rank.
  checkpoint::agree(world, "ferry-dlrm: resume from " + reader.directory(), [&] {
    for (const auto& [key, shards] : sebc.local_state_dict())
      for (const torchrec::LocalShard& s : shards)
        if (s.tensor.numel() > 0) reader.read_into(key, s.metadata.shard_offsets, s.tensor);
    std::map<std::string, Tensor> state;
    for (const std::string& key : reader.names())
      for (const std::string& prefix : expect.unchecked_prefixes)
        if (key.rfind(prefix, 0) == 0) state[key] = reader.read(key);
    sebc.load_optimizer_state_dict(state);
    for (size_t k = 0; k < dense.size(); ++k) {
      reader.read_into(dense_key(k), {}, dense[k].value());
      dense_opt.buffers[k] = reader.has(momentum_key(k)) ? reader.read(momentum_key(k)) : Tensor();
    }
  });
  return {reader.directory(), reader.counter("epochs_done")};
}

}  // namespace ferry::dlrm_tool
