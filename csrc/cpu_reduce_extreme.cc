// dmljax's REDUCE MAX and MIN on CPU, as an XLA FFI handler that spreads its work over XLA's intra-op thread pool.
//
// Input: (outer, n, inner), reduced over n (or (outer, n), inner = 1); output (outer, inner) (or (outer,)), an element
// of every block, bit for bit.
//
// Floats (float16, bfloat16, float32, float64): IEEE 754-2019 maximum and minimum. A block that holds a NaN gives
// the NaN whose bits, read as an unsigned integer, are the largest; otherwise the largest (smallest) value, +0.0
// above -0.0. Both are computed on integers alone, so no float comparison (which may skip NaNs or treat
// subnormals as zero) and no float register (which may quiet a signalling NaN) touches the bits: the key of
// an element is its bits (MIN: with the sign bit flipped, as min(x) = -max(-x)) turned from sign-magnitude into
// two's complement, whose order is IEEE 754's total order, and every NaN's bits also enter an unsigned maximum
// of their own. The block's answer is that NaN maximum where the block holds a NaN (NaN bits are never 0),
// else the element of the largest key. Integers: the largest key, the value (MIN: its bitwise not, which
// reverses the order of signed and unsigned integers alike).
//
// Work: units of (a group of rows, a chunk of n), taken from one counter by the calling thread and helpers on
// the pool; each writes its partial maxima, which a last pass combines (a maximum does not mind the order).
// The inner loops are maxima over consecutive elements, which the compiler vectorizes; built twice, for the
// x86-64 baseline and for AVX2. Small calls run on the calling thread alone.
//
// Errors: no C++ exception leaves the library (see cpu_top_k.cc, whose thread pool helpers this file shares).

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "cpu_parallel.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

// Below this many input bytes a call runs on the calling thread: scheduling costs more than it saves.
constexpr int64_t kMinParallelBytes = int64_t{1} << 17;
// A unit of work reads at least this many input bytes.
constexpr int64_t kMinBytesPerUnit = int64_t{1} << 16;
constexpr int64_t kUnitsPerThread = 4;

// Floats: bits U, their signed twin S. kTop: the largest magnitude that is not a NaN (+inf's bits).
template <typename U, U kTop>
struct FloatType {
  using Bits = U;
  using Key = std::make_signed_t<U>;
  static constexpr bool kFloat = true;
  static constexpr int kWidth = sizeof(U) * 8;
  static constexpr U kSign = static_cast<U>(U{1} << (kWidth - 1));
  static constexpr U kMagnitude = static_cast<U>(kSign - 1);
  // Sign-magnitude bits (MIN: sign flipped) to two's complement: an involution.
  static Key Flip(Key s) { return static_cast<Key>(s ^ ((s >> (kWidth - 1)) & static_cast<Key>(kMagnitude))); }
  static Key KeyOf(U bits, U flip) { return Flip(static_cast<Key>(bits ^ flip)); }
  static U BitsOf(Key key, U flip) { return static_cast<U>(static_cast<U>(Flip(key)) ^ flip); }
  static U NanOf(U bits) { return (bits & kMagnitude) > kTop ? bits : U{0}; }
};

using F16 = FloatType<uint16_t, 0x7c00>;
using BF16 = FloatType<uint16_t, 0x7f80>;
using F32 = FloatType<uint32_t, 0x7f800000u>;
using F64 = FloatType<uint64_t, 0x7ff0000000000000ull>;

// Integers T: the key is the value, or its bitwise not (MIN).
template <typename T>
struct IntType {
  using Bits = T;
  using Key = T;
  static constexpr bool kFloat = false;
  static Key KeyOf(T value, T flip) { return static_cast<T>(value ^ flip); }
  static T BitsOf(Key key, T flip) { return static_cast<T>(key ^ flip); }
  static T NanOf(T) { return T{0}; }
};

