// ferry-train: the demo trainer. Data-parallel training of a small MLP classifier on an embedded
// synthetic dataset, the way a C++ trainer would use ferry:
//
//   - every rank builds its model from its own seed, then a GradientReducer
//     (collectives/ddp/gradient_reducer.h, ferry's DistributedDataParallel) checks that the
//     ranks registered the same parameters and broadcasts rank 0's values, so the replicas start
//     identical;
//   - each rank trains on its own shard of every mini-batch;
//   - the reducer averages the gradients over the ranks as backward produces them: as soon as
//     every gradient of a bucket is complete it launches an asynchronous all_reduce (avg) of the
//     bucket, overlapping the rest of backward; finish() waits for them before the optimizer
//     steps (--bucket-kib sets the bucket cap; the default 16 KiB makes three buckets of the
//     64-wide MLP: {b3, w3, b2}, {w2}, {b1, w1}, launched in that order);
//   - each epoch the ranks agree on the mean training loss and the test accuracy with
//     collectives, and rank 0 prints them.
// At the end it checks that the replicas are still bit-identical and that the model learned:
// test loss below half its initial value and test accuracy above 90% (exit status 1 otherwise). Runs its ranks as threads (local transport) by default, or one
// rank per process under mpiexec: `mpiexec -n 2 ferry-train`.
//
// The dataset: 16 features drawn from N(0, 1); the label is 1 when a fixed random "teacher"
// network (16 -> 32 -> 1, tanh) gives a positive output. 4096 training and 1024 test samples.
#include <ferry/ferry.h>
#include "tools/cli/args.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace ferry;

struct Options {
  int world_size = 4;
  int epochs = 8;
  int batch = 64;  // global mini-batch, split over the ranks
  int hidden = 64;
  double lr = 0.1;
  double momentum = 0.9;
  uint64_t seed = 7;
  int64_t bucket_kib = 16;  // the GradientReducer's bucket cap
};

constexpr int kFeatures = 16;
constexpr int kTrain = 4096;
constexpr int kTest = 1024;

struct Dataset {
  Tensor x_train, y_train, x_test, y_test;  // x: [n, 16] float32, y: [n, 1] float32 in {0, 1}
};

Tensor teacher_labels(const Tensor& x, uint64_t seed) {
  NoGradGuard no_grad;
  // Scaled so that tanh stays mostly in its linear range: a smooth boundary a small MLP can
  // learn to well above 90% in a few epochs.
  Variable w1(normal({kFeatures, 32}, 0.0, 0.25, seed + 1));
  Variable w2(normal({32, 1}, 0.0, 0.18, seed + 2));
  Tensor logits = matmul(tanh(matmul(Variable(x), w1)), w2).value();
  Tensor y = empty(logits.shape());
  for (int64_t i = 0; i < logits.numel(); ++i) y.set_flat(i, logits.get_flat(i) > 0 ? 1.0 : 0.0);
  return y;
}

Dataset make_dataset(uint64_t seed) {
  Dataset d;
  d.x_train = normal({kTrain, kFeatures}, 0.0, 1.0, seed + 10);
  d.x_test = normal({kTest, kFeatures}, 0.0, 1.0, seed + 11);
  d.y_train = teacher_labels(d.x_train, seed);
  d.y_test = teacher_labels(d.x_test, seed);
  return d;
}

struct Model {
  std::vector<Variable> params;  // w1, b1, w2, b2, w3, b3

  Model(int hidden, uint64_t seed) {
    const int sizes[] = {kFeatures, hidden, hidden, 1};
    for (int l = 0; l < 3; ++l) {
      const double scale = std::sqrt(2.0 / sizes[l]);  // He initialisation for the ReLUs
      params.emplace_back(normal({sizes[l], sizes[l + 1]}, 0.0, scale, seed + 100 + l), true,
                          std::string("w").append(std::to_string(l + 1)));
      params.emplace_back(zeros({sizes[l + 1]}), true,
                          std::string("b").append(std::to_string(l + 1)));
    }
  }

