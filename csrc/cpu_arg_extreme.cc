// dmljax's ARGMIN and ARGMAX on CPU, as an XLA FFI handler that spreads its work over XLA's intra-op thread pool.
//
// Input: (outer, n, inner), reduced over n (or (outer, n), inner = 1); output int32 (outer, inner) (or (outer,)): the
// position along n of every block's extreme, the first one (`last`: the final one) where it occurs more than once.
//
// Order: every element's key is computed from its bits exactly as dmljax/_src/rank_keys.py's extreme_key computes
// it. ARGMAX: floats (float16, bfloat16, float32, float64) by sign and magnitude, -0.0 equal to +0.0, every NaN one
// key above +inf (all NaNs equal); integers by value. ARGMIN: the bitwise not of that key (which reverses a two's
// complement order exactly), with every NaN the largest key: a NaN is the extreme of both. The answer is the
// position of the largest key, so equal keys are ties, broken by position.
//
// Rows (inner = 1) are read in blocks whose largest key a loop over consecutive elements finds (vectorized by the
// compiler); only a block whose largest key beats the best so far (`last`: or equals it) is read again for the
// position of that key, a block the first-level cache still holds. Columns (inner > 1) keep a tile of running
// (key, position) pairs while the rows stream past it, updated by selects the compiler vectorizes. Both built
// twice, for the x86-64 baseline and for AVX2.
//
// Work: units of (a group of rows, a block of columns, a chunk of n) as SplitRows cuts them (cpu_parallel.h), taken
// from one counter by the calling thread and helpers on the pool. Where chunks of n are cut (rows and column blocks
// too few for the threads), each writes a partial (key, position) per row and column, scratch bounded by the thread
// count, which a second pass combines in chunk order with the same tie rule. Small calls run on the calling thread.
//
// Errors: no C++ exception leaves the library (cpu_parallel.h's Guarded and ParallelFor).

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "cpu_parallel.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

// Below this many input bytes a call runs on the calling thread: scheduling costs more than it saves.
constexpr int64_t kMinParallelBytes = int64_t{1} << 17;
// A unit of work reads at least this many input bytes.
constexpr int64_t kMinBytesPerUnit = int64_t{1} << 16;
constexpr int64_t kUnitsPerThread = 4;
// Columns whose running pairs stay on the stack (16 KiB at most) while the rows stream past them.
constexpr int64_t kTile = 1024;
// The bytes of a row whose largest key is found before its position is looked for.
constexpr int64_t kBlockBytes = 1024;

// Floats: bits U, key S (their signed twin). kTop: the largest magnitude that is not a NaN (+inf's bits).
template <typename U, U kTop>
struct FloatType {
  using Bits = U;
  using Key = std::make_signed_t<U>;
  static constexpr int kWidth = sizeof(U) * 8;
  static constexpr U kMagnitude = static_cast<U>(static_cast<U>(~U{0}) >> 1);

  template <bool kMax>
  static Key KeyOf(U bits) {
    const U magnitude = static_cast<U>(bits & kMagnitude);
    const U negative = static_cast<U>(static_cast<Key>(bits) >> (kWidth - 1));  // all ones where the sign is set
    const Key ascending = static_cast<Key>(static_cast<U>((magnitude ^ negative) - negative));  // m, or -m
    if constexpr (kMax) {
      return magnitude > kTop ? static_cast<Key>(kTop + 1) : ascending;
    } else {
      return magnitude > kTop ? std::numeric_limits<Key>::max() : static_cast<Key>(~ascending);
    }
  }
};

using F16 = FloatType<uint16_t, 0x7c00>;
using BF16 = FloatType<uint16_t, 0x7f80>;
using F32 = FloatType<uint32_t, 0x7f800000u>;
using F64 = FloatType<uint64_t, 0x7ff0000000000000ull>;

