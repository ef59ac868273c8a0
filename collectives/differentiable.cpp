#include "collectives/differentiable.h"

#include "autograd/function.h"
#include "collectives/collectives.h"
#include "collectives/differentiable_checks.h"
#include "collectives/engine.h"
#include "runtime/error.h"

namespace ferry {

namespace {

class AllReduceSum final : public Function {
 public:
  explicit AllReduceSum(Group group) : group_(std::move(group)) {}
  std::string name() const override { return "all_reduce"; }
  bool is_collective() const override { return true; }

  std::vector<Tensor> forward(Context&, const std::vector<Tensor>& in) override {
    Tensor y = empty(in[0].shape(), in[0].dtype());
    ferry::all_reduce(in[0], y, group_).wait();
    return {y};
  }
  std::vector<Tensor> backward(Context&, const std::vector<Tensor>& g) override {
    Tensor dx = empty(g[0].shape(), g[0].dtype());
    ferry::all_reduce(g[0], dx, group_).wait();
    return {dx};
  }

 private:
  Group group_;
};

class AllGather final : public Function {
 public:
  explicit AllGather(Group group) : group_(std::move(group)) {}
  std::string name() const override { return "all_gather"; }
  bool is_collective() const override { return true; }

  std::vector<Tensor> forward(Context&, const std::vector<Tensor>& in) override {
    const int64_t rows = in[0].size(0);
    Tensor y = empty(detail::with_rows(in[0].shape(), rows * group_.size()), in[0].dtype());
    ferry::all_gather(in[0], y, group_).wait();
    return {y};
  }
  std::vector<Tensor> backward(Context&, const std::vector<Tensor>& g) override {
    const int64_t rows = g[0].size(0) / group_.size();
    Tensor dx = empty(detail::with_rows(g[0].shape(), rows), g[0].dtype());
    ferry::reduce_scatter(g[0], dx, group_).wait();
    return {dx};
  }

 private:
  Group group_;
};

}  // namespace

Variable all_reduce(const Variable& x, const Group& group) {
  detail::check_differentiable_input(x, group, "all_reduce");
  return apply(std::make_shared<AllReduceSum>(group), {x})[0];
}

Variable all_gather(const Variable& x, const Group& group) {
  detail::check_differentiable_input(x, group, "all_gather");
  detail::check_has_rows(x, group, "all_gather");
  return apply(std::make_shared<AllGather>(group), {x})[0];
}

}  // namespace ferry
