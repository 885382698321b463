// dmljax's exact top-k on CPU, as an XLA FFI handler that spreads its rows over XLA's intra-op thread pool.
//
// Order: every element becomes a signed integer key (int32 for types of up to 32 bits, int64 for 64-bit
// types) whose integer order is dmljax's value order, computed from the element's bits alone, as
// dmljax/_src/rank_keys.py's ascending_key computes it: floats as sign-magnitude bits turned into two's
// complement, -0.0 as +0.0 and every NaN as the positive quiet NaN (one key above +inf); integers as
// themselves, unsigned ones of the key's width with the top bit flipped. The smallest first is the bitwise
// not of that key. Elements are then pairs (key, index) compared as "larger key, then lower index": a strict
// total order, so the k first pairs are one set whatever the order in which the work is split or merged.
//
// Selection: each segment of a row (the whole row, or a chunk of a long row) is read once. The first k
// elements fill a buffer; from then on an element enters the buffer only if its key beats the k-th best
// kept so far (an equal key comes later, so it loses to every kept pair). For small k the kept pairs stay
// sorted and the threshold rises with every insertion; for larger k they gather in a buffer that is cut back
// to its k best (std::nth_element) when full, which raises the threshold. Elements are looked at in blocks
// whose largest key is compared with the threshold first, a loop the compiler vectorizes. Chunks of one row
// hand their k best pairs to a merge that keeps the k best of all of them. Values are copied as raw bits.
//
// Threads: the work (rows, or chunks of rows) is cut into units that the calling thread and helpers
// scheduled on XLA's intra-op pool take from one atomic counter. The caller waits only for units that
// some thread has already taken, so it never waits on a helper that has not started (no deadlock when
// every pool thread is busy). Small calls run on the calling thread alone.
//
// Errors: no C++ exception leaves the library. One thrown by a unit of work (on the calling thread or a pool
// thread: std::bad_alloc from a buffer, say) is caught there, the remaining units are skipped, and once every
// unit taken has finished the handler returns it as an FFI error, which XLA raises in Python. Anything thrown
// on the calling thread outside the units is caught by the handler the same way.

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <new>
#include <stdexcept>
#include <string>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#include "cpu_parallel.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

// Below this many input bytes a call runs on the calling thread: scheduling costs more than it saves.
constexpr int64_t kMinParallelBytes = int64_t{1} << 17;
// A thread's share is at least this many input bytes.
constexpr int64_t kMinBytesPerThread = int64_t{1} << 16;
// Units of work per thread, so that uneven units (rows whose large elements come late) even out.
constexpr int64_t kUnitsPerThread = 4;
// A chunk of a long row holds at least this many elements, and at least kChunkPerK * k.
constexpr int64_t kMinChunk = int64_t{1} << 13;
constexpr int64_t kChunkPerK = 16;
// Elements looked at together before the threshold test.
constexpr int64_t kBlock = 32;
// Up to this k the kept pairs stay sorted (an insertion per element that enters); above it they gather in a
// buffer of k + max(k, kMinSlack) pairs that is cut back to the k best when full.
constexpr int64_t kInsertionK = 32;
constexpr int64_t kMinSlack = 64;

// Keys --------------------------------------------------------------------------------------------------------

// The key of a float from its bits U (uint16/32/64): canonical bits, then sign-magnitude to two's complement.
template <typename U, U kInf, U kQuietNaN>
struct FloatKey {
  using Bits = U;
  using Signed = std::make_signed_t<U>;
  static constexpr int kWidth = sizeof(U) * 8;
  static Signed Of(U bits) {
    constexpr U kMagnitude = static_cast<U>(~U{0}) >> 1;
    U magnitude = bits & kMagnitude;
    U canonical = magnitude > kInf ? kQuietNaN : (magnitude == 0 ? U{0} : bits);
    Signed s = static_cast<Signed>(canonical);
    return static_cast<Signed>(s ^ ((s >> (kWidth - 1)) & static_cast<Signed>(kMagnitude)));
  }
};

