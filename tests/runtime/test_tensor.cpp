// Tensor core: metadata, storage sharing, views, element access, Eigen maps, versions.
#include <ferry/runtime/tensor.h>

#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

using namespace ferry;

namespace {

std::vector<int64_t> sizes0(const std::vector<Tensor>& pieces) {
  std::vector<int64_t> out;
  for (const Tensor& p : pieces) out.push_back(p.size(0));
  return out;
}

}  // namespace

TEST_CASE("undefined tensors throw on use", "[tensor]") {
  Tensor t;
  CHECK_FALSE(t.defined());
  REQUIRE_THROWS_AS(t.dtype(), InvalidArgument);
  REQUIRE_THROWS_AS(t.shape(), InvalidArgument);
  REQUIRE_THROWS_AS(t.numel(), InvalidArgument);
  REQUIRE_THROWS_AS(t.raw_data(), InvalidArgument);
  REQUIRE_THROWS_AS(t.data<float>(), InvalidArgument);
  REQUIRE_THROWS_AS(t.clone(), InvalidArgument);
  REQUIRE_THROWS_AS(t.to(DType::Float64), InvalidArgument);
  REQUIRE_THROWS_AS(t.fill_(1), InvalidArgument);
  REQUIRE_THROWS_AS(t.version(), InvalidArgument);
  REQUIRE_THROWS_AS(t.split(1), InvalidArgument);
  REQUIRE_THROWS_WITH(t.reshape({1}), Catch::Contains("Tensor::reshape") &&
                                          Catch::Contains("undefined"));
  REQUIRE_THROWS_AS(zeros({1}).shares_storage_with(t), InvalidArgument);
}

TEST_CASE("metadata and allocation", "[tensor]") {
  Tensor t = empty({2, 3, 4}, DType::Float64);
  CHECK(t.defined());
  CHECK(t.dtype() == DType::Float64);
  CHECK(t.shape() == Shape{2, 3, 4});
  CHECK(t.dim() == 3);
  CHECK(t.size(0) == 2);
  CHECK(t.size(-1) == 4);
  CHECK(t.size(-3) == 2);
  CHECK(t.numel() == 24);
  CHECK(t.element_size() == 8);
  CHECK(t.nbytes() == 192);
  CHECK(reinterpret_cast<uintptr_t>(t.raw_data()) % 64 == 0);
  REQUIRE_THROWS_AS(t.size(3), InvalidArgument);
  REQUIRE_THROWS_AS(t.size(-4), InvalidArgument);
  REQUIRE_THROWS_AS(empty({2, -1}), InvalidArgument);
  REQUIRE_THROWS_WITH(zeros({3, -2}), Catch::Contains("[3, -2]"));
  REQUIRE_THROWS_AS(empty({int64_t{1} << 40, int64_t{1} << 40}), InvalidArgument);
}

TEST_CASE("0-d tensors hold one element", "[tensor]") {
  Tensor s = full({}, 2.5, DType::Float32);
  CHECK(s.dim() == 0);
  CHECK(s.numel() == 1);
  CHECK(s.nbytes() == 4);
  CHECK(s.item() == 2.5);
  CHECK(s.at<float>({}) == 2.5f);
  s.set_flat(0, -1.0);
  CHECK(s.item() == -1.0);
  CHECK(s.reshape({1, 1}).shape() == Shape{1, 1});
  CHECK(s.flatten().shape() == Shape{1});
  CHECK(zeros({1}).reshape({}).dim() == 0);
  REQUIRE_THROWS_AS(s.size(0), InvalidArgument);
  REQUIRE_THROWS_AS(s.split(1), InvalidArgument);
  REQUIRE_THROWS_AS(s.chunk(1), InvalidArgument);
  REQUIRE_THROWS_AS(s.select(0), InvalidArgument);
  REQUIRE_THROWS_AS(s.narrow(0, 0, 1), InvalidArgument);
  REQUIRE_THROWS_AS(s.at<float>({0}), InvalidArgument);
}

