// Intra-op threads (runtime/intra_op.h) split the DLRM step's kernels into blocks that are
// computed as the whole would be: the GEMMs of a linear layer by rows, the pooled lookups and
// their fused backward by tables, the interaction by samples. The same inputs must give the same
// bits on one thread and on three.
#include <ferry/autograd/ops.h>
#include <ferry/autograd/tensor_math.h>
#include <ferry/collectives/torchrec/torchrec.h>
#include <ferry/runtime/intra_op.h>

#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace ferry;
using namespace ferry::torchrec;

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.data<float>(), b.data<float>(), static_cast<size_t>(a.numel()) * 4) == 0;
}

// Sets the thread count for one scope, and back to one after.
struct Threads {
  explicit Threads(int n) { set_intra_op_threads(n); }
  ~Threads() { set_intra_op_threads(1); }
};

// "f3" and the like (built by appending: GCC 12 warns falsely on "f" + std::to_string(3)).
std::string numbered(char prefix, int k) {
  std::string name(1, prefix);
  name += std::to_string(k);
  return name;
}

// A batch of `features` features over `batch` samples, 0-4 ids per bag below `rows`.
KeyedJaggedTensor random_kjt(int features, int64_t batch, int64_t rows, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<std::string> keys;
  std::vector<int64_t> lengths, ids;
  for (int f = 0; f < features; ++f) {
    keys.push_back(numbered('f', f));
    for (int64_t b = 0; b < batch; ++b) {
      const auto n = static_cast<int64_t>(gen() % 5);
      lengths.push_back(n);
      for (int64_t i = 0; i < n; ++i) ids.push_back(static_cast<int64_t>(gen() % rows));
    }
  }
  return KeyedJaggedTensor::from_lengths_sync(keys, from_vector(ids), from_vector(lengths));
}

}  // namespace

TEST_CASE("intra-op threads: linear, the pooled lookup with its fused update and the "
          "interaction give the same bits on 1 and 3 threads", "[dlrm][intra_op]") {
  SECTION("linear: the top MLP's first layer, forward and backward") {
    const Tensor x = normal({512, 367}, 0, 1, 1), w = normal({64, 367}, 0, 1, 2);
    const Tensor b = normal({64}, 0, 1, 3), g = normal({512, 64}, 0, 1, 4);
    kernels::LinearGrads grads[2];
    Tensor y[2];
    for (int k = 0; k < 2; ++k) {
      Threads threads(k == 0 ? 1 : 3);
      y[k] = kernels::linear(x, w, b, Activation::Relu);
      grads[k] = kernels::linear_backward(g, x, w, y[k], Activation::Relu, true, true, true);
    }
    CHECK(same_bits(y[0], y[1]));
    CHECK(same_bits(grads[0].x, grads[1].x));
    CHECK(same_bits(grads[0].w, grads[1].w));
    CHECK(same_bits(grads[0].b, grads[1].b));
  }
  SECTION("pooled lookup of 7 fused tables: the output and the updated tables") {
    const KeyedJaggedTensor kjt = random_kjt(7, 96, 50, 5);
    const Tensor upstream = normal({96, 7 * 16}, 0, 1, 6);
    Tensor out[2];
    std::vector<Tensor> tables[2];
    for (int k = 0; k < 2; ++k) {
      Threads threads(k == 0 ? 1 : 3);
      std::vector<FeatureLookup> lookups;
      for (int f = 0; f < 7; ++f) {
        auto t = std::make_shared<EmbeddingTable>(numbered('t', f),
                                                  uniform({50, 16}, -1, 1, 10 + f));
        t->set_fused_optimizer({.optimizer = EmbOptimType::Sgd, .learning_rate = 0.5});
        lookups.push_back({.table = t, .feature = numbered('f', f)});
      }
      const Variable y = pooled_embedding_lookup(lookups, kjt);
      backward(y, upstream);
      out[k] = y.value();
      for (const FeatureLookup& l : lookups) tables[k].push_back(l.table->weight().value());
    }
    CHECK(same_bits(out[0], out[1]));
    for (size_t t = 0; t < 7; ++t) {
      CAPTURE(t);
      CHECK(same_bits(tables[0][t], tables[1][t]));
    }
    // The update did happen: the tables are not their initial values.
    CHECK_FALSE(same_bits(tables[0][0], uniform({50, 16}, -1, 1, 10)));
  }
  SECTION("dot interaction of 200 samples, forward and backward") {
    const Tensor dense = normal({200, 16}, 0, 1, 7), sparse = normal({200, 26 * 16}, 0, 1, 8);
    const Tensor g = normal({200, 16 + 27 * 26 / 2}, 0, 1, 9);
    Tensor out[2], d_dense[2], d_sparse[2];
    for (int k = 0; k < 2; ++k) {
      Threads threads(k == 0 ? 1 : 3);
      const Variable dv(dense, true), sv(sparse, true);
      const Variable y = dot_interaction(dv, sv, 26);
      backward(y, g);
      out[k] = y.value();
      d_dense[k] = dv.grad();
      d_sparse[k] = sv.grad();
    }
    CHECK(same_bits(out[0], out[1]));
    CHECK(same_bits(d_dense[0], d_dense[1]));
    CHECK(same_bits(d_sparse[0], d_sparse[1]));
  }
}
