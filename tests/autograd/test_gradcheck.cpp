// gradcheck itself: it passes a correct backward and catches a wrong one, naming the element.
#include <ferry/autograd/function.h>
#include <ferry/autograd/gradcheck.h>

#include <catch2/catch.hpp>

#include <cmath>

using namespace ferry;
using Catch::Matchers::Contains;

namespace {

// y = sin(x) elementwise, with a backward that is optionally wrong at one element.
class Sin : public Function {
 public:
  explicit Sin(int64_t broken_element = -1) : broken_(broken_element) {}
  std::string name() const override { return "sin"; }
  std::vector<Tensor> forward(Context& ctx, const std::vector<Tensor>& in) override {
    ctx.save_for_backward({in[0]});
    Tensor y = in[0].clone();
    y.vec<double>() = in[0].vec<double>().array().sin().matrix();
    return {y};
  }
  std::vector<Tensor> backward(Context& ctx, const std::vector<Tensor>& g) override {
    Tensor x = ctx.saved()[0];
    Tensor dx = g[0].clone();
    dx.vec<double>().array() *= x.vec<double>().array().cos();
    if (broken_ >= 0) dx.set_flat(broken_, dx.get_flat(broken_) + 0.01);
    return {dx};
  }

 private:
  int64_t broken_;
};

}  // namespace

TEST_CASE("gradcheck accepts a correct backward") {
  auto fn = [](const std::vector<Variable>& in) {
    return apply(std::make_shared<Sin>(), {in[0]});
  };
  for (Shape shape : {Shape{5}, Shape{2, 3}, Shape{0}, Shape{}}) {
    GradcheckResult r = gradcheck(fn, {uniform(shape, -2, 2, 3, DType::Float64)});
    INFO(r.message);
    CHECK(r.ok);
    CHECK(r.elements_checked == shape_numel(shape));
  }
}

TEST_CASE("gradcheck reports the element a wrong backward gets wrong") {
  auto fn = [](const std::vector<Variable>& in) {
    return apply(std::make_shared<Sin>(4), {in[0]});
  };
  GradcheckResult r = gradcheck(fn, {uniform({2, 3}, -2, 2, 3, DType::Float64)});
  CHECK_FALSE(r.ok);
  CHECK(r.worst_input == 0);
  CHECK(r.worst_element == 4);
  CHECK(std::abs(r.worst_error - 0.01) < 1e-6);
  CHECK_THAT(r.message, Contains("FAILED") && Contains("element 4"));
}

TEST_CASE("gradcheck wants float64 inputs") {
  auto fn = [](const std::vector<Variable>& in) { return in; };
  CHECK_THROWS_AS(gradcheck(fn, {ones({2}, DType::Float32)}), InvalidArgument);
}
