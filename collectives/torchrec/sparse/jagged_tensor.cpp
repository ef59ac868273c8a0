#include <ferry/collectives/torchrec/sparse/jagged_tensor.h>

#include <ferry/collectives/torchrec/sparse/jagged_kernels.h>
#include <ferry/runtime/error.h>

#include <algorithm>
#include <cstring>

namespace ferry::torchrec {

namespace {

constexpr const char* kWhere = "JaggedTensor";

void check_weights(const Tensor& weights, int64_t num_values, const char* where) {
  if (!weights.defined()) return;
  FERRY_CHECK(weights.dtype() == DType::Float32 || weights.dtype() == DType::Float64,
              InvalidArgument, where, ": weights must be float32 or float64, got ",
              dtype_name(weights.dtype()));
  FERRY_CHECK(weights.dim() == 1, InvalidArgument, where, ": weights must be 1-D, got shape ",
              shape_str(weights.shape()));
  FERRY_CHECK(weights.numel() == num_values, InvalidArgument, where, ": weights has ",
              weights.numel(), " elements but there are ", num_values, " values");
}

}  // namespace

JaggedTensor::JaggedTensor()
    : values_(ferry::empty({0}, DType::Int64)),
      lengths_(ferry::empty({0}, DType::Int64)),
      offsets_(ferry::zeros({1}, DType::Int64)) {}

JaggedTensor::JaggedTensor(Tensor values, Tensor lengths, Tensor offsets, Tensor weights)
    : values_(std::move(values)),
      lengths_(std::move(lengths)),
      offsets_(std::move(offsets)),
      weights_(std::move(weights)) {
  FERRY_CHECK(values_.defined(), InvalidArgument, kWhere, ": values is undefined");
  FERRY_CHECK(values_.dim() >= 1, InvalidArgument, kWhere,
              ": values must have at least one dim (the jagged dim 0), got shape ",
              shape_str(values_.shape()));
  FERRY_CHECK(lengths_.defined() || offsets_.defined(), InvalidArgument, kWhere,
              ": give lengths or offsets (both are undefined)");
  const int64_t n = values_.size(0);
  if (lengths_.defined()) {
    detail::check_index_tensor(lengths_, kWhere, "lengths");
    const std::vector<int64_t> l = detail::index_vector(lengths_);
    int64_t sum = 0;
    for (size_t i = 0; i < l.size(); ++i) {
      FERRY_CHECK(l[i] >= 0, InvalidArgument, kWhere, ": lengths[", i, "] = ", l[i],
                  " is negative (lengths ", detail::list_str(l), ")");
      sum += l[i];
    }
    FERRY_CHECK(sum == n, InvalidArgument, kWhere, ": lengths ", detail::list_str(l), " sum to ",
                sum, " but values has ", n, " rows");
  }
  if (offsets_.defined()) {
    detail::check_index_tensor(offsets_, kWhere, "offsets");
    const std::vector<int64_t> o = detail::index_vector(offsets_);
    FERRY_CHECK(!o.empty() && o[0] == 0, InvalidArgument, kWhere,
                ": offsets must start with 0, got ", detail::list_str(o));
    for (size_t i = 1; i < o.size(); ++i)
      FERRY_CHECK(o[i] >= o[i - 1], InvalidArgument, kWhere, ": offsets decrease at ", i, " (",
                  o[i - 1], " -> ", o[i], ") in ", detail::list_str(o));
    FERRY_CHECK(o.back() == n, InvalidArgument, kWhere, ": offsets end at ", o.back(),
                " but values has ", n, " rows");
    if (lengths_.defined()) {
      const std::vector<int64_t> l = detail::index_vector(lengths_);
      FERRY_CHECK(l.size() + 1 == o.size(), InvalidArgument, kWhere, ": ", l.size(),
                  " lengths need ", l.size() + 1, " offsets, got ", o.size());
      for (size_t i = 0; i < l.size(); ++i)
        FERRY_CHECK(o[i + 1] - o[i] == l[i], InvalidArgument, kWhere, ": lengths[", i, "] = ",
                    l[i], " disagrees with offsets ", o[i], " -> ", o[i + 1]);
    }
  }
  check_weights(weights_, n, kWhere);
  if (!lengths_.defined()) lengths_ = detail::lengths_from_offsets(offsets_);
  if (!offsets_.defined()) offsets_ = detail::offsets_from_lengths(lengths_, kWhere);
}

JaggedTensor JaggedTensor::from_lengths(Tensor values, Tensor lengths, Tensor weights) {
  FERRY_CHECK(lengths.defined(), InvalidArgument, "JaggedTensor::from_lengths: lengths is undefined");
  return JaggedTensor(std::move(values), std::move(lengths), Tensor(), std::move(weights));
}

JaggedTensor JaggedTensor::from_offsets(Tensor values, Tensor offsets, Tensor weights) {
  FERRY_CHECK(offsets.defined(), InvalidArgument, "JaggedTensor::from_offsets: offsets is undefined");
  return JaggedTensor(std::move(values), Tensor(), std::move(offsets), std::move(weights));
}

JaggedTensor JaggedTensor::from_dense(const std::vector<Tensor>& rows,
                                      const std::vector<Tensor>& weights) {
  constexpr const char* where = "JaggedTensor::from_dense";
  FERRY_CHECK(weights.empty() || weights.size() == rows.size(), InvalidArgument, where, ": ",
              weights.size(), " weight tensors for ", rows.size(), " rows");
  std::vector<int64_t> lengths;
  for (size_t i = 0; i < rows.size(); ++i) {
    FERRY_CHECK(rows[i].defined() && rows[i].dim() >= 1, InvalidArgument, where, ": row ", i,
                " must be a tensor of at least one dim");
    lengths.push_back(rows[i].size(0));
    if (!weights.empty())
      FERRY_CHECK(weights[i].defined() && weights[i].numel() == rows[i].size(0), InvalidArgument,
                  where, ": row ", i, " has ", rows[i].size(0), " values but its weights have ",
                  weights[i].defined() ? weights[i].numel() : 0, " elements");
  }
  Tensor values = rows.empty() ? ferry::empty({0}, DType::Int64) : cat(rows, 0);
  Tensor w;
  if (!weights.empty()) {
    std::vector<Tensor> flat;
    for (const Tensor& t : weights) flat.push_back(t.flatten());
    w = cat(flat, 0);
  }
  return from_lengths(values, detail::index_tensor(lengths, DType::Int64, where), w);
}

JaggedTensor JaggedTensor::empty(bool weighted, DType values_dtype, DType weights_dtype,
                                 DType lengths_dtype) {
  Tensor w = weighted ? ferry::empty({0}, weights_dtype) : Tensor();
  return JaggedTensor(ferry::empty({0}, values_dtype), ferry::empty({0}, lengths_dtype), Tensor(), w);
}

const Tensor& JaggedTensor::weights() const {
  FERRY_CHECK(weights_.defined(), InvalidArgument, "JaggedTensor::weights: this JaggedTensor has no weights");
  return weights_;
}

Tensor JaggedTensor::row(int64_t i) const {
  FERRY_CHECK(i >= 0 && i < num_rows(), InvalidArgument, "JaggedTensor::row: index ", i,
              " is out of range for ", num_rows(), " rows");
  const int64_t start = static_cast<int64_t>(offsets_.get_flat(i));
  const int64_t end = static_cast<int64_t>(offsets_.get_flat(i + 1));
  return values_.narrow(0, start, end - start);
}

std::vector<Tensor> JaggedTensor::to_dense() const {
  const std::vector<int64_t> o = detail::index_vector(offsets_);
  std::vector<Tensor> out;
  for (size_t i = 0; i + 1 < o.size(); ++i) out.push_back(values_.narrow(0, o[i], o[i + 1] - o[i]));
  return out;
}

std::vector<Tensor> JaggedTensor::to_dense_weights() const {
  const Tensor& w = weights();
  const std::vector<int64_t> o = detail::index_vector(offsets_);
  std::vector<Tensor> out;
  for (size_t i = 0; i + 1 < o.size(); ++i) out.push_back(w.narrow(0, o[i], o[i + 1] - o[i]));
  return out;
}

namespace {

Tensor padded(const Tensor& data, const std::vector<int64_t>& o, std::optional<int64_t> desired,
              double padding_value, const char* where) {
  FERRY_CHECK(data.dim() == 1, InvalidArgument, where, ": needs 1-D values, got shape ",
              shape_str(data.shape()));
  const int64_t rows = static_cast<int64_t>(o.size()) - 1;
  int64_t width = 0;
  if (desired) {
    FERRY_CHECK(*desired >= 0, InvalidArgument, where, ": desired_length ", *desired, " is negative");
    width = *desired;
  } else {
    for (int64_t i = 0; i < rows; ++i) width = std::max(width, o[i + 1] - o[i]);
  }
  Tensor out = full({rows, width}, padding_value, data.dtype());
  const size_t es = data.element_size();
  const auto* s = static_cast<const unsigned char*>(data.raw_data());
  auto* d = static_cast<unsigned char*>(out.raw_data());
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t n = std::min(o[i + 1] - o[i], width);
    if (n > 0) std::memcpy(d + static_cast<size_t>(i * width) * es, s + static_cast<size_t>(o[i]) * es,
                           static_cast<size_t>(n) * es);
  }
  return out;
}

}  // namespace

Tensor JaggedTensor::to_padded_dense(std::optional<int64_t> desired_length, double padding_value) const {
  return padded(values_, detail::index_vector(offsets_), desired_length, padding_value,
                "JaggedTensor::to_padded_dense");
}

Tensor JaggedTensor::to_padded_dense_weights(std::optional<int64_t> desired_length,
                                             double padding_value) const {
  return padded(weights(), detail::index_vector(offsets_), desired_length, padding_value,
                "JaggedTensor::to_padded_dense_weights");
}

}  // namespace ferry::torchrec