// The maxima of a row's elements [begin, end) in kLanes independent lanes (vector registers), folded into *key
// and *nan.
template <typename Type, int64_t kLanes>
__attribute__((always_inline)) inline void ReduceRow(const typename Type::Bits* __restrict__ row, int64_t begin,
                                                     int64_t end, typename Type::Bits flip,
                                                     typename Type::Key* __restrict__ key,
                                                     typename Type::Bits* __restrict__ nan) {
  using Bits = typename Type::Bits;
  using Key = typename Type::Key;
  Key best[kLanes];
  Bits largest_nan[kLanes];
  for (int64_t l = 0; l < kLanes; ++l) {
    best[l] = std::numeric_limits<Key>::min();
    largest_nan[l] = 0;
  }
  int64_t j = begin;
  for (; j + kLanes <= end; j += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) {
      const Bits bits = row[j + l];
      const Key k = Type::KeyOf(bits, flip);
      best[l] = best[l] > k ? best[l] : k;
      if constexpr (Type::kFloat) {
        const Bits candidate = Type::NanOf(bits);
        largest_nan[l] = largest_nan[l] > candidate ? largest_nan[l] : candidate;
      }
    }
  }
  for (; j < end; ++j) {
    best[0] = std::max(best[0], Type::KeyOf(row[j], flip));
    if constexpr (Type::kFloat) largest_nan[0] = std::max(largest_nan[0], Type::NanOf(row[j]));
  }
  Key folded_key = *key;
  Bits folded_nan = *nan;
  for (int64_t l = 0; l < kLanes; ++l) {
    folded_key = folded_key > best[l] ? folded_key : best[l];
    folded_nan = folded_nan > largest_nan[l] ? folded_nan : largest_nan[l];
  }
  *key = folded_key;
  *nan = folded_nan;
}

// Columns reduced together along the rows of an (n, inner) block: a tile of the running maxima stays in the
// first-level cache while the rows stream past it.
constexpr int64_t kTile = 1024;

// The maxima of one row's n-range [begin, end), each of `inner` columns, folded into key[] and nan[].
template <typename Type>
__attribute__((always_inline)) inline void ReduceBody(const typename Type::Bits* __restrict__ x, int64_t n,
                                                      int64_t inner, int64_t row, int64_t begin, int64_t end,
                                                      typename Type::Bits flip, typename Type::Key* __restrict__ key,
                                                      typename Type::Bits* __restrict__ nan) {
  using Bits = typename Type::Bits;
  using Key = typename Type::Key;
  const Bits* __restrict__ base = x + row * n * inner;
  if (inner == 1) {
    // Four vector registers of lanes for each running maximum (128 bytes), fewer for short rows.
    constexpr int64_t kWide = 128 / static_cast<int64_t>(sizeof(Bits));
    constexpr int64_t kNarrow = std::max<int64_t>(1, 32 / static_cast<int64_t>(sizeof(Bits)));
    const int64_t length = end - begin;
    if (length >= kWide) return ReduceRow<Type, kWide>(base, begin, end, flip, key, nan);
    if (length >= kNarrow) return ReduceRow<Type, kNarrow>(base, begin, end, flip, key, nan);
    return ReduceRow<Type, 1>(base, begin, end, flip, key, nan);
  }
  for (int64_t first = 0; first < inner; first += kTile) {
    const int64_t last = std::min(inner, first + kTile);
    for (int64_t j = begin; j < end; ++j) {
      const Bits* __restrict__ line = base + j * inner;
      for (int64_t i = first; i < last; ++i) {
        const Key k = Type::KeyOf(line[i], flip);
        key[i] = key[i] > k ? key[i] : k;
        if constexpr (Type::kFloat) {
          const Bits candidate = Type::NanOf(line[i]);
          nan[i] = nan[i] > candidate ? nan[i] : candidate;
        }
      }
    }
  }
}