TEST_CASE("zero-size tensors", "[tensor]") {
  Tensor z = zeros({0, 3});
  CHECK(z.numel() == 0);
  CHECK(z.nbytes() == 0);
  CHECK(z.size(1) == 3);
  float sink = 0;
  std::memcpy(&sink, z.raw_data(), z.nbytes());  // valid for 0 bytes whatever the pointer
  CHECK(z.to_vector<float>().empty());
  CHECK(z.vec<float>().size() == 0);
  CHECK(z.reshape({3, 0}).shape() == Shape{3, 0});
  CHECK(z.reshape({-1, 3}).shape() == Shape{0, 3});
  REQUIRE_THROWS_AS(z.reshape({-1, 0}), InvalidArgument);  // any size would do: ambiguous
  CHECK(sizes0(z.split(2)) == std::vector<int64_t>{0});
  CHECK(sizes0(z.chunk(3)) == std::vector<int64_t>{0, 0, 0});
  CHECK(z.clone().shape() == Shape{0, 3});
  CHECK(z.to(DType::Int64).shape() == Shape{0, 3});
  CHECK(zeros({4, 0}).narrow(0, 1, 2).shape() == Shape{2, 0});
  CHECK(zeros({2, 0, 3}).narrow(2, 1, 1).shape() == Shape{2, 0, 1});  // no bytes: always a view
  CHECK(zeros({2, 3}).narrow(1, 3, 0).numel() == 0);
  REQUIRE_THROWS_AS(z.item(), InvalidArgument);
  REQUIRE_THROWS_AS(z.get_flat(0), InvalidArgument);
  z.fill_(3);  // nothing to write, still a write
  CHECK(z.version() == 1);
}

TEST_CASE("views share storage with their parent", "[tensor][views]") {
  Tensor t = arange(12, DType::Float32).reshape({4, 3});
  Tensor rows = t.narrow(0, 1, 2);
  CHECK(rows.shape() == Shape{2, 3});
  CHECK(rows.shares_storage_with(t));
  CHECK(rows.at<float>({0, 0}) == 3.0f);
  rows.at<float>({1, 2}) = 100.0f;  // row 2, col 2 of t
  CHECK(t.at<float>({2, 2}) == 100.0f);
  CHECK(t.get_flat(8) == 100.0);

  Tensor row3 = t.select(3);
  CHECK(row3.shape() == Shape{3});
  row3.fill_(-1);
  CHECK(t.to_vector<float>() ==
        std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 100, -1, -1, -1});
  CHECK(t.select(-4).get_flat(1) == 1.0);
  REQUIRE_THROWS_AS(t.select(4), InvalidArgument);
  REQUIRE_THROWS_AS(t.select(-5), InvalidArgument);

  Tensor flat = t.flatten();
  flat.set_flat(0, 42);
  CHECK(t.at<float>({0, 0}) == 42.0f);
  CHECK(t.reshape({2, -1}).shape() == Shape{2, 6});
  CHECK(t.reshape({-1}).shape() == Shape{12});
  CHECK(t.reshape({3, 2, -1}).shape() == Shape{3, 2, 2});
  t.reshape({2, 6}).set_flat(11, 7);
  CHECK(t.at<float>({3, 2}) == 7.0f);

  std::vector<Tensor> pieces = t.split(std::vector<int64_t>{1, 3});
  pieces[1].at<float>({0, 1}) = 55.0f;
  CHECK(t.at<float>({1, 1}) == 55.0f);

  Tensor copy = t.clone();
  CHECK_FALSE(copy.shares_storage_with(t));
  copy.fill_(0);
  CHECK(t.at<float>({1, 1}) == 55.0f);
}

