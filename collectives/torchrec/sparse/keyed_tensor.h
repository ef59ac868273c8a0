// ferry::torchrec::KeyedTensor: torchrec's KeyedTensor, dense per-key blocks side by side in one
// tensor (an EmbeddingBagCollection's pooled output).
//
// keys [k0, k1] with length_per_key [2, 1] and key_dim 1: values is [B, 3], key k0 owns
// columns 0..1 and k1 column 2. Example (B = 2):
//
//   values = [[1, 2, 3],        kt["k0"] = [[1, 2],      kt["k1"] = [[3],
//             [4, 5, 6]]                    [4, 5]]                   [6]]
//
// key_dim may be any dim of values (torchrec's default, 1, is the only one regroup accepts).
// A per-key tensor is a view when key_dim is 0 (or every dim before it has size 1), a copy
// otherwise. Plain data: values is a Tensor, not an autograd Variable.
#pragma once

#include <ferry/runtime/tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ferry::torchrec {

class KeyedTensor {
 public:
  // Validates: keys unique, one length per key, lengths >= 0, sum(length_per_key) ==
  // values.size(key_dim), 0 <= key_dim < values.dim(). Throws InvalidArgument
  // ("KeyedTensor: ...") naming the offending value.
  KeyedTensor(std::vector<std::string> keys, std::vector<int64_t> length_per_key, Tensor values,
              int64_t key_dim = 1);
  // One tensor per key, concatenated along key_dim (all other dims equal, one dtype).
  static KeyedTensor from_tensor_list(std::vector<std::string> keys,
                                      const std::vector<Tensor>& tensors, int64_t key_dim = 1);

  const std::vector<std::string>& keys() const { return keys_; }
  const std::vector<int64_t>& length_per_key() const { return length_per_key_; }
  const std::vector<int64_t>& offset_per_key() const { return offset_per_key_; }  // K+1 entries
  const Tensor& values() const { return values_; }
  int64_t key_dim() const { return key_dim_; }

  int64_t key_index(const std::string& key) const;  // throws for an unknown key
  Tensor operator[](const std::string& key) const;   // the key's block along key_dim
  std::map<std::string, Tensor> to_dict() const;

  // For each group of keys, the blocks of those keys (found in whichever KeyedTensor has them)
  // concatenated in the group's order along dim 1: [B, sum of the group's lengths]. Every
  // KeyedTensor has key_dim 1, the same dtype and the same dims other than 1; a key must be in
  // exactly one of them. A key may appear in several groups. Throws InvalidArgument otherwise.
  static std::vector<Tensor> regroup(const std::vector<KeyedTensor>& keyed_tensors,
                                     const std::vector<std::vector<std::string>>& groups);
  // regroup, returned by name: names[i] -> group i.
  static std::map<std::string, Tensor> regroup_as_dict(
      const std::vector<KeyedTensor>& keyed_tensors,
      const std::vector<std::vector<std::string>>& groups, const std::vector<std::string>& names);

 private:
  std::vector<std::string> keys_;
  std::vector<int64_t> length_per_key_, offset_per_key_;
  Tensor values_;
  int64_t key_dim_ = 1;
};

}  // namespace ferry::torchrec