// Rows [first, last) of x's n-range [begin, end): each row's partial maxima at key/nan + row * stride (one call
// for many rows, so that a short row costs no call of its own).
template <typename Type>
__attribute__((always_inline)) inline void ReduceRowsBody(const typename Type::Bits* __restrict__ x, int64_t n,
                                                          int64_t inner, int64_t first, int64_t last, int64_t begin,
                                                          int64_t end, typename Type::Bits flip,
                                                          typename Type::Key* __restrict__ key,
                                                          typename Type::Bits* __restrict__ nan, int64_t stride) {
  for (int64_t row = first; row < last; ++row) {
    ReduceBody<Type>(x, n, inner, row, begin, end, flip, key + row * stride, nan + row * stride);
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
template <typename Type>
__attribute__((target("avx2"))) void ReduceRowsAvx2(const typename Type::Bits* __restrict__ x, int64_t n,
                                                    int64_t inner, int64_t first, int64_t last, int64_t begin,
                                                    int64_t end, typename Type::Bits flip,
                                                    typename Type::Key* __restrict__ key,
                                                    typename Type::Bits* __restrict__ nan, int64_t stride) {
  ReduceRowsBody<Type>(x, n, inner, first, last, begin, end, flip, key, nan, stride);
}
#endif

template <typename Type>
void ReduceRows(const typename Type::Bits* x, int64_t n, int64_t inner, int64_t first, int64_t last, int64_t begin,
                int64_t end, typename Type::Bits flip, typename Type::Key* key, typename Type::Bits* nan,
                int64_t stride) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) return ReduceRowsAvx2<Type>(x, n, inner, first, last, begin, end, flip, key, nan, stride);
#endif
  ReduceRowsBody<Type>(x, n, inner, first, last, begin, end, flip, key, nan, stride);
}

struct Shape {
  int64_t outer, n, inner;
};

template <typename Type>
void Extreme(ffi::ThreadPool& pool, int64_t threads, const Shape& s, bool find_max, const void* input, void* output) {
  using Bits = typename Type::Bits;
  using Key = typename Type::Key;
  const Bits* x = static_cast<const Bits*>(input);
  Bits* out = static_cast<Bits*>(output);
  Bits flip = 0;
  if (!find_max) flip = Type::kFloat ? static_cast<Bits>(Bits{1} << (sizeof(Bits) * 8 - 1)) : static_cast<Bits>(~Bits{0});
  // Units: groups of rows, and where there are fewer rows than units, chunks of n as well.
  const int64_t wanted = threads > 1 ? threads * kUnitsPerThread : 1;
  const int64_t row_bytes = s.n * s.inner * static_cast<int64_t>(sizeof(Bits));
  int64_t chunks = 1;
  if (s.outer < wanted) {
    const int64_t most = std::max<int64_t>(1, row_bytes / kMinBytesPerUnit);
    chunks = std::max<int64_t>(1, std::min({(wanted + s.outer - 1) / s.outer, most, s.n}));
  }
  const int64_t groups = std::max<int64_t>(1, std::min(s.outer, wanted));
  const int64_t per_group = (s.outer + groups - 1) / groups;
  const int64_t length = (s.n + chunks - 1) / chunks;
  // Partial maxima: (row, chunk, column).
  const size_t slots = static_cast<size_t>(s.outer * chunks * s.inner);
  std::vector<Key> keys(slots, std::numeric_limits<Key>::min());
  std::vector<Bits> nans(slots, Bits{0});
  ParallelFor(pool, threads, groups * chunks, [&](int64_t unit) {
    const int64_t group = unit / chunks, chunk = unit % chunks;
    const int64_t begin = std::min(s.n, chunk * length), end = std::min(s.n, begin + length);
    const int64_t first = group * per_group, last = std::min(s.outer, (group + 1) * per_group);
    if (first >= last) return;
    // Row r's partial maxima of this chunk start at (r * chunks + chunk) * inner.
    const size_t at = static_cast<size_t>(chunk * s.inner);
    ReduceRows<Type>(x, s.n, s.inner, first, last, begin, end, flip, &keys[at], &nans[at], chunks * s.inner);
  });
  for (int64_t row = 0; row < s.outer; ++row) {
    for (int64_t i = 0; i < s.inner; ++i) {
      Key best = std::numeric_limits<Key>::min();
      Bits largest_nan = 0;
      for (int64_t chunk = 0; chunk < chunks; ++chunk) {
        const size_t at = static_cast<size_t>((row * chunks + chunk) * s.inner + i);
        best = std::max(best, keys[at]);
        largest_nan = std::max(largest_nan, nans[at]);
      }
      out[row * s.inner + i] = largest_nan != 0 ? largest_nan : Type::BitsOf(best, flip);
    }
  }
}