TEST_CASE("overlaps compares byte ranges", "[tensor][views]") {
  Tensor t = zeros({4, 2});
  CHECK(t.overlaps(t));
  CHECK(t.overlaps(t.narrow(0, 3, 1)));
  CHECK_FALSE(t.narrow(0, 0, 2).overlaps(t.narrow(0, 2, 2)));
  CHECK(t.narrow(0, 0, 3).overlaps(t.narrow(0, 2, 2)));
  CHECK_FALSE(t.narrow(0, 1, 0).overlaps(t));  // empty ranges touch nothing
  CHECK_FALSE(t.overlaps(t.clone()));
  CHECK_FALSE(t.overlaps(zeros({4, 2})));
}

TEST_CASE("narrow on inner dims is a view only when contiguous", "[tensor][views]") {
  Tensor a = arange(6, DType::Int32).reshape({1, 6});
  Tensor v = a.narrow(1, 2, 3);
  CHECK(v.shape() == Shape{1, 3});
  CHECK(v.shares_storage_with(a));
  CHECK(v.to_vector<int32_t>() == std::vector<int32_t>{2, 3, 4});
  v.fill_(9);
  CHECK(a.to_vector<int32_t>() == std::vector<int32_t>{0, 1, 9, 9, 9, 5});
  CHECK(arange(6, DType::Int32).reshape({1, 1, 6}).narrow(-1, 4, 2).to_vector<int32_t>() ==
        std::vector<int32_t>{4, 5});

  Tensor b = arange(6, DType::Int32).reshape({2, 3});
  REQUIRE_THROWS_AS(b.narrow(1, 0, 2), InvalidArgument);
  REQUIRE_THROWS_WITH(b.narrow(1, 0, 2), Catch::Contains("narrow_copy") &&
                                             Catch::Contains("[2, 3]"));
  CHECK(b.narrow(1, 0, 3).shares_storage_with(b));  // the whole dim is the tensor itself
  CHECK(b.narrow_copy(1, 1, 2).to_vector<int32_t>() == std::vector<int32_t>{1, 2, 4, 5});
  CHECK(b.narrow_copy(0, 1, 1).to_vector<int32_t>() == std::vector<int32_t>{3, 4, 5});
  CHECK_FALSE(b.narrow_copy(0, 1, 1).shares_storage_with(b));
  Tensor c = arange(24, DType::Int64).reshape({2, 3, 4});
  CHECK(c.narrow_copy(1, 2, 1).to_vector<int64_t>() ==
        std::vector<int64_t>{8, 9, 10, 11, 20, 21, 22, 23});
  CHECK(c.narrow_copy(-1, 3, 1).to_vector<int64_t>() == std::vector<int64_t>{3, 7, 11, 15, 19, 23});

  REQUIRE_THROWS_AS(b.narrow(2, 0, 1), InvalidArgument);
  REQUIRE_THROWS_AS(b.narrow(0, -1, 1), InvalidArgument);
  REQUIRE_THROWS_AS(b.narrow(0, 1, 2), InvalidArgument);
  REQUIRE_THROWS_AS(b.narrow(0, 0, -1), InvalidArgument);
  REQUIRE_THROWS_AS(b.narrow_copy(1, 2, 2), InvalidArgument);
  REQUIRE_THROWS_AS(b.narrow_copy(-3, 0, 1), InvalidArgument);
}