using F16Key = FloatKey<uint16_t, 0x7c00, 0x7e00>;
using BF16Key = FloatKey<uint16_t, 0x7f80, 0x7fc0>;
using F32Key = FloatKey<uint32_t, 0x7f800000u, 0x7fc00000u>;
using F64Key = FloatKey<uint64_t, 0x7ff0000000000000ull, 0x7ff8000000000000ull>;

// The key of an integer T: itself, an unsigned one of the key's width with its top bit flipped.
template <typename T>
struct IntKey {
  using Bits = T;
  static auto Of(T value) {
    if constexpr (sizeof(T) == 8 && std::is_unsigned_v<T>) {
      return static_cast<int64_t>(value ^ (uint64_t{1} << 63));
    } else if constexpr (sizeof(T) == 8) {
      return static_cast<int64_t>(value);
    } else if constexpr (sizeof(T) == 4 && std::is_unsigned_v<T>) {
      return static_cast<int32_t>(value ^ (uint32_t{1} << 31));
    } else {
      return static_cast<int32_t>(value);
    }
  }
};

// The key every comparison uses: int32 for types of up to 32 bits, int64 for 64-bit types.
template <typename Key>
using KeyOf = std::conditional_t<sizeof(typename Key::Bits) == 8, int64_t, int32_t>;

template <typename K>
struct Pair {
  K key;
  int32_t index;
};

// dmljax's order on pairs: the larger key first, of equal keys the lower index.
template <typename K>
inline bool Before(const Pair<K>& a, const Pair<K>& b) {
  return a.key > b.key || (a.key == b.key && a.index < b.index);
}

// Selection ---------------------------------------------------------------------------------------------------

// The min(k, end - begin) first pairs of row[begin, end), sorted, into out; returns how many.
template <typename Key, bool kLargestFirst>
__attribute__((always_inline)) inline int64_t SelectSegmentBody(const typename Key::Bits* row, int64_t begin,
                                                                int64_t end, int64_t k,
                                                                std::vector<Pair<KeyOf<Key>>>& buffer,
                                                                Pair<KeyOf<Key>>* out) {
  using K = KeyOf<Key>;
  auto key = [](typename Key::Bits bits) -> K {
    K ascending = static_cast<K>(Key::Of(bits));
    return kLargestFirst ? ascending : static_cast<K>(~ascending);
  };
  auto before = [](const Pair<K>& a, const Pair<K>& b) { return Before(a, b); };
  if (k == 1 && end > begin) {
    // The largest key (a vectorized maximum), then the first element that has it.
    K largest = std::numeric_limits<K>::min();
    for (int64_t i = begin; i < end; ++i) largest = std::max(largest, key(row[i]));
    int64_t first = begin;
    while (key(row[first]) != largest) ++first;
    out[0] = {largest, static_cast<int32_t>(first)};
    return 1;
  }
  const int64_t keep = std::min(k, end - begin);
  const bool small = keep <= kInsertionK;
  const int64_t capacity = small ? keep : keep + std::max<int64_t>(keep, kMinSlack);
  buffer.resize(static_cast<size_t>(capacity));
  Pair<K>* kept = buffer.data();
  int64_t count = 0;
  int64_t i = begin;
  for (; i < begin + keep; ++i) kept[count++] = {key(row[i]), static_cast<int32_t>(i)};
  if (small) std::sort(kept, kept + count, before);
  // Every pair kept beats an element whose key is not above the threshold: the element comes later.
  K threshold = std::numeric_limits<K>::min();
  if (count > 0) {
    threshold = kept[0].key;
    for (int64_t j = 1; j < count; ++j) threshold = std::min(threshold, kept[j].key);
  }
  auto offer = [&](K candidate, int64_t index) {
    if (candidate <= threshold) return;
    const Pair<K> pair{candidate, static_cast<int32_t>(index)};
    if (small) {
      // Sorted insertion over the k kept pairs: a later element goes after every pair of its key.
      int64_t at = keep - 1;
      for (; at > 0 && kept[at - 1].key < candidate; --at) kept[at] = kept[at - 1];
      kept[at] = pair;
      threshold = kept[keep - 1].key;
      return;
    }
    kept[count++] = pair;
    if (count == capacity) {
      std::nth_element(kept, kept + keep - 1, kept + count, before);
      count = keep;
      threshold = kept[keep - 1].key;
    }
  };
  for (; i + kBlock <= end; i += kBlock) {
    K keys[kBlock];
    K largest = std::numeric_limits<K>::min();
    for (int64_t j = 0; j < kBlock; ++j) {
      keys[j] = key(row[i + j]);
      largest = std::max(largest, keys[j]);
    }
    if (largest <= threshold) continue;
    for (int64_t j = 0; j < kBlock; ++j) offer(keys[j], i + j);
  }
  for (; i < end; ++i) offer(key(row[i]), i);
  if (!small) {
    if (count > keep) std::nth_element(kept, kept + keep - 1, kept + count, before);
    count = std::min(count, keep);
    std::sort(kept, kept + count, before);
  }
  std::copy(kept, kept + count, out);
  return count;
}