ffi::Error CheckedExtreme(ffi::ThreadPool& pool, ffi::AnyBuffer& input, ffi::Result<ffi::AnyBuffer>& output,
                          bool find_max) {
  // The caller (dmljax's reduce_extreme) has validated shapes and types at trace time; these checks only keep a
  // call made any other way from reading or writing outside its buffers.
  // (outer, n, inner) reduced to (outer, inner), or (outer, n) to (outer,): an operand with no size-1 axis, which
  // XLA hands over as it is (a trailing size-1 axis may cost it a copy into the layout a custom call expects).
  auto in_dims = input.dimensions();
  auto out_dims = output->dimensions();
  const bool rows = in_dims.size() == 2 && out_dims.size() == 1;
  if (!rows && (in_dims.size() != 3 || out_dims.size() != 2)) {
    return ffi::Error::InvalidArgument("dmljax_cpu_reduce_extreme: the input must be (outer, n, inner) or (outer, n), "
                                       "the output (outer, inner) or (outer,)");
  }
  const Shape s{in_dims[0], in_dims[1], rows ? 1 : in_dims[2]};
  if (s.outer < 0 || s.n < 1 || s.inner < 0 || out_dims[0] != s.outer || (!rows && out_dims[1] != s.inner)) {
    return ffi::Error::InvalidArgument("dmljax_cpu_reduce_extreme: need n >= 1 and an output of the kept axes");
  }
  if (output->element_type() != input.element_type()) {
    return ffi::Error::InvalidArgument("dmljax_cpu_reduce_extreme: the output must have the input's type");
  }
  const int64_t width = static_cast<int64_t>(ffi::ByteWidth(input.element_type()));
  if (static_cast<int64_t>(input.size_bytes()) != s.outer * s.n * s.inner * width ||
      static_cast<int64_t>(output->size_bytes()) != s.outer * s.inner * width) {
    return ffi::Error::InvalidArgument("dmljax_cpu_reduce_extreme: buffer sizes do not match the shapes");
  }
  if (s.outer == 0 || s.inner == 0) return ffi::Error::Success();
  const int64_t bytes = s.outer * s.n * s.inner * width;
  int64_t threads = 1;
  if (bytes >= kMinParallelBytes) {
    threads = std::max<int64_t>(1, std::min(pool.num_threads(), bytes / kMinBytesPerUnit));
  }
  const void* in = input.untyped_data();
  void* out = output->untyped_data();
  switch (input.element_type()) {
    case ffi::DataType::F32: Extreme<F32>(pool, threads, s, find_max, in, out); break;
    case ffi::DataType::F16: Extreme<F16>(pool, threads, s, find_max, in, out); break;
    case ffi::DataType::BF16: Extreme<BF16>(pool, threads, s, find_max, in, out); break;
    case ffi::DataType::F64: Extreme<F64>(pool, threads, s, find_max, in, out); break;
    case ffi::DataType::S8: Extreme<IntType<int8_t>>(pool, threads, s, find_max, in, out); break;
    case ffi::DataType::S16: Extreme<IntType<int16_t>>(pool, threads, s, find_max, in, out); break;
    case ffi::DataType::S32: Extreme<IntType<int32_t>>(pool, threads, s, find_max, in, out); break;
    case ffi::DataType::S64: Extreme<IntType<int64_t>>(pool, threads, s, find_max, in, out); break;
    case ffi::DataType::U8: Extreme<IntType<uint8_t>>(pool, threads, s, find_max, in, out); break;
    case ffi::DataType::U16: Extreme<IntType<uint16_t>>(pool, threads, s, find_max, in, out); break;
    case ffi::DataType::U32: Extreme<IntType<uint32_t>>(pool, threads, s, find_max, in, out); break;
    case ffi::DataType::U64: Extreme<IntType<uint64_t>>(pool, threads, s, find_max, in, out); break;
    default:
      return ffi::Error::InvalidArgument("dmljax_cpu_reduce_extreme: unsupported element type");
  }
  return ffi::Error::Success();
}

// The FFI entry point: CheckedExtreme, with every C++ exception turned into an FFI error (XLA raises it in Python).
ffi::Error ExtremeHandler(ffi::ThreadPool pool, ffi::AnyBuffer input, ffi::Result<ffi::AnyBuffer> output,
                          bool find_max) {
  return Guarded("dmljax_cpu_reduce_extreme", "reduction",
                 [&] { return CheckedExtreme(pool, input, output, find_max); });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(DmljaxCpuReduceExtreme, ExtremeHandler,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<bool>("find_max"));