// Integers T: the key is the value (ARGMAX) or its bitwise not (ARGMIN), which reverses the order of signed and
// unsigned integers alike.
template <typename T>
struct IntType {
  using Bits = T;
  using Key = T;

  template <bool kMax>
  static Key KeyOf(T value) {
    if constexpr (kMax) {
      return value;
    } else {
      return static_cast<T>(~value);
    }
  }
};

// Whether a key `k` at a later position takes the place of `best`: a larger key, or (`kLast`) an equal one.
template <bool kLast, typename Key>
__attribute__((always_inline)) inline bool Replaces(Key k, Key best) {
  return kLast ? k >= best : k > best;
}

// The largest key of the kBlock elements at `row`, in kLanes independent lanes (vector registers).
template <typename Type, bool kMax>
__attribute__((always_inline)) inline typename Type::Key BlockMax(const typename Type::Bits* __restrict__ row) {
  using Key = typename Type::Key;
  constexpr int64_t kBlock = kBlockBytes / static_cast<int64_t>(sizeof(typename Type::Bits));
  constexpr int64_t kLanes = 128 / static_cast<int64_t>(sizeof(typename Type::Bits));
  static_assert(kBlock % kLanes == 0);
  Key lane[kLanes];
  for (int64_t l = 0; l < kLanes; ++l) lane[l] = Type::template KeyOf<kMax>(row[l]);
  for (int64_t j = kLanes; j < kBlock; j += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) {
      const Key k = Type::template KeyOf<kMax>(row[j + l]);
      lane[l] = lane[l] > k ? lane[l] : k;
    }
  }
  Key folded = lane[0];
  for (int64_t l = 1; l < kLanes; ++l) folded = folded > lane[l] ? folded : lane[l];
  return folded;
}

// The first (kLast: final) position among the kBlock elements at `row` whose key is `key` (one of them is).
template <typename Type, bool kMax, bool kLast>
__attribute__((always_inline)) inline int64_t PositionIn(const typename Type::Bits* __restrict__ row,
                                                         typename Type::Key key) {
  constexpr int64_t kBlock = kBlockBytes / static_cast<int64_t>(sizeof(typename Type::Bits));
  if constexpr (kLast) {
    for (int64_t j = kBlock - 1; j > 0; --j) {
      if (Type::template KeyOf<kMax>(row[j]) == key) return j;
    }
    return 0;
  } else {
    for (int64_t j = 0; j + 1 < kBlock; ++j) {
      if (Type::template KeyOf<kMax>(row[j]) == key) return j;
    }
    return kBlock - 1;
  }
}

// The extreme of a row's elements [begin, end) (begin < end): its key and its first (kLast: final) position.
template <typename Type, bool kMax, bool kLast>
__attribute__((always_inline)) inline void ScanRow(const typename Type::Bits* __restrict__ row, int64_t begin,
                                                   int64_t end, typename Type::Key* key, int64_t* position) {
  using Key = typename Type::Key;
  constexpr int64_t kBlock = kBlockBytes / static_cast<int64_t>(sizeof(typename Type::Bits));
  Key best = Type::template KeyOf<kMax>(row[begin]);
  int64_t at = begin;
  int64_t j = begin + 1;
  for (; j + kBlock <= end; j += kBlock) {
    const Key block = BlockMax<Type, kMax>(row + j);
    if (Replaces<kLast>(block, best)) {
      best = block;
      at = j + PositionIn<Type, kMax, kLast>(row + j, block);
    }
  }
  for (; j < end; ++j) {
    const Key k = Type::template KeyOf<kMax>(row[j]);
    if (Replaces<kLast>(k, best)) {
      best = k;
      at = j;
    }
  }
  *key = best;
  *position = at;
}

struct Shape {
  int64_t outer, n, inner;
};

