#include <ferry/collectives/torchrec/sparse/jagged_kernels.h>

#include <ferry/collectives/torchrec/utils/isa_clones.h>
#include <ferry/runtime/error.h>

#include <cstring>
#include <limits>

namespace ferry::torchrec::detail {

void check_index_tensor(const Tensor& t, const char* where, const char* what) {
  FERRY_CHECK(t.defined(), InvalidArgument, where, ": ", what, " is undefined");
  FERRY_CHECK(t.dtype() == DType::Int32 || t.dtype() == DType::Int64, InvalidArgument, where, ": ",
              what, " must be int32 or int64, got ", dtype_name(t.dtype()));
  FERRY_CHECK(t.dim() == 1, InvalidArgument, where, ": ", what, " must be 1-D, got shape ",
              shape_str(t.shape()));
}

std::vector<int64_t> index_vector(const Tensor& t) {
  std::vector<int64_t> out;
  index_vector_into(t, out);
  return out;
}

void index_vector_into(const Tensor& t, std::vector<int64_t>& out) {
  out.resize(static_cast<size_t>(t.numel()));
  if (t.dtype() == DType::Int64) {
    if (!out.empty()) std::memcpy(out.data(), t.data<int64_t>(), out.size() * sizeof(int64_t));
  } else {
    const int32_t* p = t.data<int32_t>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = p[i];
  }
}

namespace {
// A sum and an OR of the sign bits, no branch and no min (x86-64's baseline SSE2 has no 64-bit
// min, and a min kept the int64 loop scalar): the compiler vectorises both for either dtype (the
// index of a negative entry is looked up only for an error message).
template <typename T>
FERRY_ISA_INLINE LengthsSum sum_range(const T* p, int64_t n) {
  int64_t sum = 0;
  T bits = 0;
  for (int64_t i = 0; i < n; ++i) {
    sum += p[i];
    bits |= p[i];
  }
  return {sum, bits < 0};
}

// One clone per ISA level (isa_clones.h): the KJT all-to-all checks every length it receives, and
// baseline SSE2 adds two int64 at a time (a tenth of its phase 2 at 16K lengths).
FERRY_ISA_CLONES LengthsSum sum_int32_lengths(const int32_t* p, int64_t n) {
  return sum_range(p, n);
}
FERRY_ISA_CLONES LengthsSum sum_int64_lengths(const int64_t* p, int64_t n) {
  return sum_range(p, n);
}
}  // namespace

LengthsSum sum_lengths(const Tensor& lengths, int64_t begin, int64_t end) {
  if (lengths.dtype() == DType::Int32)
    return sum_int32_lengths(lengths.data<int32_t>() + begin, end - begin);
  return sum_int64_lengths(lengths.data<int64_t>() + begin, end - begin);
}

Tensor index_tensor(const std::vector<int64_t>& v, DType dtype, const char* where) {
  Tensor t = empty({static_cast<int64_t>(v.size())}, dtype);
  if (dtype == DType::Int64) {
    if (!v.empty()) std::memcpy(t.data<int64_t>(), v.data(), v.size() * sizeof(int64_t));
    return t;
  }
  FERRY_CHECK(dtype == DType::Int32, InvalidArgument, where, ": index dtype must be int32 or int64");
  int32_t* p = t.data<int32_t>();
  for (size_t i = 0; i < v.size(); ++i) {
    FERRY_CHECK(v[i] >= std::numeric_limits<int32_t>::min() &&
                    v[i] <= std::numeric_limits<int32_t>::max(),
                InvalidArgument, where, ": value ", v[i], " at ", i,
                " does not fit the int32 index dtype (use int64 lengths)");
    p[i] = static_cast<int32_t>(v[i]);
  }
  return t;
}

Tensor offsets_from_lengths(const Tensor& lengths, const char* where) {
  // Scratch of this thread's, refilled by every call: a batch's KJT asks once per step.
  thread_local std::vector<int64_t> l, o;
  index_vector_into(lengths, l);
  o.assign(l.size() + 1, 0);
  for (size_t i = 0; i < l.size(); ++i) o[i + 1] = o[i] + l[i];
  return index_tensor(o, lengths.dtype(), where);
}

Tensor lengths_from_offsets(const Tensor& offsets) {
  thread_local std::vector<int64_t> o, l;  // scratch, refilled by every call
  index_vector_into(offsets, o);
  l.assign(o.empty() ? 0 : o.size() - 1, 0);
  for (size_t i = 0; i < l.size(); ++i) l[i] = o[i + 1] - o[i];
  return index_tensor(l, offsets.dtype(), "lengths_from_offsets");
}

JaggedParts permute_segments(const JaggedParts& in, const std::vector<int64_t>& segment_sizes,
                             const std::vector<int64_t>& order, const char* where) {
  // Scratch of this thread's, reused from call to call (an input dist permutes every batch).
  thread_local std::vector<int64_t> lengths, lstart, vstart;
  index_vector_into(in.lengths, lengths);
  const size_t nseg = segment_sizes.size();
  // Segment i: length entries [lstart[i], lstart[i+1]), value rows [vstart[i], vstart[i+1]).
  lstart.assign(nseg + 1, 0);
  vstart.assign(nseg + 1, 0);
  {
    int64_t pos = 0, rows = 0;
    for (size_t i = 0; i < nseg; ++i) {
      FERRY_CHECK(segment_sizes[i] >= 0, InvalidArgument, where, ": segment ", i, " has size ",
                  segment_sizes[i]);
      lstart[i] = pos;
      vstart[i] = rows;
      const int64_t end = pos + segment_sizes[i];
      FERRY_CHECK(end <= static_cast<int64_t>(lengths.size()), InvalidArgument, where,
                  ": segment sizes ", list_str(segment_sizes), " need more than the ",
                  lengths.size(), " length entries given");
      for (int64_t j = pos; j < end; ++j) rows += lengths[static_cast<size_t>(j)];
      pos = end;
    }
    lstart[nseg] = pos;
    vstart[nseg] = rows;
    FERRY_CHECK(pos == static_cast<int64_t>(lengths.size()), InvalidArgument, where,
                ": segment sizes ", list_str(segment_sizes), " cover ", pos, " length entries, ",
                "but there are ", lengths.size());
    FERRY_CHECK(rows == in.values.size(0), InvalidArgument, where, ": lengths sum to ", rows,
                " but values has ", in.values.size(0), " rows");
  }
  int64_t out_len = 0, out_rows = 0;
  for (size_t q = 0; q < order.size(); ++q) {
    const int64_t i = order[q];
    FERRY_CHECK(i >= 0 && i < static_cast<int64_t>(nseg), InvalidArgument, where, ": index ", i,
                " at position ", q, " is out of range for ", nseg, " segments");
    out_len += lstart[i + 1] - lstart[i];
    out_rows += vstart[i + 1] - vstart[i];
  }
  JaggedParts out;
  auto move_rows = [&](const Tensor& src) {
    Tensor dst = empty(with_rows(src.shape(), out_rows), src.dtype());
    const size_t rb = row_bytes(src);
    const auto* s = static_cast<const unsigned char*>(src.raw_data());
    auto* d = static_cast<unsigned char*>(dst.raw_data());
    for (int64_t i : order) {
      const size_t n = static_cast<size_t>(vstart[i + 1] - vstart[i]) * rb;
      if (n) std::memcpy(d, s + static_cast<size_t>(vstart[i]) * rb, n);
      d += n;
    }
    return dst;
  };
  // The lengths move segment by segment in their own dtype, as the values' rows do.
  out.lengths = empty({out_len}, in.lengths.dtype());
  {
    const size_t eb = in.lengths.element_size();
    const auto* s = static_cast<const unsigned char*>(in.lengths.raw_data());
    auto* d = static_cast<unsigned char*>(out.lengths.raw_data());
    for (int64_t i : order) {
      const size_t n = static_cast<size_t>(lstart[i + 1] - lstart[i]) * eb;
      if (n) std::memcpy(d, s + static_cast<size_t>(lstart[i]) * eb, n);
      d += n;
    }
  }
  out.values = move_rows(in.values);
  if (in.weights.defined()) out.weights = move_rows(in.weights);
  return out;
}

void copy_slab(const Tensor& src, int64_t dim, int64_t start, int64_t length, Tensor& dst,
               int64_t dst_start) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= src.size(d);
  for (int64_t d = dim + 1; d < src.dim(); ++d) inner *= src.size(d);
  const size_t es = src.element_size();
  const size_t src_row = static_cast<size_t>(src.size(dim) * inner) * es;
  const size_t dst_row = static_cast<size_t>(dst.size(dim) * inner) * es;
  const size_t n = static_cast<size_t>(length * inner) * es;
  if (n == 0) return;
  const auto* s = static_cast<const unsigned char*>(src.raw_data()) + static_cast<size_t>(start * inner) * es;
  auto* d = static_cast<unsigned char*>(dst.raw_data()) + static_cast<size_t>(dst_start * inner) * es;
  // Pooled embeddings' blocks are often one short row (16 floats): a copy of a length known at
  // compile time is a few register moves where a call to memcpy per row costs more than the copy.
  auto rows = [&]<size_t kBytes>() {
    for (int64_t o = 0; o < outer; ++o) std::memcpy(d + o * dst_row, s + o * src_row, kBytes);
  };
  switch (n) {
    case 32: rows.template operator()<32>(); return;
    case 64: rows.template operator()<64>(); return;
    case 128: rows.template operator()<128>(); return;
    case 256: rows.template operator()<256>(); return;
    default:
      for (int64_t o = 0; o < outer; ++o) std::memcpy(d + o * dst_row, s + o * src_row, n);
  }
}

