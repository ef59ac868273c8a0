#include <ferry/collectives/torchrec/comm/comm_switches.h>

#include <ferry/autograd/function.h>
#include <ferry/collectives/differentiable/checks.h>
#include <ferry/runtime/error.h>

#include <atomic>

namespace ferry::torchrec {
namespace {

std::atomic<bool> gradient_division{true};
std::atomic<bool> use_sync_collectives{false};
thread_local std::optional<bool> sync_scope;  // the innermost UseSyncCollectivesScope's value

// Multiplies the gradient by a fixed factor; the forward passes the value through untouched.
class CommOpGradientScaling final : public Function {
 public:
  explicit CommOpGradientScaling(int64_t factor) : factor_(factor) {}
  std::string name() const override { return "comm_op_gradient_scaling"; }

  std::vector<Tensor> forward(Context&, const std::vector<Tensor>& in) override { return {in[0]}; }
  std::vector<Tensor> backward(Context&, const std::vector<Tensor>& g) override {
    Tensor dx = g[0].clone();
    const double factor = static_cast<double>(factor_);
    visit_dtype(dx.dtype(), [&]<class T>() {
      if constexpr (std::is_floating_point_v<T>) dx.vec<T>() *= static_cast<T>(factor);
    });
    return {dx};
  }

 private:
  int64_t factor_;
};

}  // namespace

void set_gradient_division(bool val) { gradient_division.store(val); }
bool get_gradient_division() { return gradient_division.load(); }

void set_use_sync_collectives(bool val) { use_sync_collectives.store(val); }
bool get_use_sync_collectives() { return sync_scope ? *sync_scope : use_sync_collectives.load(); }

UseSyncCollectivesScope::UseSyncCollectivesScope(bool enabled) : previous_(sync_scope) {
  sync_scope = enabled;
}
UseSyncCollectivesScope::~UseSyncCollectivesScope() { sync_scope = previous_; }

Variable comm_op_gradient_scaling(const Variable& x, int64_t scale_gradient_factor) {
  FERRY_CHECK(x.defined(), InvalidArgument, "comm_op_gradient_scaling: the input is undefined");
  FERRY_CHECK(x.dtype() == DType::Float32 || x.dtype() == DType::Float64, InvalidArgument,
              "comm_op_gradient_scaling: takes float32 or float64, given ", dtype_name(x.dtype()));
  FERRY_CHECK(scale_gradient_factor >= 1, InvalidArgument,
              "comm_op_gradient_scaling: scale_gradient_factor must be >= 1, given ",
              scale_gradient_factor);
  if (scale_gradient_factor == 1) return x;
  return apply(std::make_shared<CommOpGradientScaling>(scale_gradient_factor), {x})[0];
}

Variable comm_op_gradient_scaling(const Variable& x, const Group& group) {
  ferry::detail::check_group(group, "comm_op_gradient_scaling");
  return comm_op_gradient_scaling(x, get_gradient_division() ? int64_t{group.size()} : 1);
}

}  // namespace ferry::torchrec