TEST_CASE("split and chunk along dim 0", "[tensor][views]") {
  Tensor t = arange(10, DType::Float32).reshape({5, 2});
  CHECK(sizes0(t.split(2)) == std::vector<int64_t>{2, 2, 1});
  CHECK(sizes0(t.split(5)) == std::vector<int64_t>{5});
  CHECK(sizes0(t.split(7)) == std::vector<int64_t>{5});
  std::vector<Tensor> parts = t.split(2);
  CHECK(parts[2].to_vector<float>() == std::vector<float>{8, 9});
  CHECK(parts[1].shares_storage_with(t));

  std::vector<Tensor> by_sizes = t.split(std::vector<int64_t>{1, 0, 4});
  CHECK(sizes0(by_sizes) == std::vector<int64_t>{1, 0, 4});
  CHECK(by_sizes[2].get_flat(0) == 2.0);
  REQUIRE_THROWS_AS(t.split(0), InvalidArgument);
  REQUIRE_THROWS_AS(t.split(-1), InvalidArgument);
  REQUIRE_THROWS_AS(t.split(std::vector<int64_t>{3, 3}), InvalidArgument);
  REQUIRE_THROWS_AS(t.split(std::vector<int64_t>{6, -1}), InvalidArgument);
  Tensor six = zeros({6, 2});
  REQUIRE_THROWS_WITH(six.split(std::vector<int64_t>{2, 3}),
                      Catch::Contains("Tensor::split: split sizes sum to 5 but size(0) is 6"));

  // torch.chunk: pieces of ceil(n / chunks), so fewer pieces than asked are possible.
  CHECK(sizes0(six.chunk(4)) == std::vector<int64_t>{2, 2, 2});
  CHECK(sizes0(six.chunk(6)) == std::vector<int64_t>{1, 1, 1, 1, 1, 1});
  CHECK(sizes0(six.chunk(1)) == std::vector<int64_t>{6});
  CHECK(sizes0(t.chunk(2)) == std::vector<int64_t>{3, 2});
  CHECK(sizes0(t.chunk(3)) == std::vector<int64_t>{2, 2, 1});
  CHECK(sizes0(zeros({2}).chunk(5)) == std::vector<int64_t>{1, 1});
  CHECK(sizes0(arange(7).chunk(3)) == std::vector<int64_t>{3, 3, 1});
  REQUIRE_THROWS_AS(t.chunk(0), InvalidArgument);
}

TEST_CASE("reshape checks the element count", "[tensor][views]") {
  Tensor t = zeros({2, 3});
  REQUIRE_THROWS_AS(t.reshape({4, 2}), InvalidArgument);
  REQUIRE_THROWS_WITH(t.reshape({4, 2}), Catch::Contains("[4, 2]") && Catch::Contains("6"));
  REQUIRE_THROWS_AS(t.reshape({-1, -1}), InvalidArgument);
  REQUIRE_THROWS_AS(t.reshape({4, -1}), InvalidArgument);
  REQUIRE_THROWS_AS(t.reshape({-2, -3}), InvalidArgument);
  CHECK(t.reshape({3, 1, -1}).shape() == Shape{3, 1, 2});
}

TEST_CASE("element access is typed and bounds-checked", "[tensor]") {
  Tensor t = from_vector<int64_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(t.at<int64_t>({1, 0}) == 4);
  const Tensor& ct = t;
  CHECK(ct.at<int64_t>({0, 2}) == 3);
  CHECK(ct.data<int64_t>()[5] == 6);
  t.data<int64_t>()[0] = -8;
  CHECK(t.get_flat(0) == -8.0);
  REQUIRE_THROWS_AS(t.at<int64_t>({2, 0}), InvalidArgument);
  REQUIRE_THROWS_AS(t.at<int64_t>({0, -1}), InvalidArgument);
  REQUIRE_THROWS_AS(t.at<int64_t>({0}), InvalidArgument);
  REQUIRE_THROWS_AS(t.at<int32_t>({0, 0}), InvalidArgument);
  REQUIRE_THROWS_AS(t.data<double>(), InvalidArgument);
  REQUIRE_THROWS_WITH(ct.data<float>(), Catch::Contains("int64") && Catch::Contains("float32"));
  REQUIRE_THROWS_AS(t.to_vector<int32_t>(), InvalidArgument);
  REQUIRE_THROWS_AS(t.item(), InvalidArgument);
  REQUIRE_THROWS_AS(t.get_flat(6), InvalidArgument);
  REQUIRE_THROWS_AS(t.get_flat(-1), InvalidArgument);
  REQUIRE_THROWS_AS(t.set_flat(6, 0), InvalidArgument);
  CHECK(t.select(1).narrow(0, 2, 1).item() == 6.0);
  CHECK(from_vector<half>({half(0.5f)}).item() == 0.5);
  CHECK(from_vector<uint8_t>({200}).item() == 200.0);
}