// What a unit of work reads: rows [first_row, last_row), columns [first_col, last_col) of each, the n-range
// [begin, end); and where its answers go: the output (`out`, where the unit holds all of n), or the partial answers
// of its `chunk` of n (`keys` and `positions`, laid out (row, chunk, column)).
template <typename Type>
struct Unit {
  int64_t first_row, last_row, first_col, last_col, begin, end;
  int32_t* out;
  typename Type::Key* keys;
  int32_t* positions;
  int64_t chunks, chunk;
};

template <typename Type, bool kMax, bool kLast>
__attribute__((always_inline)) inline void ArgUnitBody(const typename Type::Bits* __restrict__ x, const Shape& s,
                                                       const Unit<Type>& u) {
  using Bits = typename Type::Bits;
  using Key = typename Type::Key;
  for (int64_t row = u.first_row; row < u.last_row; ++row) {
    const Bits* __restrict__ base = x + row * s.n * s.inner;
    if (s.inner == 1) {
      Key key;
      int64_t position;
      ScanRow<Type, kMax, kLast>(base, u.begin, u.end, &key, &position);
      if (u.out != nullptr) {
        u.out[row] = static_cast<int32_t>(position);
      } else {
        u.keys[row * u.chunks + u.chunk] = key;
        u.positions[row * u.chunks + u.chunk] = static_cast<int32_t>(position);
      }
      continue;
    }
    Key key[kTile];
    int32_t at[kTile];
    for (int64_t first = u.first_col; first < u.last_col; first += kTile) {
      const int64_t width = std::min(kTile, u.last_col - first);
      const Bits* __restrict__ line = base + u.begin * s.inner + first;
      for (int64_t i = 0; i < width; ++i) {
        key[i] = Type::template KeyOf<kMax>(line[i]);
        at[i] = static_cast<int32_t>(u.begin);
      }
      for (int64_t j = u.begin + 1; j < u.end; ++j) {
        line = base + j * s.inner + first;
        const int32_t here = static_cast<int32_t>(j);
        for (int64_t i = 0; i < width; ++i) {
          const Key k = Type::template KeyOf<kMax>(line[i]);
          const bool replaces = Replaces<kLast>(k, key[i]);
          key[i] = replaces ? k : key[i];
          at[i] = replaces ? here : at[i];
        }
      }
      if (u.out != nullptr) {
        std::copy(at, at + width, u.out + row * s.inner + first);
      } else {
        const int64_t slot = (row * u.chunks + u.chunk) * s.inner + first;
        std::copy(key, key + width, u.keys + slot);
        std::copy(at, at + width, u.positions + slot);
      }
    }
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
template <typename Type, bool kMax, bool kLast>
__attribute__((target("avx2"))) void ArgUnitAvx2(const typename Type::Bits* x, const Shape& s, const Unit<Type>& u) {
  ArgUnitBody<Type, kMax, kLast>(x, s, u);
}
#endif

template <typename Type, bool kMax, bool kLast>
void ArgUnit(const typename Type::Bits* x, const Shape& s, const Unit<Type>& u) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) return ArgUnitAvx2<Type, kMax, kLast>(x, s, u);
#endif
  ArgUnitBody<Type, kMax, kLast>(x, s, u);
}

// Below this many partial answers the combine runs on the calling thread.
constexpr int64_t kMinParallelCombine = int64_t{1} << 14;

