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
// Work: units of (a group of rows, a block of columns, a chunk of n), taken from one counter by the calling thread
// and helpers on the pool. Columns are split before n, so a unit usually holds all of n and writes its answers to
// the output; only where rows and column blocks are too few for the threads do chunks of n write partial maxima,
// scratch bounded by the thread count (Extreme says how), which a second parallel pass combines (a maximum does
// not mind the order). The inner loops are maxima over consecutive elements, which the compiler vectorizes; built
// twice, for the x86-64 baseline and for AVX2. Small calls run on the calling thread alone.
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

struct Shape {
  int64_t outer, n, inner;
};

// Columns reduced together along the rows of an (n, inner) block: a tile of the running maxima stays in the
// first-level cache (on the stack: 16 KiB at most) while the rows stream past it.
constexpr int64_t kTile = 1024;

// What a unit of work reduces: rows [first_row, last_row), columns [first_col, last_col) of each, the n-range
// [begin, end); and where its maxima go: the output (`out`, where the unit holds all of n), or the partial maxima
// of its `chunk` of n (`keys` and `nans`, laid out (row, chunk, column)).
template <typename Type>
struct Unit {
  int64_t first_row, last_row, first_col, last_col, begin, end;
  typename Type::Bits flip;
  typename Type::Bits* out;
  typename Type::Key* keys;
  typename Type::Bits* nans;
  int64_t chunks, chunk;
};

// A block's answer from its largest key and its largest NaN (NaN bits are never 0; integers have none).
template <typename Type>
inline typename Type::Bits Answer(typename Type::Key key, typename Type::Bits nan, typename Type::Bits flip) {
  return nan != 0 ? nan : Type::BitsOf(key, flip);
}

template <typename Type>
__attribute__((always_inline)) inline void ReduceUnitBody(const typename Type::Bits* __restrict__ x, const Shape& s,
                                                          const Unit<Type>& u) {
  using Bits = typename Type::Bits;
  using Key = typename Type::Key;
  Key key[kTile];
  Bits nan[kTile];
  for (int64_t row = u.first_row; row < u.last_row; ++row) {
    const Bits* __restrict__ base = x + row * s.n * s.inner;
    for (int64_t first = u.first_col; first < u.last_col; first += kTile) {
      const int64_t width = std::min(kTile, u.last_col - first);
      for (int64_t i = 0; i < width; ++i) {
        key[i] = std::numeric_limits<Key>::min();
        nan[i] = 0;
      }
      if (s.inner == 1) {
        // Four vector registers of lanes for each running maximum (128 bytes), fewer for short rows.
        constexpr int64_t kWide = 128 / static_cast<int64_t>(sizeof(Bits));
        constexpr int64_t kNarrow = std::max<int64_t>(1, 32 / static_cast<int64_t>(sizeof(Bits)));
        const int64_t length = u.end - u.begin;
        if (length >= kWide) {
          ReduceRow<Type, kWide>(base, u.begin, u.end, u.flip, &key[0], &nan[0]);
        } else if (length >= kNarrow) {
          ReduceRow<Type, kNarrow>(base, u.begin, u.end, u.flip, &key[0], &nan[0]);
        } else {
          ReduceRow<Type, 1>(base, u.begin, u.end, u.flip, &key[0], &nan[0]);
        }
      } else {
        for (int64_t j = u.begin; j < u.end; ++j) {
          const Bits* __restrict__ line = base + j * s.inner + first;
          for (int64_t i = 0; i < width; ++i) {
            const Key k = Type::KeyOf(line[i], u.flip);
            key[i] = key[i] > k ? key[i] : k;
            if constexpr (Type::kFloat) {
              const Bits candidate = Type::NanOf(line[i]);
              nan[i] = nan[i] > candidate ? nan[i] : candidate;
            }
          }
        }
      }
      if (u.out != nullptr) {
        Bits* __restrict__ to = u.out + row * s.inner + first;
        for (int64_t i = 0; i < width; ++i) to[i] = Answer<Type>(key[i], nan[i], u.flip);
      } else {
        const int64_t at = (row * u.chunks + u.chunk) * s.inner + first;
        std::copy(key, key + width, u.keys + at);
        if constexpr (Type::kFloat) std::copy(nan, nan + width, u.nans + at);
      }
    }
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
template <typename Type>
__attribute__((target("avx2"))) void ReduceUnitAvx2(const typename Type::Bits* x, const Shape& s,
                                                    const Unit<Type>& u) {
  ReduceUnitBody<Type>(x, s, u);
}
#endif

template <typename Type>
void ReduceUnit(const typename Type::Bits* x, const Shape& s, const Unit<Type>& u) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) return ReduceUnitAvx2<Type>(x, s, u);
#endif
  ReduceUnitBody<Type>(x, s, u);
}

// Below this many partial maxima the combine runs on the calling thread.
constexpr int64_t kMinParallelCombine = int64_t{1} << 14;