TEST_CASE("Eigen maps alias the tensor", "[tensor][eigen]") {
  Tensor t = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  auto m = t.matrix<double>();
  CHECK(m.rows() == 2);
  CHECK(m.cols() == 3);
  CHECK(m(1, 0) == 4.0);
  m(0, 2) = 30.0;
  CHECK(t.at<double>({0, 2}) == 30.0);
  const RowMatrix<double> gram = m * m.transpose();
  CHECK(gram(0, 0) == 1 + 4 + 900);
  CHECK(gram(0, 1) == 4 + 10 + 180);

  Tensor row = from_vector<float>({1, 2, 3});
  CHECK(row.matrix<float>().rows() == 1);
  CHECK(row.matrix<float>().cols() == 3);
  Tensor cube = arange(8, DType::Int32).reshape({2, 2, 2});
  REQUIRE_THROWS_AS(cube.matrix<int32_t>(), InvalidArgument);
  REQUIRE_THROWS_AS(t.matrix<float>(), InvalidArgument);
  CHECK(cube.vec<int32_t>().sum() == 28);
  cube.vec<int32_t>()(7) = 70;
  CHECK(cube.at<int32_t>({1, 1, 1}) == 70);
  const Tensor& ccube = cube;
  CHECK(ccube.vec<int32_t>().size() == 8);
  CHECK(ccube.select(1).matrix<int32_t>()(1, 1) == 70);
  CHECK(from_vector<half>({half(1.5f), half(2.0f)}).vec<half>().sum() == half(3.5f));
}

TEST_CASE("the version counter counts in-place writes", "[tensor][version]") {
  Tensor t = zeros({4});
  CHECK(t.version() == 0);
  CHECK(ones({2}).version() == 0);
  t.fill_(1);
  CHECK(t.version() == 1);
  t.copy_(ones({4}));
  CHECK(t.version() == 2);
  t.set_flat(0, 5);
  CHECK(t.version() == 3);
  t.data<float>()[1] = 2;  // raw pointer writes are not tracked
  CHECK(t.version() == 3);
  Tensor view = t.narrow(0, 2, 2);
  view.fill_(0);
  CHECK(t.version() == 4);  // one counter per storage, shared by views
  CHECK(view.version() == 4);
  t.bump_version();
  CHECK(view.version() == 5);
  CHECK(t.clone().version() == 0);
  CHECK(t.to(DType::Float64).version() == 0);
}

TEST_CASE("from_blob borrows caller memory", "[tensor][blob]") {
  std::vector<float> buf{1, 2, 3, 4, 5, 6};
  Tensor t = Tensor::from_blob(buf.data(), {2, 3}, DType::Float32);
  CHECK(t.raw_data() == buf.data());
  CHECK(t.at<float>({1, 1}) == 5.0f);
  t.set_flat(0, -1);
  CHECK(buf[0] == -1.0f);
  buf[5] = 60;
  CHECK(t.at<float>({1, 2}) == 60.0f);
  CHECK(t.select(1).raw_data() == buf.data() + 3);
  CHECK(t.version() == 1);
  Tensor c = t.clone();
  CHECK(c.raw_data() != buf.data());
  CHECK(c.to_vector<float>() == buf);

  Tensor none = Tensor::from_blob(nullptr, {0, 4}, DType::Int64);
  CHECK(none.numel() == 0);
  CHECK(none.clone().numel() == 0);
  REQUIRE_THROWS_AS(Tensor::from_blob(nullptr, {2}, DType::Float32), InvalidArgument);
  REQUIRE_THROWS_AS(Tensor::from_blob(buf.data(), {-1}, DType::Float32), InvalidArgument);
}
