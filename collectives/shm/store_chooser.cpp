#include <ferry/collectives/shm/store_chooser.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <string>

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

namespace {

// "32768K" -> 33554432; 0 for anything else.
size_t parse_cache_size(const std::string& text) {
  size_t value = 0, i = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i)
    value = value * 10 + static_cast<size_t>(text[i] - '0');
  if (i == 0) return 0;
  if (i == text.size()) return value;
  switch (text[i]) {
    case 'K': return value << 10;
    case 'M': return value << 20;
    case 'G': return value << 30;
    default: return 0;
  }
}

size_t read_last_level_cache_bytes() {
  size_t bytes = 0;
  int best_level = 0;
  for (int index = 0; index < 16; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index);
    std::ifstream level_file(dir + "/level"), type_file(dir + "/type"), size_file(dir + "/size");
    int level = 0;
    std::string type, size;
    if (!(level_file >> level) || !(type_file >> type) || !(size_file >> size)) break;
    if (type == "Instruction" || level < best_level) continue;
    best_level = level;
    bytes = parse_cache_size(size);
  }
  return bytes;
}

std::atomic<size_t>& cache_bytes() {
  static std::atomic<size_t> bytes{read_last_level_cache_bytes()};
  return bytes;
}

}  // namespace

size_t last_level_cache_bytes() { return cache_bytes().load(std::memory_order_relaxed); }

size_t set_last_level_cache_bytes_for_testing(size_t bytes) { return cache_bytes().exchange(bytes); }

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