// Units of work as SplitRows cuts them (cpu_parallel.h): groups of rows, blocks of columns, chunks of n. A unit that
// holds all of n writes its answers to the output. Chunks write partial maxima, which a second parallel pass
// combines per (row, tile of columns): the call's only scratch, outer * chunks * inner partial maxima (a key, and
// for floats a NaN), fewer than 2 * units * kTile (8192 a thread, 128 KiB for float64), and at most units times the
// output, whatever the input's size.
template <typename Type>
void Extreme(ffi::ThreadPool& pool, Scratch& scratch, int64_t threads, const Shape& s, bool find_max,
             const void* input, void* output) {
  using Bits = typename Type::Bits;
  using Key = typename Type::Key;
  const Bits* x = static_cast<const Bits*>(input);
  Bits* out = static_cast<Bits*>(output);
  Bits flip = 0;
  if (!find_max) flip = Type::kFloat ? static_cast<Bits>(Bits{1} << (sizeof(Bits) * 8 - 1)) : static_cast<Bits>(~Bits{0});
  const RowSplit split = SplitRows(threads, s.outer, s.n, s.inner, static_cast<int64_t>(sizeof(Bits)), kTile,
                                   kUnitsPerThread, kMinBytesPerUnit);
  const int64_t blocks = split.blocks, chunks = split.chunks;
  const int64_t slots = split.Slots(s.outer, s.inner);
  Key* keys = scratch.Allocate<Key>(static_cast<size_t>(slots));
  Bits* nans = Type::kFloat ? scratch.Allocate<Bits>(static_cast<size_t>(slots)) : nullptr;
  ParallelFor(pool, threads, split.Units(), [&](int64_t unit) {
    const int64_t group = unit / (blocks * chunks), block = unit / chunks % blocks, chunk = unit % chunks;
    Unit<Type> u;
    u.first_row = group * split.per_group;
    u.last_row = std::min(s.outer, u.first_row + split.per_group);
    u.first_col = block * split.width;
    u.last_col = std::min(s.inner, u.first_col + split.width);
    u.begin = chunk * split.length;
    u.end = std::min(s.n, u.begin + split.length);
    u.flip = flip;
    u.out = chunks == 1 ? out : nullptr;
    u.keys = keys;
    u.nans = nans;
    u.chunks = chunks;
    u.chunk = chunk;
    ReduceUnit<Type>(x, s, u);
  });
  if (chunks == 1) return;
  const int64_t tiles = (s.inner + kTile - 1) / kTile;
  ParallelFor(pool, slots >= kMinParallelCombine ? threads : 1, s.outer * tiles, [&](int64_t unit) {
    const int64_t row = unit / tiles, first = unit % tiles * kTile, last = std::min(s.inner, first + kTile);
    for (int64_t i = first; i < last; ++i) {
      Key best = std::numeric_limits<Key>::min();
      Bits largest_nan = 0;
      for (int64_t chunk = 0; chunk < chunks; ++chunk) {
        const int64_t at = (row * chunks + chunk) * s.inner + i;
        best = std::max(best, keys[at]);
        if constexpr (Type::kFloat) largest_nan = std::max(largest_nan, nans[at]);
      }
      out[row * s.inner + i] = Answer<Type>(best, largest_nan, flip);
    }
  });
}

ffi::Error CheckedExtreme(ffi::ThreadPool& pool, ffi::ScratchAllocator& allocator, ffi::AnyBuffer& input,
                          ffi::Result<ffi::AnyBuffer>& output, bool find_max) {
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
  const int64_t threads = ThreadsFor(pool, bytes, kMinParallelBytes, kMinBytesPerUnit);
  const void* in = input.untyped_data();
  void* out = output->untyped_data();
  Scratch scratch(allocator);
  switch (input.element_type()) {
    case ffi::DataType::F32: Extreme<F32>(pool, scratch, threads, s, find_max, in, out); break;
    case ffi::DataType::F16: Extreme<F16>(pool, scratch, threads, s, find_max, in, out); break;
    case ffi::DataType::BF16: Extreme<BF16>(pool, scratch, threads, s, find_max, in, out); break;
    case ffi::DataType::F64: Extreme<F64>(pool, scratch, threads, s, find_max, in, out); break;
    case ffi::DataType::S8: Extreme<IntType<int8_t>>(pool, scratch, threads, s, find_max, in, out); break;
    case ffi::DataType::S16: Extreme<IntType<int16_t>>(pool, scratch, threads, s, find_max, in, out); break;
    case ffi::DataType::S32: Extreme<IntType<int32_t>>(pool, scratch, threads, s, find_max, in, out); break;
    case ffi::DataType::S64: Extreme<IntType<int64_t>>(pool, scratch, threads, s, find_max, in, out); break;
    case ffi::DataType::U8: Extreme<IntType<uint8_t>>(pool, scratch, threads, s, find_max, in, out); break;
    case ffi::DataType::U16: Extreme<IntType<uint16_t>>(pool, scratch, threads, s, find_max, in, out); break;
    case ffi::DataType::U32: Extreme<IntType<uint32_t>>(pool, scratch, threads, s, find_max, in, out); break;
    case ffi::DataType::U64: Extreme<IntType<uint64_t>>(pool, scratch, threads, s, find_max, in, out); break;
    default:
      return ffi::Error::InvalidArgument("dmljax_cpu_reduce_extreme: unsupported element type");
  }
  return ffi::Error::Success();
}

// The FFI entry point: CheckedExtreme, with every C++ exception turned into an FFI error (XLA raises it in Python).
ffi::Error ExtremeHandler(ffi::ThreadPool pool, ffi::ScratchAllocator scratch, ffi::AnyBuffer input,
                          ffi::Result<ffi::AnyBuffer> output, bool find_max) {
  return Guarded("dmljax_cpu_reduce_extreme", "reduction",
                 [&] { return CheckedExtreme(pool, scratch, input, output, find_max); });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(DmljaxCpuReduceExtreme, ExtremeHandler,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Ctx<ffi::ScratchAllocator>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<bool>("find_max"));