void copy_column_blocks(const Tensor& src, Tensor& dst, const std::vector<ColumnBlock>& blocks) {
  const int64_t rows = src.size(0);
  const size_t es = src.element_size();
  const size_t src_row = static_cast<size_t>(src.size(1)) * es;
  const size_t dst_row = static_cast<size_t>(dst.size(1)) * es;
  const auto* s = static_cast<const unsigned char*>(src.raw_data());
  auto* d = static_cast<unsigned char*>(dst.raw_data());
  // When every block has the same byte width, the copies are of a length known at compile time
  // for the usual widths (a pooled embedding of 8, 16, 32 or 64 floats): a few register moves
  // where a call to memcpy per block costs more than the copy.
  bool uniform = !blocks.empty();
  for (const ColumnBlock& b : blocks) uniform = uniform && b.width == blocks.front().width;
  const size_t uniform_bytes = uniform ? static_cast<size_t>(blocks.front().width) * es : 0;
  auto copy_rows = [&]<size_t kBytes>() {
    for (int64_t r = 0; r < rows; ++r) {
      const unsigned char* sr = s + static_cast<size_t>(r) * src_row;
      unsigned char* dr = d + static_cast<size_t>(r) * dst_row;
      for (const ColumnBlock& b : blocks) {
        const size_t n = kBytes != 0 ? kBytes : static_cast<size_t>(b.width) * es;
        std::memcpy(dr + static_cast<size_t>(b.dst_col) * es, sr + static_cast<size_t>(b.src_col) * es, n);
      }
    }
  };
  switch (uniform_bytes) {
    case 32: copy_rows.template operator()<32>(); return;
    case 64: copy_rows.template operator()<64>(); return;
    case 128: copy_rows.template operator()<128>(); return;
    case 256: copy_rows.template operator()<256>(); return;
    default: copy_rows.template operator()<0>();
  }
}

}  // namespace ferry::torchrec::detail
