#include <ferry/collectives/shm/store_chooser.h>

#include <algorithm>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace ferry::detail::shm {

void stream_copy(void* to, const void* from, size_t bytes) {
  stream_copy_unfenced(to, from, bytes);
  stream_fence();
}

void stream_fence() {
#if defined(__SSE2__)
  // Streaming stores are not ordered with later stores: without the fence a peer could see
  // the op's done flag before the data.
  _mm_sfence();
#endif
}

void stream_copy_unfenced(void* to, const void* from, size_t bytes) {
#if defined(__SSE2__)
  auto* d = static_cast<unsigned char*>(to);
  const auto* s = static_cast<const unsigned char*>(from);
  // Up to the first 16-byte boundary of the destination with an ordinary copy (the streaming
  // store needs it aligned), then 64 bytes (a line) per step, then the tail.
  const size_t head = std::min(bytes, (16 - reinterpret_cast<uintptr_t>(d) % 16) % 16);
  std::memcpy(d, s, head);
  d += head;
  s += head;
  bytes -= head;
  for (; bytes >= 64; bytes -= 64, d += 64, s += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 48), e);
  }
  std::memcpy(d, s, bytes);
#else
  std::memcpy(to, from, bytes);
#endif
}

bool StoreChooser::next_streaming() {
  const uint32_t op = ops_++;
  // Each kind until it has a cost first; then the kind in use, and the other for the last
  // kTryRun ops of every kTryEvery.
  if (recorded_[0] == 0) return false;
  if (recorded_[1] == 0) return true;
  if (cost(!streaming_) < kSwitchBelow * cost(streaming_)) streaming_ = !streaming_;
  return op % kTryEvery >= kTryEvery - kTryRun ? !streaming_ : streaming_;
}

void StoreChooser::record(bool streaming, uint64_t ns, size_t bytes) {
  if (bytes == 0) return;
  const bool after_same_kind = ran_ && ran_streaming_ == streaming;
  ran_ = true;
  ran_streaming_ = streaming;
  if (!after_same_kind) return;
  const int k = streaming ? 1 : 0;
  samples_[k][recorded_[k]++ % kSamples] = static_cast<double>(ns) / static_cast<double>(bytes);
}

double StoreChooser::cost(bool streaming) const {
  const int k = streaming ? 1 : 0;
  if (recorded_[k] == 0) return 0;
  const double* last = samples_[k];
  return *std::min_element(last, last + std::min<uint32_t>(recorded_[k], kSamples));
}

}  // namespace ferry::detail::shm
