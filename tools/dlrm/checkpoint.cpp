#include "tools/dlrm/checkpoint.h"

#include <cstdio>
#include <cstring>

namespace ferry::dlrm_tool {

void MomentumSgd::step() {
  for (size_t i = 0; i < parameters_.size(); ++i) {
    Variable& p = parameters_[i];
    if (!p.grad().defined()) continue;
    Tensor value = p.value();
    auto w = value.vec<float>();
    ColVector<float> g = p.grad().vec<float>();
    if (!buffers[i].defined()) {
      buffers[i] = p.grad().clone();
      buffers[i].vec<float>() = g;
    } else {
      auto b = buffers[i].vec<float>();
      b = float(momentum_) * b + float(1.0) * g;
    }
    g = buffers[i].vec<float>();
    w -= float(lr_) * g;
    value.bump_version();
  }
}

void save_checkpoint(const std::string& path, const Checkpoint& c) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) throw InvalidArgument("ferry-dlrm: cannot write " + path);
  auto put = [&](const void* p, size_t n) { std::fwrite(p, 1, n, f); };
  const char magic[8] = {'F', 'D', 'L', 'R', 'M', 'C', 'K', '1'};
  put(magic, 8);
  put(&c.epochs_done, 8);
  const int64_t count = static_cast<int64_t>(c.tensors.size());
  put(&count, 8);
  for (const auto& [name, t] : c.tensors) {
    const Tensor v = t.to(DType::Float32).clone();
    const int64_t len = static_cast<int64_t>(name.size()), rank = v.dim();
    put(&len, 8);
    put(name.data(), name.size());
    put(&rank, 8);
    for (int64_t d : v.shape()) put(&d, 8);
    put(v.data<float>(), v.nbytes());
  }
  if (std::fclose(f) != 0) throw InvalidArgument("ferry-dlrm: cannot write " + path);
}

Checkpoint load_checkpoint(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) throw InvalidArgument("ferry-dlrm: cannot read " + path);
  auto get = [&](void* p, size_t n) {
    if (std::fread(p, 1, n, f) != n) {
      std::fclose(f);
      throw InvalidArgument("ferry-dlrm: " + path + " is truncated");
    }
  };
  char magic[8];
  get(magic, 8);
  if (std::memcmp(magic, "FDLRMCK1", 8) != 0) {
    std::fclose(f);
    throw InvalidArgument("ferry-dlrm: " + path + " is not a ferry-dlrm checkpoint");
  }
  Checkpoint c;
  int64_t count = 0;
  get(&c.epochs_done, 8);
  get(&count, 8);
  for (int64_t i = 0; i < count; ++i) {
    int64_t len = 0, rank = 0;
    get(&len, 8);
    std::string name(static_cast<size_t>(len), '\0');
    get(name.data(), name.size());
    get(&rank, 8);
    Shape shape(static_cast<size_t>(rank));
    for (int64_t& d : shape) get(&d, 8);
    Tensor t = empty(shape, DType::Float32);
    get(t.data<float>(), t.nbytes());
    c.tensors[name] = t;
  }
  std::fclose(f);
  return c;
}

}  // namespace ferry::dlrm_tool