// Units of work as SplitRows cuts them. Chunks of n write partial answers, a key and a position per (row, chunk,
// column): the call's only scratch, fewer than 2 * units * kTile (96 KiB a thread for int32 positions and 64-bit
// keys), and at most units times the output. The combine reads each row's chunks in order, so an equal key of a
// later chunk replaces the best only for `last`, as within a chunk.
template <typename Type, bool kMax, bool kLast>
void ArgExtreme(ffi::ThreadPool& pool, Scratch& scratch, int64_t threads, const Shape& s, const void* input,
                int32_t* out) {
  using Bits = typename Type::Bits;
  using Key = typename Type::Key;
  const Bits* x = static_cast<const Bits*>(input);
  const RowSplit split = SplitRows(threads, s.outer, s.n, s.inner, static_cast<int64_t>(sizeof(Bits)), kTile,
                                   kUnitsPerThread, kMinBytesPerUnit);
  const int64_t blocks = split.blocks, chunks = split.chunks;
  const int64_t slots = split.Slots(s.outer, s.inner);
  Key* keys = scratch.Allocate<Key>(static_cast<size_t>(slots));
  int32_t* positions = scratch.Allocate<int32_t>(static_cast<size_t>(slots));
  ParallelFor(pool, threads, split.Units(), [&](int64_t unit) {
    const int64_t group = unit / (blocks * chunks), block = unit / chunks % blocks, chunk = unit % chunks;
    Unit<Type> u;
    u.first_row = group * split.per_group;
    u.last_row = std::min(s.outer, u.first_row + split.per_group);
    u.first_col = block * split.width;
    u.last_col = std::min(s.inner, u.first_col + split.width);
    u.begin = chunk * split.length;
    u.end = std::min(s.n, u.begin + split.length);
    u.out = chunks == 1 ? out : nullptr;
    u.keys = keys;
    u.positions = positions;
    u.chunks = chunks;
    u.chunk = chunk;
    ArgUnit<Type, kMax, kLast>(x, s, u);
  });
  if (chunks == 1) return;
  const int64_t tiles = (s.inner + kTile - 1) / kTile;
  ParallelFor(pool, slots >= kMinParallelCombine ? threads : 1, s.outer * tiles, [&](int64_t unit) {
    const int64_t row = unit / tiles, first = unit % tiles * kTile, last = std::min(s.inner, first + kTile);
    for (int64_t i = first; i < last; ++i) {
      Key best = keys[row * chunks * s.inner + i];
      int32_t at = positions[row * chunks * s.inner + i];
      for (int64_t chunk = 1; chunk < chunks; ++chunk) {
        const int64_t slot = (row * chunks + chunk) * s.inner + i;
        if (Replaces<kLast>(keys[slot], best)) {
          best = keys[slot];
          at = positions[slot];
        }
      }
      out[row * s.inner + i] = at;
    }
  });
}

template <typename Type>
void Dispatch(ffi::ThreadPool& pool, Scratch& scratch, int64_t threads, const Shape& s, bool find_max, bool last,
              const void* input, int32_t* out) {
  if (find_max) {
    if (last) return ArgExtreme<Type, true, true>(pool, scratch, threads, s, input, out);
    return ArgExtreme<Type, true, false>(pool, scratch, threads, s, input, out);
  }
  if (last) return ArgExtreme<Type, false, true>(pool, scratch, threads, s, input, out);
  ArgExtreme<Type, false, false>(pool, scratch, threads, s, input, out);
}

