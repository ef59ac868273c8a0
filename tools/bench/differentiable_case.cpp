#include "tools/bench/differentiable_case.h"

namespace ferry::bench {

bool has_differentiable_form(OpKind op) {
  return op == OpKind::AllReduce || op == OpKind::AllGather;
}

DifferentiableCase::DifferentiableCase(OpKind op, int64_t count, DType dtype, const Group& group)
    : op_(op), group_(group) {
  FERRY_CHECK(has_differentiable_form(op), InvalidArgument, "ferry-bench: ", op_name(op),
              " has no differentiable form to time");
  const int w = group.size();
  const int64_t in_count = op == OpKind::AllGather ? count / w : count;
  // Small integers, so float32 sums are exact and check() can compare bit for bit.
  x_ = full({in_count}, 1.0 + group.rank(), dtype);
  upstream_ = full({count}, 2.0 + group.rank(), dtype);
  y_raw_ = zeros({count}, dtype);
  dx_raw_ = zeros({in_count}, dtype);
}

void DifferentiableCase::run_autograd(bool keep) {
  Variable x(x_, true);
  Variable y = op_ == OpKind::AllReduce ? all_reduce(x, group_) : all_gather(x, group_);
  y.backward(upstream_);
  if (keep) {
    y_autograd_ = y.value();
    dx_autograd_ = x.grad();
  }
}

void DifferentiableCase::run_raw() {
  if (op_ == OpKind::AllReduce) {
    all_reduce(x_, y_raw_, group_).wait();
    all_reduce(upstream_, dx_raw_, group_).wait();
  } else {
    all_gather(x_, y_raw_, group_).wait();
    reduce_scatter(upstream_, dx_raw_, group_).wait();
  }
}

namespace {

class RawPair : public Baseline {
 public:
  explicit RawPair(DifferentiableCase& c, Group group) : case_(c), group_(std::move(group)) {}
  void barrier() override { ferry::barrier(group_).wait(); }
  void run() override { case_.run_raw(); }

 private:
  DifferentiableCase& case_;
  Group group_;
};

}  // namespace

std::unique_ptr<Baseline> DifferentiableCase::raw_baseline() {
  return std::make_unique<RawPair>(*this, group_);
}

std::string DifferentiableCase::check() const {
  const int w = group_.size();
  if (!y_autograd_.defined() || !dx_autograd_.defined()) return "autograd side never ran";
  if (!equal(y_autograd_, y_raw_)) return std::string(op_name(op_)) + ": forward differs from raw";
  if (!equal(dx_autograd_, dx_raw_)) return std::string(op_name(op_)) + ": gradient differs from raw";
  // Sums of 1..W and 2..W+1: all_reduce y = W(W+1)/2 everywhere, dx = W(W+3)/2; all_gather y
  // holds k+1 in block k and dx = W(W+3)/2 too (the sum of every rank's G over my block).
  const double dx = w * (w + 3) / 2.0;
  if (dx_raw_.numel() > 0 && dx_raw_.get_flat(0) != dx) {
    return std::string(op_name(op_)) + ": gradient " + std::to_string(dx_raw_.get_flat(0)) +
           ", expected " + std::to_string(dx);
  }
  if (op_ == OpKind::AllReduce && y_raw_.numel() > 0 && y_raw_.get_flat(0) != w * (w + 1) / 2.0) {
    return "all_reduce: forward " + std::to_string(y_raw_.get_flat(0)) + ", expected " +
           std::to_string(w * (w + 1) / 2.0);
  }
  if (op_ == OpKind::AllGather && y_raw_.numel() > 0 &&
      y_raw_.get_flat(y_raw_.numel() - 1) != static_cast<double>(w)) {
    return "all_gather: last block holds " + std::to_string(y_raw_.get_flat(y_raw_.numel() - 1)) +
           ", expected " + std::to_string(w);
  }
  return "";
}

}  // namespace ferry::bench