  Variable logits(const Variable& x) const {
    Variable h = relu(matmul(x, params[0]) + params[1]);
    h = relu(matmul(h, params[2]) + params[3]);
    return matmul(h, params[4]) + params[5];
  }
};

// Rows [begin, begin + n) of a permutation, as an int64 index tensor.
Tensor index_tensor(const std::vector<int64_t>& order, size_t begin, size_t n) {
  return from_vector<int64_t>(std::vector<int64_t>(order.begin() + begin, order.begin() + begin + n));
}

double sum_over_ranks(double mine, const Group& world) {
  Tensor t = full({}, mine, DType::Float64);
  all_reduce(t, world).wait();
  return t.item();
}

// The mean loss over the test set: each rank scores its shard, the ranks add up.
double test_loss(const Model& model, const Dataset& data, const Group& world) {
  NoGradGuard no_grad;
  std::vector<int64_t> mine;
  for (int64_t i = world.rank(); i < kTest; i += world.size()) mine.push_back(i);
  const Tensor rows = from_vector<int64_t>(mine);
  Variable loss = binary_cross_entropy_with_logits(
      model.logits(index_select(Variable(data.x_test), 0, rows)),
      index_select(Variable(data.y_test), 0, rows), Reduction::Sum);
  return sum_over_ranks(loss.value().item(), world) / kTest;
}

struct Outcome {
  double initial_test_loss = 0, final_test_loss = 0, accuracy = 0;
  bool replicas_identical = false;
};

Outcome train(Group& world, const Options& o) {
  const int W = world.size();
  const int me = world.rank();
  const Dataset data = make_dataset(o.seed);
  Model model(o.hidden, o.seed + static_cast<uint64_t>(me));  // deliberately different...
  // Gradient averaging in buckets, overlapped with backward.
  DistributedDataParallel ddp(model.params, world, {.bucket_cap_bytes = o.bucket_kib << 10});
  ddp.broadcast_parameters();  // ...until rank 0's parameters are broadcast
  Sgd optimizer(model.params, SgdOptions{.lr = o.lr, .momentum = o.momentum});
  Outcome outcome;
  outcome.initial_test_loss = test_loss(model, data, world);

  const int per_rank = o.batch / W;
  const int steps = kTrain / (per_rank * W);
  for (int epoch = 0; epoch < o.epochs; ++epoch) {
    // The same shuffle on every rank; rank r takes its slice of each global batch.
    std::vector<int64_t> order(kTrain);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937_64(o.seed * 1000 + epoch));
    double loss_sum = 0;
    for (int step = 0; step < steps; ++step) {
      Tensor rows = index_tensor(order, static_cast<size_t>(step * per_rank * W + me * per_rank),
                                 static_cast<size_t>(per_rank));
      Variable xb = index_select(Variable(data.x_train), 0, rows);
      Variable yb = index_select(Variable(data.y_train), 0, rows);
      Variable loss = binary_cross_entropy_with_logits(model.logits(xb), yb);
      loss.backward();
      ddp.finish();
      optimizer.step();
      optimizer.zero_grad();
      loss_sum += loss.value().item();
    }
    const double mean_loss = sum_over_ranks(loss_sum, world) / (steps * W);

    // Test accuracy: each rank scores its shard of the test set.
    NoGradGuard no_grad;
    int64_t correct = 0, scored = 0;
    for (int64_t i = me; i < kTest; i += W) {
      Variable xi(data.x_test.narrow(0, i, 1));
      const double logit = model.logits(xi).value().item();
      correct += (logit > 0) == (data.y_test.get_flat(i) > 0.5);
      ++scored;
    }
    const double accuracy = sum_over_ranks(static_cast<double>(correct), world) /
                            sum_over_ranks(static_cast<double>(scored), world);
    outcome.accuracy = accuracy;
    if (me == 0) {
      std::printf("epoch %2d  train loss %.4f  test accuracy %5.1f%%\n", epoch + 1, mean_loss,
                  100.0 * accuracy);
      std::fflush(stdout);
    }
  }

  outcome.final_test_loss = test_loss(model, data, world);

  // Replicas must still be identical: compare every parameter with rank 0's copy.
  bool identical = true;
  for (const Variable& p : model.params) {
    Tensor reference = p.value().clone();
    broadcast(reference, 0, world).wait();
    identical = identical && equal(reference, p.value());
  }
  outcome.replicas_identical = sum_over_ranks(identical ? 0.0 : 1.0, world) == 0.0;
  return outcome;
}