ffi::Error CheckedArgExtreme(ffi::ThreadPool& pool, ffi::ScratchAllocator& allocator, ffi::AnyBuffer& input,
                             ffi::Result<ffi::Buffer<ffi::S32>>& output, bool find_max, bool last) {
  // The caller (dmljax's reduction_kernels) has validated shapes and types at trace time; these checks only keep a
  // call made any other way from reading or writing outside its buffers.
  // (outer, n, inner) reduced to (outer, inner), or (outer, n) to (outer,): an operand with no size-1 axis, which
  // XLA hands over as it is (a trailing size-1 axis may cost it a copy into the layout a custom call expects).
  auto in_dims = input.dimensions();
  auto out_dims = output->dimensions();
  const bool rows = in_dims.size() == 2 && out_dims.size() == 1;
  if (!rows && (in_dims.size() != 3 || out_dims.size() != 2)) {
    return ffi::Error::InvalidArgument("dmljax_cpu_arg_extreme: the input must be (outer, n, inner) or (outer, n), "
                                       "the output (outer, inner) or (outer,)");
  }
  const Shape s{in_dims[0], in_dims[1], rows ? 1 : in_dims[2]};
  if (s.outer < 0 || s.n < 1 || s.inner < 0 || out_dims[0] != s.outer || (!rows && out_dims[1] != s.inner)) {
    return ffi::Error::InvalidArgument("dmljax_cpu_arg_extreme: need n >= 1 and an output of the kept axes");
  }
  if (s.n - 1 > std::numeric_limits<int32_t>::max()) {
    return ffi::Error::InvalidArgument("dmljax_cpu_arg_extreme: n - 1 must fit the int32 output");
  }
  const int64_t width = static_cast<int64_t>(ffi::ByteWidth(input.element_type()));
  if (static_cast<int64_t>(input.size_bytes()) != s.outer * s.n * s.inner * width) {
    return ffi::Error::InvalidArgument("dmljax_cpu_arg_extreme: the input's size does not match its shape");
  }
  if (s.outer == 0 || s.inner == 0) return ffi::Error::Success();
  const int64_t threads = ThreadsFor(pool, s.outer * s.n * s.inner * width, kMinParallelBytes, kMinBytesPerUnit);
  const void* in = input.untyped_data();
  int32_t* out = output->typed_data();
  Scratch scratch(allocator);
  switch (input.element_type()) {
    case ffi::DataType::F32: Dispatch<F32>(pool, scratch, threads, s, find_max, last, in, out); break;
    case ffi::DataType::F16: Dispatch<F16>(pool, scratch, threads, s, find_max, last, in, out); break;
    case ffi::DataType::BF16: Dispatch<BF16>(pool, scratch, threads, s, find_max, last, in, out); break;
    case ffi::DataType::F64: Dispatch<F64>(pool, scratch, threads, s, find_max, last, in, out); break;
    case ffi::DataType::S8: Dispatch<IntType<int8_t>>(pool, scratch, threads, s, find_max, last, in, out); break;
    case ffi::DataType::S16: Dispatch<IntType<int16_t>>(pool, scratch, threads, s, find_max, last, in, out); break;
    case ffi::DataType::S32: Dispatch<IntType<int32_t>>(pool, scratch, threads, s, find_max, last, in, out); break;
    case ffi::DataType::S64: Dispatch<IntType<int64_t>>(pool, scratch, threads, s, find_max, last, in, out); break;
    case ffi::DataType::U8: Dispatch<IntType<uint8_t>>(pool, scratch, threads, s, find_max, last, in, out); break;
    case ffi::DataType::U16: Dispatch<IntType<uint16_t>>(pool, scratch, threads, s, find_max, last, in, out); break;
    case ffi::DataType::U32: Dispatch<IntType<uint32_t>>(pool, scratch, threads, s, find_max, last, in, out); break;
    case ffi::DataType::U64: Dispatch<IntType<uint64_t>>(pool, scratch, threads, s, find_max, last, in, out); break;
    default:
      return ffi::Error::InvalidArgument("dmljax_cpu_arg_extreme: unsupported element type");
  }
  return ffi::Error::Success();
}

// The FFI entry point: CheckedArgExtreme, with every C++ exception turned into an FFI error (XLA raises it in Python).
ffi::Error ArgExtremeHandler(ffi::ThreadPool pool, ffi::ScratchAllocator scratch, ffi::AnyBuffer input,
                             ffi::Result<ffi::Buffer<ffi::S32>> output, bool find_max, bool last) {
  return Guarded("dmljax_cpu_arg_extreme", "argmin/argmax",
                 [&] { return CheckedArgExtreme(pool, scratch, input, output, find_max, last); });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(DmljaxCpuArgExtreme, ArgExtremeHandler,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Ctx<ffi::ScratchAllocator>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::Buffer<ffi::S32>>()
                                  .Attr<bool>("find_max")
                                  .Attr<bool>("last"));
