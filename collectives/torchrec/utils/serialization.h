// The byte form of the values invoke_on_rank_and_broadcast_result (collective_utils.h) sends
// from one rank to the others: ferry's stand-in for the pickling of broadcast_object_list.
//
// Serializable<T> holds for
//   - trivially copyable types other than pointers (their bytes as they are in memory: the
//     ranks of a job must share one architecture and build, as MPI's MPI_BYTE assumes),
//   - std::string,
//   - std::vector<E> of a Serializable E (a length, then the elements),
//   - user types with a member `void serialize(ByteWriter&) const` and a static
//     `T deserialize(ByteReader&)`; these win over the trivially-copyable rule, so a struct can
//     choose its own form. Compose them with put() / get() of their fields.
//
// A reader that runs out of bytes, or a value whose bytes are not all consumed, raises
// MismatchError: the ranks disagreed about the type, or a deserialize does not read what its
// serialize wrote.
#pragma once

#include <ferry/runtime/error.h>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace ferry::torchrec {

class ByteWriter;
class ByteReader;

// A type that says how it is written and read.
template <class T>
concept UserSerializable = requires(const T& value, ByteWriter& out, ByteReader& in) {
  { value.serialize(out) } -> std::same_as<void>;
  { T::deserialize(in) } -> std::same_as<T>;
};

template <class T>
struct IsSerializable
    : std::bool_constant<UserSerializable<T> ||
                         (std::is_trivially_copyable_v<T> && !std::is_pointer_v<T> &&
                          !std::is_member_pointer_v<T> && !std::is_null_pointer_v<T>)> {};
template <>
struct IsSerializable<std::string> : std::true_type {};
template <class E, class A>
struct IsSerializable<std::vector<E, A>> : IsSerializable<E> {};

template <class T>
concept Serializable = IsSerializable<std::remove_cvref_t<T>>::value;

class ByteWriter {
 public:
  void write(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    bytes_.insert(bytes_.end(), p, p + n);
  }

  template <Serializable T>
  void put(const T& value) {
    using V = std::remove_cvref_t<T>;
    if constexpr (UserSerializable<V>) {
      value.serialize(*this);
    } else if constexpr (std::is_same_v<V, std::string>) {
      put(static_cast<uint64_t>(value.size()));
      write(value.data(), value.size());
    } else if constexpr (std::is_trivially_copyable_v<V>) {
      write(&value, sizeof(V));
    } else {  // std::vector
      put(static_cast<uint64_t>(value.size()));
      using E = typename V::value_type;
      if constexpr (std::is_trivially_copyable_v<E> && !UserSerializable<E> &&
                    !std::is_same_v<E, bool>) {
        write(value.data(), value.size() * sizeof(E));
      } else {
        for (const auto& e : value) put(static_cast<const E&>(e));
      }
    }
  }

  const std::vector<uint8_t>& bytes() const { return bytes_; }
  std::vector<uint8_t> take() { return std::move(bytes_); }

 private:
  std::vector<uint8_t> bytes_;
};

class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  void read(void* out, size_t n) {
    FERRY_CHECK(n <= size_ - pos_, MismatchError, "torchrec deserialize: ", n,
                " more bytes wanted at offset ", pos_, " of a ", size_,
                "-byte value (the ranks disagree about the result type, or a deserialize does "
                "not match its serialize)");
    if (n > 0) std::memcpy(out, data_ + pos_, n);
    pos_ += n;
  }

  template <Serializable T>
  T get() {
    using V = std::remove_cvref_t<T>;
    if constexpr (UserSerializable<V>) {
      return V::deserialize(*this);
    } else if constexpr (std::is_same_v<V, std::string>) {
      const uint64_t n = length();
      FERRY_CHECK(n <= remaining(), MismatchError, "torchrec deserialize: a string of ", n,
                  " bytes does not fit in the ", remaining(), " bytes left");
      std::string s(static_cast<size_t>(n), '\0');
      read(s.data(), s.size());
      return s;
    } else if constexpr (std::is_trivially_copyable_v<V>) {
      static_assert(std::is_default_constructible_v<V>,
                    "a trivially copyable result must be default-constructible to be read");
      V v;
      read(&v, sizeof(V));
      return v;
    } else {  // std::vector
      using E = typename V::value_type;
      const uint64_t n = length();
      V v;
      if constexpr (std::is_trivially_copyable_v<E> && !UserSerializable<E> &&
                    !std::is_same_v<E, bool>) {
        FERRY_CHECK(n <= remaining() / sizeof(E), MismatchError,
                    "torchrec deserialize: a vector of ", n, " elements of ", sizeof(E),
                    " bytes does not fit in the ", remaining(), " bytes left");
        v.resize(static_cast<size_t>(n));
        read(v.data(), v.size() * sizeof(E));
      } else {
        for (uint64_t i = 0; i < n; ++i) v.push_back(get<E>());
      }
      return v;
    }
  }

  size_t remaining() const { return size_ - pos_; }

 private:
  // A length prefix. Strings and vectors of trivially copyable elements check it against the
  // bytes left before they allocate, so garbage cannot make a huge allocation.
  uint64_t length() { return get<uint64_t>(); }

  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// The bytes of `value`.
template <Serializable T>
std::vector<uint8_t> serialize(const T& value) {
  ByteWriter w;
  w.put(value);
  return w.take();
}

// The value `bytes` hold; every byte must be consumed (MismatchError otherwise).
template <Serializable T>
T deserialize(const std::vector<uint8_t>& bytes) {
  ByteReader r(bytes.data(), bytes.size());
  T value = r.get<T>();
  FERRY_CHECK(r.remaining() == 0, MismatchError, "torchrec deserialize: ", r.remaining(),
              " of ", bytes.size(), " bytes were left unread (the ranks disagree about the "
              "result type, or a deserialize does not match its serialize)");
  return value;
}

}  // namespace ferry::torchrec