// The same code compiled twice: for the baseline x86-64 (SSE2) and for AVX2, which doubles the width of the
// key-and-maximum loop; the first call on a CPU with AVX2 takes the second.
#if defined(__x86_64__) && defined(__GNUC__)
template <typename Key, bool kLargestFirst>
__attribute__((target("avx2"))) int64_t SelectSegmentAvx2(const typename Key::Bits* row, int64_t begin,
                                                           int64_t end, int64_t k,
                                                           std::vector<Pair<KeyOf<Key>>>& buffer,
                                                           Pair<KeyOf<Key>>* out) {
  return SelectSegmentBody<Key, kLargestFirst>(row, begin, end, k, buffer, out);
}
#endif

template <typename Key, bool kLargestFirst>
int64_t SelectSegment(const typename Key::Bits* row, int64_t begin, int64_t end, int64_t k,
                      std::vector<Pair<KeyOf<Key>>>& buffer, Pair<KeyOf<Key>>* out) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) return SelectSegmentAvx2<Key, kLargestFirst>(row, begin, end, k, buffer, out);
#endif
  return SelectSegmentBody<Key, kLargestFirst>(row, begin, end, k, buffer, out);
}

// The call ----------------------------------------------------------------------------------------------------

struct Shape {
  int64_t rows, n, k;
};

// Scratch: where long rows are cut into chunks (only when there are fewer rows than units, rows < 4 * threads),
// every chunk's k best pairs and their count, rows * chunks * k pairs with rows * chunks < 8 * threads: at most
// 8 * threads * k pairs (16 bytes each for 64-bit keys), from Scratch; and per unit of work a buffer of up to
// 2k + 64 pairs, the row's merge max(chunks * k) pairs, on the heap while the unit runs.
template <typename Key, bool kLargestFirst>
void TopK(ffi::ThreadPool& pool, Scratch& scratch, int64_t threads, const Shape& s, const void* input, void* values,
          int32_t* indices) {
  using Bits = typename Key::Bits;
  using K = KeyOf<Key>;
  const Bits* x = static_cast<const Bits*>(input);
  Bits* out = static_cast<Bits*>(values);
  auto write = [&](int64_t row, const Pair<K>* best) {
    for (int64_t j = 0; j < s.k; ++j) {
      indices[row * s.k + j] = best[j].index;
      std::memcpy(&out[row * s.k + j], &x[row * s.n + best[j].index], sizeof(Bits));
    }
  };
  const int64_t wanted_units = threads * kUnitsPerThread;
  const int64_t chunk_floor = std::max(kMinChunk, kChunkPerK * s.k);
  const int64_t chunks =
      threads > 1 && s.rows < wanted_units
          ? std::max<int64_t>(1, std::min((wanted_units + s.rows - 1) / s.rows, s.n / chunk_floor))
          : 1;
  if (chunks == 1) {
    // Rows in contiguous groups, one group a unit.
    const int64_t groups = threads > 1 ? std::min(s.rows, wanted_units) : 1;
    const int64_t per_group = (s.rows + groups - 1) / groups;
    ParallelFor(pool, threads, groups, [&](int64_t group) {
      std::vector<Pair<K>> buffer, best(static_cast<size_t>(s.k));
      for (int64_t row = group * per_group; row < std::min(s.rows, (group + 1) * per_group); ++row) {
        SelectSegment<Key, kLargestFirst>(x + row * s.n, 0, s.n, s.k, buffer, best.data());
        write(row, best.data());
      }
    });
    return;
  }
  // Long rows: every chunk's k best pairs (indices within the row), then a merge per row.
  const int64_t length = (s.n + chunks - 1) / chunks;
  Pair<K>* candidates = scratch.Allocate<Pair<K>>(static_cast<size_t>(s.rows * chunks * s.k));
  int64_t* found = scratch.Allocate<int64_t>(static_cast<size_t>(s.rows * chunks));
  ParallelFor(pool, threads, s.rows * chunks, [&](int64_t unit) {
    const int64_t row = unit / chunks, chunk = unit % chunks;
    const int64_t begin = std::min(s.n, chunk * length), end = std::min(s.n, begin + length);
    std::vector<Pair<K>> buffer;
    found[unit] = SelectSegment<Key, kLargestFirst>(x + row * s.n, begin, end, s.k, buffer, &candidates[unit * s.k]);
  });
  auto merge = [&](int64_t row) {
    std::vector<Pair<K>> all;
    all.reserve(static_cast<size_t>(chunks * s.k));
    for (int64_t chunk = 0; chunk < chunks; ++chunk) {
      const Pair<K>* first = &candidates[(row * chunks + chunk) * s.k];
      all.insert(all.end(), first, first + found[row * chunks + chunk]);
    }
    auto before = [](const Pair<K>& a, const Pair<K>& b) { return Before(a, b); };
    std::partial_sort(all.begin(), all.begin() + s.k, all.end(), before);
    write(row, all.data());
  };
  ParallelFor(pool, s.rows * chunks * s.k >= (int64_t{1} << 14) ? threads : 1, s.rows, merge);
}

