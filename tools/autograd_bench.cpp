// ferry-autograd-bench: what the tape costs.
//
//  1. Tape overhead per node: a chain of L tiny ops (1-element float32) run with recording off
//     (values only) and with recording on plus a backward; the difference divided by L is the
//     cost of recording one node and replaying it.
//  2. A 3-layer MLP (512 wide, batch 256, float32, ReLU, MSE loss): forward + backward through
//     the tape against the same arithmetic written by hand with Eigen, in the same run.
// Medians over repetitions; the machine's timings swing, so compare the ratio, not the times.
#include <ferry/ferry.h>
#include "tools/cli/args.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace {

using namespace ferry;
using SteadyClock = std::chrono::steady_clock;

double seconds_of(const std::function<void()>& body) {
  const auto t0 = SteadyClock::now();
  body();
  return std::chrono::duration<double>(SteadyClock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Runs the bodies alternately `reps` times (so both see the same machine state) and returns
// their median times.
std::pair<double, double> paired_medians(int reps, const std::function<void()>& a,
                                         const std::function<void()>& b) {
  std::vector<double> ta, tb;
  a();  // warm up caches and allocator
  b();
  for (int i = 0; i < reps; ++i) {
    ta.push_back(seconds_of(a));
    tb.push_back(seconds_of(b));
  }
  return {median(ta), median(tb)};
}

void tape_overhead(int reps) {
  constexpr int kChain = 1000;
  Variable x(ones({1}), true, "x");
  auto values_only = [&] {
    NoGradGuard no_grad;
    Variable y = x;
    for (int i = 0; i < kChain; ++i) y = y * 1.0001;
  };
  auto with_tape = [&] {
    Variable y = x;
    for (int i = 0; i < kChain; ++i) y = y * 1.0001;
    y.backward();
    x.zero_grad();
  };
  auto [t_values, t_tape] = paired_medians(reps, values_only, with_tape);
  // Backward also computes the gradient kernels (one multiply per node), about what the
  // forward kernels cost; the overhead figure subtracts the forward values only, so it
  // includes that work and is an upper bound on the bookkeeping.
  std::printf("tape: chain of %d ops on a 1-element float32 tensor (median of %d)\n", kChain,
              reps);
  std::printf("  values only           %8.3f us per op\n", 1e6 * t_values / kChain);
  std::printf("  record + backward     %8.3f us per op\n", 1e6 * t_tape / kChain);
  std::printf("  tape overhead         %8.3f us per node (record + replay, incl. the "
              "backward kernel)\n", 1e6 * (t_tape - t_values) / kChain);
  std::printf("  without that kernel   %8.3f us per node (estimate: minus one values-only op)\n",
              1e6 * (t_tape - 2 * t_values) / kChain);
}

using Mat = RowMatrix<float>;

struct Mlp {
  static constexpr int kWidth = 512;
  static constexpr int kBatch = 256;
  std::vector<Variable> weights, biases;
  Tensor x, target;
  Mat x_eigen;  // the input as an Eigen matrix, made once

  Mlp() {
    for (int l = 0; l < 3; ++l) {
      weights.emplace_back(normal({kWidth, kWidth}, 0.0, 0.05, 10 + l), true, "w");
      biases.emplace_back(normal({kWidth}, 0.0, 0.05, 20 + l), true, "b");
    }
    x = normal({kBatch, kWidth}, 0.0, 1.0, 1);
    target = normal({kBatch, kWidth}, 0.0, 1.0, 2);
    x_eigen = x.matrix<float>();
  }

  double tape_step() {
    Variable h(x);
    for (int l = 0; l < 3; ++l) {
      h = matmul(h, weights[l]) + biases[l];
      if (l < 2) h = relu(h);
    }
    Variable loss = mse_loss(h, Variable(target));
    loss.backward();
    const double value = loss.value().item();
    for (int l = 0; l < 3; ++l) {
      weights[l].zero_grad();
      biases[l].zero_grad();
    }
    return value;
  }

  // The same forward and backward written directly with Eigen: gradients of every weight and
  // bias, none for the input (as the tape, which skips inputs that do not require grad).
  double eigen_step(std::vector<Mat>& grad_w, std::vector<Eigen::RowVectorXf>& grad_b) {
    std::vector<Mat> z(3), h(3);
    const Mat& in = x_eigen;
    for (int l = 0; l < 3; ++l) {
      const Mat& prev = l == 0 ? in : h[l - 1];
      z[l].noalias() = prev * weights[l].value().matrix<float>();
      z[l].rowwise() += biases[l].value().vec<float>().transpose();
      h[l] = l < 2 ? Mat(z[l].cwiseMax(0.0f)) : z[l];
    }
    Mat diff = h[2] - target.matrix<float>();
    const double loss = diff.squaredNorm() / diff.size();
    Mat dz = diff * (2.0f / static_cast<float>(diff.size()));
    for (int l = 2; l >= 0; --l) {
      const Mat& prev = l == 0 ? in : h[l - 1];
      grad_w[l].noalias() = prev.transpose() * dz;
      grad_b[l] = dz.colwise().sum();
      if (l == 0) break;
      Mat dh;
      dh.noalias() = dz * weights[l].value().matrix<float>().transpose();
      dz = dh.cwiseProduct((z[l - 1].array() > 0.0f).cast<float>().matrix());
    }
    return loss;
  }
};

void mlp(int reps) {
  Mlp net;
  std::vector<Mat> grad_w(3);
  std::vector<Eigen::RowVectorXf> grad_b(3);
  double loss_tape = 0, loss_eigen = 0;
  auto [t_tape, t_eigen] = paired_medians(
      reps, [&] { loss_tape = net.tape_step(); },
      [&] { loss_eigen = net.eigen_step(grad_w, grad_b); });
  // Same arithmetic, so the same loss (up to float32 summation order).
  if (std::abs(loss_tape - loss_eigen) > 1e-4 * std::abs(loss_eigen)) {
    std::fprintf(stderr, "ferry-autograd-bench: the two MLPs disagree: loss %.8g vs %.8g\n",
                 loss_tape, loss_eigen);
    std::exit(1);
  }
  std::printf("mlp: 3 layers, 512 wide, batch 256, float32, forward + backward (median of %d)\n",
              reps);
  std::printf("  ferry tape            %8.3f ms\n", 1e3 * t_tape);
  std::printf("  hand-written Eigen    %8.3f ms\n", 1e3 * t_eigen);
  std::printf("  ratio                 %8.3f\n", t_tape / t_eigen);
}

}  // namespace

int main(int argc, char** argv) {
  return ferry::cli::guarded_main("ferry-autograd-bench", [&] {
    int reps = 21;
    ferry::cli::Parser("ferry-autograd-bench", "[--reps N]",
                       "The tape's overhead per node, and an MLP step against hand-written Eigen.")
        .int_option("--reps", "repetitions; the median is printed (default 21)", &reps, 1,
                    1'000'000)
        .parse(argc, argv);
    tape_overhead(reps);
    mlp(reps);
    return 0;
  });
}