Options parse(int argc, char** argv) {
  Options o;
  cli::Parser p("ferry-train", "[options]",
                "Trains a 16-64-64-1 MLP data-parallel (threads of the local transport, or one\n"
                "process per rank under mpiexec / ferry-run). Exit status 0 when the replicas\n"
                "stayed identical and the model learned, 1 otherwise, 2 for a bad command line.");
  p.int_option("-n, --world-size", "ranks of the local transport (default 4)", &o.world_size, 1,
               1024)
      .int_option("--epochs", "training epochs (default 8)", &o.epochs, 1, 10000)
      .int_option("--batch", "global mini-batch, split over the ranks (default 64)", &o.batch, 1,
                  kTrain)
      .int_option("--hidden", "hidden layer width (default 64)", &o.hidden, 1, 1 << 16)
      .double_option("--lr", "SGD learning rate (default 0.1)", &o.lr, 1e-12, 1e6)
      .option("--seed", "N", "initialisation seed (default 7)",
              [&](const std::string& v) {
                o.seed = static_cast<uint64_t>(cli::parse_int("--seed", v, 0, INT64_MAX));
              })
      .int_option("--bucket-kib", "the gradient reducer's bucket cap (default 16)", &o.bucket_kib,
                  1, int64_t{1} << 30);
  p.parse(argc, argv);
  if (o.batch < o.world_size) throw cli::UsageError("--batch must be at least --world-size");
  return o;
}

}  // namespace

int run_main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  // Under mpiexec (or with FERRY_BACKEND set to a multi-process transport) every process is one
  // rank of init()'s world; otherwise the ranks are --world-size threads of this process.
  Group launched = init();
  const bool one_process_per_rank = launched.size() > 1;
  const int world_size = one_process_per_rank ? launched.size() : o.world_size;
  const bool printer = !one_process_per_rank || launched.rank() == 0;
  if (printer) {
    std::printf("ferry-train: %d ranks (%s), MLP %d-%d-%d-1, global batch %d, SGD lr %g "
                "momentum %g, %d epochs\n",
                world_size, one_process_per_rank ? backend_name().c_str() : "local transport",
                kFeatures, o.hidden, o.hidden, o.batch, o.lr, o.momentum, o.epochs);
  }
  Outcome result;
  if (one_process_per_rank) {
    if (o.batch < world_size) throw cli::UsageError("--batch must be at least the world size");
    result = train(launched, o);
  } else {
    std::mutex mutex;
    run_ranks(o.world_size, [&](Group& world) {
      Outcome mine = train(world, o);
      std::lock_guard lock(mutex);
      if (world.rank() == 0) result = mine;
    });
  }
  const bool learned =
      result.final_test_loss < 0.5 * result.initial_test_loss && result.accuracy > 0.9;
  if (printer) {
    std::printf("replicas identical: %s; test loss %.4f -> %.4f; test accuracy %.1f%%: %s\n",
                result.replicas_identical ? "yes" : "NO", result.initial_test_loss,
                result.final_test_loss,
                100.0 * result.accuracy, learned ? "learned" : "did NOT learn");
  }
  finalize();
  return result.replicas_identical && learned ? 0 : 1;
}

int main(int argc, char** argv) {
  return cli::guarded_main("ferry-train", [&] { return run_main(argc, argv); });
}