template <typename Key>
void Dispatch(ffi::ThreadPool& pool, Scratch& scratch, int64_t threads, const Shape& s, bool largest_first,
              const void* input, void* values, int32_t* indices) {
  if (largest_first) {
    TopK<Key, true>(pool, scratch, threads, s, input, values, indices);
  } else {
    TopK<Key, false>(pool, scratch, threads, s, input, values, indices);
  }
}

ffi::Error CheckedTopK(ffi::ThreadPool& pool, ffi::ScratchAllocator& allocator, ffi::AnyBuffer& input,
                       ffi::Result<ffi::AnyBuffer>& values, ffi::Result<ffi::Buffer<ffi::S32>>& indices, int64_t k,
                       bool largest_first) {
  // The caller (dmljax's strategy) has validated shapes and types at trace time; these checks only keep a
  // call made any other way from reading or writing outside its buffers.
  auto in_dims = input.dimensions();
  auto value_dims = values->dimensions();
  auto index_dims = indices->dimensions();
  if (in_dims.size() != 2 || value_dims.size() != 2 || index_dims.size() != 2) {
    return ffi::Error::InvalidArgument("dmljax_cpu_top_k: operands must be matrices (rows, n)");
  }
  const Shape s{in_dims[0], in_dims[1], k};
  if (s.rows < 0 || s.n < 1 || s.n > std::numeric_limits<int32_t>::max() || k < 1 || k > s.n) {
    return ffi::Error::InvalidArgument("dmljax_cpu_top_k: need 1 <= k <= n <= 2**31 - 1");
  }
  if (value_dims[0] != s.rows || value_dims[1] != k || index_dims[0] != s.rows || index_dims[1] != k) {
    return ffi::Error::InvalidArgument("dmljax_cpu_top_k: outputs must be (rows, k)");
  }
  if (values->element_type() != input.element_type()) {
    return ffi::Error::InvalidArgument("dmljax_cpu_top_k: values must have the input's type");
  }
  const int64_t width = static_cast<int64_t>(ffi::ByteWidth(input.element_type()));
  if (static_cast<int64_t>(input.size_bytes()) != s.rows * s.n * width ||
      static_cast<int64_t>(values->size_bytes()) != s.rows * k * width ||
      static_cast<int64_t>(indices->size_bytes()) != s.rows * k * 4) {
    return ffi::Error::InvalidArgument("dmljax_cpu_top_k: buffer sizes do not match the shapes");
  }
  if (s.rows == 0) return ffi::Error::Success();
  const int64_t bytes = s.rows * s.n * width;
  int64_t threads = 1;
  if (bytes >= kMinParallelBytes) {
    threads = std::max<int64_t>(1, std::min(pool.num_threads(), bytes / kMinBytesPerThread));
  }
  const void* in = input.untyped_data();
  void* out = values->untyped_data();
  int32_t* idx = indices->typed_data();
  Scratch scratch(allocator);
  switch (input.element_type()) {
    case ffi::DataType::F32: Dispatch<F32Key>(pool, scratch, threads, s, largest_first, in, out, idx); break;
    case ffi::DataType::F16: Dispatch<F16Key>(pool, scratch, threads, s, largest_first, in, out, idx); break;
    case ffi::DataType::BF16: Dispatch<BF16Key>(pool, scratch, threads, s, largest_first, in, out, idx); break;
    case ffi::DataType::F64: Dispatch<F64Key>(pool, scratch, threads, s, largest_first, in, out, idx); break;
    case ffi::DataType::S8: Dispatch<IntKey<int8_t>>(pool, scratch, threads, s, largest_first, in, out, idx); break;
    case ffi::DataType::S16: Dispatch<IntKey<int16_t>>(pool, scratch, threads, s, largest_first, in, out, idx); break;
    case ffi::DataType::S32: Dispatch<IntKey<int32_t>>(pool, scratch, threads, s, largest_first, in, out, idx); break;
    case ffi::DataType::S64: Dispatch<IntKey<int64_t>>(pool, scratch, threads, s, largest_first, in, out, idx); break;
    case ffi::DataType::U8: Dispatch<IntKey<uint8_t>>(pool, scratch, threads, s, largest_first, in, out, idx); break;
    case ffi::DataType::U16: Dispatch<IntKey<uint16_t>>(pool, scratch, threads, s, largest_first, in, out, idx); break;
    case ffi::DataType::U32: Dispatch<IntKey<uint32_t>>(pool, scratch, threads, s, largest_first, in, out, idx); break;
    case ffi::DataType::U64: Dispatch<IntKey<uint64_t>>(pool, scratch, threads, s, largest_first, in, out, idx); break;
    default:
      return ffi::Error::InvalidArgument("dmljax_cpu_top_k: unsupported element type");
  }
  return ffi::Error::Success();
}

