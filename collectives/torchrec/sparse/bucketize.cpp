#include <ferry/collectives/torchrec/sparse/bucketize.h>

#include <ferry/collectives/torchrec/sparse/jagged_kernels.h>
#include <ferry/runtime/error.h>

#include <cstring>
#include <numeric>

namespace ferry::torchrec {

using detail::list_str;

namespace {
constexpr const char* kBucketize = "bucketize_kjt_before_all2all";

void check_bucketize_arguments(
    int64_t N, int64_t K, const std::vector<int64_t>& block_sizes,
    const std::optional<std::vector<std::vector<int64_t>>>& block_bucketize_row_pos) {
  FERRY_CHECK(N >= 1, InvalidArgument, kBucketize, ": num_buckets ", N, " must be >= 1");
  FERRY_CHECK(static_cast<int64_t>(block_sizes.size()) == K, InvalidArgument, kBucketize,
              ": block_sizes ", list_str(block_sizes), " has ", block_sizes.size(),
              " entries for ", K, " keys");
  for (int64_t bs : block_sizes)
    FERRY_CHECK(bs >= 1, InvalidArgument, kBucketize, ": block_sizes ", list_str(block_sizes),
                " must be positive");
  if (block_bucketize_row_pos) {
    FERRY_CHECK(static_cast<int64_t>(block_bucketize_row_pos->size()) == K, InvalidArgument,
                kBucketize, ": block_bucketize_row_pos has ", block_bucketize_row_pos->size(),
                " lists for ", K, " keys");
    for (const std::vector<int64_t>& pos : *block_bucketize_row_pos) {
      bool ok = static_cast<int64_t>(pos.size()) == N + 1 && pos[0] == 0;
      for (size_t i = 1; ok && i < pos.size(); ++i) ok = pos[i] >= pos[i - 1];
      FERRY_CHECK(ok, InvalidArgument, kBucketize, ": block_bucketize_row_pos entry ",
                  list_str(pos), " must be ", N + 1, " non-decreasing row offsets from 0");
    }
  }
}

// Every value's bucket, the id stored for it and its position inside its bag; the bucketized
// bag sizes, index p * L + e (bucket p, bag e of the L input bags).
struct ValueBuckets {
  std::vector<int64_t> bucket, new_id, in_bag_pos;
  std::vector<int64_t> out_lengths;
};

ValueBuckets assign_buckets(
    const KeyedJaggedTensor& kjt, int64_t N, const std::vector<int64_t>& block_sizes,
    const std::vector<int64_t>& lengths,
    const std::optional<std::vector<std::vector<int64_t>>>& block_bucketize_row_pos,
    bool keep_original_indices) {
  const int64_t K = kjt.num_keys();
  const int64_t L = static_cast<int64_t>(lengths.size());
  const std::vector<int64_t>& spk = kjt.stride_per_key();
  const int64_t nv = kjt.values().numel();
  const int64_t* v = nv ? kjt.values().data<int64_t>() : nullptr;
  ValueBuckets out{std::vector<int64_t>(static_cast<size_t>(nv)),
                   std::vector<int64_t>(static_cast<size_t>(nv)),
                   std::vector<int64_t>(static_cast<size_t>(nv)),
                   std::vector<int64_t>(static_cast<size_t>(N * L), 0)};
  int64_t i = 0, e = 0;
  for (int64_t t = 0; t < K; ++t) {
    const int64_t bs = block_sizes[t];
    for (int64_t b = 0; b < spk[t]; ++b, ++e) {
      for (int64_t j = 0; j < lengths[e]; ++j, ++i) {
        const int64_t id = v[i];
        FERRY_CHECK(id >= 0, InvalidArgument, kBucketize, ": key ", kjt.keys()[t],
                    " has the negative id ", id);
        int64_t p, stored;
        if (block_bucketize_row_pos) {
          const std::vector<int64_t>& pos = (*block_bucketize_row_pos)[t];
          FERRY_CHECK(id < pos.back(), InvalidArgument, kBucketize, ": key ", kjt.keys()[t],
                      " has the id ", id, " outside its ", pos.back(),
                      " rows (block_bucketize_row_pos ", list_str(pos), ")");
          p = 0;
          while (p + 1 < N && pos[p + 1] <= id) ++p;  // last bucket whose start <= id
          stored = id - pos[p];
        } else {
          p = id < bs * N ? id / bs : id % N;
          stored = id % bs;
        }
        out.bucket[i] = p;
        out.new_id[i] = keep_original_indices ? id : stored;
        out.in_bag_pos[i] = j;
        ++out.out_lengths[p * L + e];
      }
    }
  }
  return out;
}

// Places every value after the earlier ones of its bucketized bag: the bucketized values, and
// `where[i]`, the position original value i went to.
Tensor place_values(const ValueBuckets& vb, const std::vector<int64_t>& lengths,
                    std::vector<int64_t>& where) {
  const int64_t L = static_cast<int64_t>(lengths.size());
  const int64_t nv = static_cast<int64_t>(vb.bucket.size());
  std::vector<int64_t> fill(vb.out_lengths.size(), 0);
  int64_t acc = 0;
  for (size_t q = 0; q < fill.size(); ++q) {
    fill[q] = acc;
    acc += vb.out_lengths[q];
  }
  Tensor out_values = empty({nv}, DType::Int64);
  int64_t* ov = nv ? out_values.data<int64_t>() : nullptr;
  where.assign(static_cast<size_t>(nv), 0);
  int64_t i = 0;
  for (int64_t e = 0; e < L; ++e)
    for (int64_t j = 0; j < lengths[e]; ++j, ++i) {
      const int64_t dst = fill[vb.bucket[i] * L + e]++;
      ov[dst] = vb.new_id[i];
      where[i] = dst;
    }
  return out_values;
}

// The weights in bucketized order: each id's position in its original bag with bucketize_pos,
// else the input's weights moved with their values (undefined for an unweighted input).
Tensor bucketized_weights(const KeyedJaggedTensor& kjt, const ValueBuckets& vb,
                          const std::vector<int64_t>& where, bool bucketize_pos) {
  const int64_t nv = static_cast<int64_t>(where.size());
  Tensor out_weights;
  if (bucketize_pos) {
    out_weights = empty({nv}, DType::Float32);
    float* w = nv ? out_weights.data<float>() : nullptr;
    for (int64_t i = 0; i < nv; ++i) w[where[i]] = static_cast<float>(vb.in_bag_pos[i]);
  } else if (kjt.has_weights()) {
    const Tensor& win = kjt.weights();
    out_weights = empty({nv}, win.dtype());
    if (nv) {
      const size_t es = win.element_size();
      const char* src = static_cast<const char*>(win.raw_data());
      char* dst = static_cast<char*>(out_weights.raw_data());
      for (int64_t i = 0; i < nv; ++i) std::memcpy(dst + where[i] * es, src + i * es, es);
    }
  }
  return out_weights;
}

// The result: the input's keys and strides repeated for every bucket, bucket-major.
KeyedJaggedTensor bucketized_kjt(const KeyedJaggedTensor& kjt, int64_t N, Tensor values,
                                 Tensor weights, const std::vector<int64_t>& out_lengths) {
  KjtInit init;
  for (int64_t p = 0; p < N; ++p)
    for (const std::string& k : kjt.keys()) init.keys.push_back(k);
  init.values = std::move(values);
  init.weights = std::move(weights);
  init.lengths = detail::index_tensor(out_lengths, kjt.lengths().dtype(), kBucketize);
  init.allow_duplicate_keys = true;
  if (kjt.variable_stride_per_key()) {
    std::vector<std::vector<int64_t>> sr;
    for (int64_t p = 0; p < N; ++p)
      for (const auto& r : kjt.stride_per_key_per_rank()) sr.push_back(r);
    init.stride_per_key_per_rank = std::move(sr);
  } else {
    init.stride = kjt.stride();
  }
  return KeyedJaggedTensor::from_init(std::move(init), kBucketize);
}
}  // namespace

BucketizedKjt bucketize_kjt_before_all2all(
    const KeyedJaggedTensor& kjt, int64_t num_buckets, const std::vector<int64_t>& block_sizes,
    bool output_permute, bool bucketize_pos,
    const std::optional<std::vector<std::vector<int64_t>>>& block_bucketize_row_pos,
    bool keep_original_indices) {
  check_bucketize_arguments(num_buckets, kjt.num_keys(), block_sizes, block_bucketize_row_pos);
  const std::vector<int64_t> lengths = detail::index_vector(kjt.lengths());
  const ValueBuckets vb = assign_buckets(kjt, num_buckets, block_sizes, lengths,
                                         block_bucketize_row_pos, keep_original_indices);
  std::vector<int64_t> where;
  Tensor values = place_values(vb, lengths, where);
  Tensor weights = bucketized_weights(kjt, vb, where, bucketize_pos);
  BucketizedKjt out{bucketized_kjt(kjt, num_buckets, std::move(values), std::move(weights),
                                   vb.out_lengths),
                    std::nullopt};
  if (output_permute) out.unbucketize_permute = from_vector(where);
  return out;
}

BucketizedKjt bucketize_kjt_before_all2all(
    const KeyedJaggedTensor& kjt, int64_t num_buckets, const Tensor& block_sizes,
    bool output_permute, bool bucketize_pos,
    const std::optional<std::vector<std::vector<int64_t>>>& block_bucketize_row_pos,
    bool keep_original_indices) {
  detail::check_index_tensor(block_sizes, kBucketize, "block_sizes");
  return bucketize_kjt_before_all2all(kjt, num_buckets, detail::index_vector(block_sizes),
                                      output_permute, bucketize_pos, block_bucketize_row_pos,
                                      keep_original_indices);
}

// ---- column permutation ----

namespace {
constexpr const char* kPermute = "permute_pooled_embs";

void check_permutation(const std::vector<int64_t>& dims, const std::vector<int64_t>& permute) {
  FERRY_CHECK(dims.size() == permute.size(), InvalidArgument, kPermute, ": permute ",
              list_str(permute), " has ", permute.size(), " entries for ", dims.size(), " blocks");
  std::vector<bool> seen(dims.size(), false);
  for (int64_t p : permute) {
    FERRY_CHECK(p >= 0 && p < static_cast<int64_t>(dims.size()) && !seen[p], InvalidArgument,
                kPermute, ": permute ", list_str(permute), " is not a permutation of 0..",
                static_cast<int64_t>(dims.size()) - 1);
    seen[p] = true;
  }
  for (int64_t d : dims)
    FERRY_CHECK(d >= 0, InvalidArgument, kPermute, ": dims ", list_str(dims), " has a negative width");
}

// Where each block of the output comes from: output block i is input block permute[i].
std::vector<detail::ColumnBlock> permutation_blocks(const std::vector<int64_t>& dims,
                                                    const std::vector<int64_t>& permute) {
  std::vector<int64_t> start(dims.size() + 1, 0);
  for (size_t i = 0; i < dims.size(); ++i) start[i + 1] = start[i] + dims[i];
  std::vector<detail::ColumnBlock> blocks;
  blocks.reserve(permute.size());
  int64_t col = 0;
  for (int64_t src : permute) {
    blocks.push_back({.src_col = start[static_cast<size_t>(src)], .dst_col = col,
                      .width = dims[static_cast<size_t>(src)]});
    col += dims[static_cast<size_t>(src)];
  }
  return blocks;
}

// embs [B, width] with its column blocks moved by `blocks`.
Tensor move_blocks(const Tensor& embs, int64_t width, const std::vector<int64_t>& dims,
                   const std::vector<detail::ColumnBlock>& blocks) {
  FERRY_CHECK(embs.defined() && embs.dim() == 2, InvalidArgument, kPermute,
              ": embs must be a 2-D tensor [batch, sum(dims)]");
  FERRY_CHECK(embs.size(1) == width, InvalidArgument, kPermute, ": embs has ", embs.size(1),
              " columns, dims ", list_str(dims), " sum to ", width);
  Tensor out = empty(embs.shape(), embs.dtype());
  detail::copy_column_blocks(embs, out, blocks);
  return out;
}
}  // namespace

Tensor permute_pooled_embs(const Tensor& embs, const std::vector<int64_t>& dims,
                           const std::vector<int64_t>& permute) {
  check_permutation(dims, permute);
  return move_blocks(embs, detail::sum_of(dims), dims, permutation_blocks(dims, permute));
}

PermutePooledEmbeddingsSplit::PermutePooledEmbeddingsSplit(std::vector<int64_t> embs_dims,
                                                           std::vector<int64_t> permute)
    : dims_(std::move(embs_dims)), permute_(std::move(permute)) {
  check_permutation(dims_, permute_);
  width_ = detail::sum_of(dims_);
  forward_ = permutation_blocks(dims_, permute_);
  // The inverse moves every block back where it came from.
  for (const detail::ColumnBlock& b : forward_) {
    inverse_.push_back({.src_col = b.dst_col, .dst_col = b.src_col, .width = b.width});
  }
}

Tensor PermutePooledEmbeddingsSplit::move(const Tensor& embs,
                                          const std::vector<detail::ColumnBlock>& blocks) const {
  return move_blocks(embs, width_, dims_, blocks);
}

Tensor PermutePooledEmbeddingsSplit::operator()(const Tensor& embs) const {
  return move(embs, forward_);
}

Tensor PermutePooledEmbeddingsSplit::inverse(const Tensor& permuted) const {
  return move(permuted, inverse_);
}

}  // namespace ferry::torchrec