// The FFI entry point: CheckedTopK, with every C++ exception turned into an FFI error (XLA raises it in Python).
ffi::Error TopKHandler(ffi::ThreadPool pool, ffi::ScratchAllocator scratch, ffi::AnyBuffer input,
                       ffi::Result<ffi::AnyBuffer> values, ffi::Result<ffi::Buffer<ffi::S32>> indices, int64_t k,
                       bool largest_first) {
  return Guarded("dmljax_cpu_top_k", "selection",
                 [&] { return CheckedTopK(pool, scratch, input, values, indices, k, largest_first); });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(DmljaxCpuTopK, TopKHandler,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Ctx<ffi::ScratchAllocator>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::Buffer<ffi::S32>>()
                                  .Attr<int64_t>("k")
                                  .Attr<bool>("largest_first"));

// The version of this library's calling convention, which the Python side checks before registering its handlers
// (3: the library holds DmljaxCpuReduceExtreme, csrc/cpu_reduce_extreme.cc, as well; 4: both handlers take XLA's
// scratch allocator, and the REDUCE kernel's scratch is bounded by the thread count, as the docs now say; 5: the
// library holds DmljaxCpuArgExtreme, csrc/cpu_arg_extreme.cc, as well).
extern "C" __attribute__((visibility("default"))) int32_t DmljaxCpuTopKAbiVersion() { return 6; }

// The XLA FFI API version of the headers this library was compiled against (major * 1000 + minor), which
// the Python side compares with the running jaxlib's before registering the handler.
extern "C" __attribute__((visibility("default"))) int32_t DmljaxCpuTopKFfiApiVersion() {
  return XLA_FFI_API_MAJOR * 1000 + XLA_FFI_API_MINOR;
}
