// dmljax's sampling filters on CPU, as XLA FFI handlers: the whole-row search and the kept entries of a cut.
//
// Both work on rows of logits in dmljax's order (descending value, ties by ascending index, NaN dropped: read as
// -inf), through the order key dmljax/_src/rank_keys.py's unsigned_ascending_key gives a NaN-free row: the bits
// of a float as sign and magnitude turned into two's complement (-0.0 as +0.0), its top bit flipped, 32 bits wide
// for types of up to 32 bits and 64 for float64. A prefix of a row in that order is held as its cut (t, j): the
// entries whose key is above t, and those equal to t of index at most j (dmljax/_src/sampling/search.py).
//
// DmljaxCpuSamplingCut: per row, the shortest prefix that holds k entries (top-k), or whose probability mass
// reaches p of the mass of the entries of the row or of its top-k prefix (top-p), or both in that order, and the
// mass it was measured against. The mass is exact (dmljax/_src/sampling/mass.py): the weights w = exp(z) come in
// as XLA computed them (float32, float64 for float64 logits), each counts floor(w * 2**F) units, summed here as
// exact integers (64 bits where a row's sums fit them, else 128), and a prefix of K units reaches p of T when K >= 1
// and K * 2**24 >= pi * T, pi = ceil(p * 2**24). So the cut is the one XLA's bisection finds (the same entries,
// compared in the same integers), found here by a radix selection over the keys: the entries are counted (or their
// units summed) by the top bits of their key, the bucket where the running sum from the top first reaches the
// target is kept, and the entries in it are counted again by the next bits, until the key t is known; then the
// entries equal to t, in ascending index order, until the target is reached at index j. One pass over the row, then
// passes over ever fewer entries.
//
// DmljaxCpuSamplingKept: per row, the indices of the entries through a cut that are not NaN, in ascending order,
// and how many there are (the rest of the row of indices is 0): what sample's draw over a whole row races over.
//
// Rows are spread over XLA's intra-op pool (csrc/cpu_parallel.h); a call of fewer rows than the pool's threads (one
// row, from the per-row loops) spreads each row's passes over it in parts instead.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "cpu_parallel.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

using U128 = unsigned __int128;

// Keys ---------------------------------------------------------------------------------------------------------

// A float type's bits U and the key of its values, NaN read as -inf. Digit: the key as an unsigned integer of the
// type's own width (the radix selection's digits); Key: the library's key, 32 bits for types of up to 32 bits.
template <typename U, U kInf>
struct Float {
  using Bits = U;
  using Digit = U;
  using Key = std::conditional_t<sizeof(U) == 8, uint64_t, uint32_t>;
  static constexpr int kWidth = sizeof(U) * 8;
  static constexpr U kMagnitude = static_cast<U>(~U{0}) >> 1;
  static constexpr U kSign = static_cast<U>(U{1} << (kWidth - 1));

  static bool IsNaN(U bits) { return (bits & kMagnitude) > kInf; }

  // sign and magnitude to two's complement, then the top bit flipped: -inf is the smallest, +inf the largest.
  // Without branches (a row's signs are as good as random: a branch on them mispredicts every other entry).
  static Digit DigitOf(U bits) {
    const U magnitude = bits & kMagnitude;
    const U nan = static_cast<U>(U{0} - static_cast<U>(magnitude > kInf));  // every bit set for a NaN
    const U clean = static_cast<U>((magnitude & static_cast<U>(~nan)) | (kInf & nan));  // NaN as -inf
    const U negative = static_cast<U>(U{0} - static_cast<U>(((bits >> (kWidth - 1)) | nan) & 1));
    const U twos = static_cast<U>(static_cast<U>(clean ^ negative) - negative);  // -clean where negative
    return static_cast<U>(twos ^ kSign);
  }

  // The library's key of a digit: the same two's complement value, widened to Key, its top bit flipped.
  static Key KeyOf(Digit digit) {
    using Signed = std::make_signed_t<U>;
    using WideSigned = std::make_signed_t<Key>;
    const auto value = static_cast<WideSigned>(static_cast<Signed>(static_cast<U>(digit ^ kSign)));
    return static_cast<Key>(static_cast<Key>(value) ^ (Key{1} << (sizeof(Key) * 8 - 1)));
  }
};

using F16 = Float<uint16_t, 0x7c00>;
using BF16 = Float<uint16_t, 0x7f80>;
using F32 = Float<uint32_t, 0x7f800000u>;
using F64 = Float<uint64_t, 0x7ff0000000000000ull>;

// Units -------------------------------------------------------------------------------------------------------

// floor(w * 2**F) of a float32 weight, exactly, from its bits alone: a normal weight of exponent field e and
// significand m (24 bits, its leading one included) is m * 2**s units, s = e - 150 + F, computed as (m << 39) >>
// (39 - s), one shift the compiler vectorizes (AVX2 shifts each lane by its own count; a float's conversion to a
// 64-bit integer does not vectorize). A weight counts none where it is negative, subnormal (m * 2**s < 1 for F <=
// 96), infinite or NaN, or where its units reach 2**63 (s > 39); the weights a row has lie in [0, 1] (F <= 55 keeps
// their units below 2**56). Without branches: a row's weights straddle the few that count much and the many that
// count little.
__attribute__((always_inline)) inline uint64_t UnitsOf(uint32_t bits, int fraction_bits) {
  const uint32_t e = bits >> 23;  // the sign bit too: a negative weight's e is 256 or more
  const int32_t right = 189 - fraction_bits - static_cast<int32_t>(e);  // 39 - s
  const uint64_t m = static_cast<uint64_t>((bits & 0x7fffffu) | 0x800000u) << 39;
  const uint64_t value = m >> std::min(static_cast<uint32_t>(right), 63u);
  const bool counts = (e - 1u < 254u) & (right >= 0);
  return value & (uint64_t{0} - static_cast<uint64_t>(counts));
}

__attribute__((always_inline)) inline void UnitsBody(const uint32_t* __restrict__ w, int64_t count, int fraction_bits,
                                                     uint64_t* __restrict__ units) {
  for (int64_t i = 0; i < count; ++i) units[i] = UnitsOf(w[i], fraction_bits);
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) void UnitsAvx2(const uint32_t* w, int64_t count, int fraction_bits, uint64_t* units) {
  UnitsBody(w, count, fraction_bits, units);
}
#endif

// The units of w[0, count) into units[0, count), built for the x86-64 baseline and for AVX2; the first call on a CPU
// with AVX2 takes the second.
void UnitsOf(const uint32_t* w, int64_t count, int fraction_bits, uint64_t* units) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) return UnitsAvx2(w, count, fraction_bits, units);
#endif
  UnitsBody(w, count, fraction_bits, units);
}

// floor(w * 2**F) of a non-negative float64 weight, exactly (a subnormal or zero weight counts none: w * 2**F < 1).
inline U128 UnitsOf(double w, int fraction_bits) {
  uint64_t bits;
  std::memcpy(&bits, &w, sizeof bits);
  const int exponent = static_cast<int>((bits >> 52) & 0x7ff);
  if (exponent == 0 || exponent == 0x7ff || (bits >> 63) != 0) return 0;
  const uint64_t mantissa = (bits & 0xfffffffffffffull) | (uint64_t{1} << 52);
  const int shift = exponent - 1075 + fraction_bits;
  if (shift >= 0) return static_cast<U128>(mantissa) << shift;
  return shift <= -53 ? 0 : static_cast<U128>(mantissa >> -shift);
}

// What a prefix of K units must hold to reach p of T units: K >= 1 and K * 2**24 >= pi * T, i.e. K >= max(1,
// ceil(pi * T / 2**24)), computed without the product's overflow (pi * T may pass 2**128; pi <= 2**24).
inline U128 MassNeed(U128 total, uint32_t pi) {
  const U128 high = total >> 24, low = total & ((U128{1} << 24) - 1);
  const U128 need = high * pi + ((low * pi + ((U128{1} << 24) - 1)) >> 24);
  return need == 0 ? 1 : need;
}

// Compaction ---------------------------------------------------------------------------------------------------

// Writes to out, in ascending order, every i in [begin, end) where take(i) holds (take: 0 or 1, computed without
// branches, from the entry alone: a test of i would keep it from vectorizing), and returns how many. out must have
// room for end - begin indices: every index is stored, then kept by advancing the count (no branch on take, which a
// row's entries would mispredict), so the store of entry i is at most at out[i - begin]. Blocks of kBlock entries
// where none holds are skipped after a test the compiler vectorizes: a search keeps the few entries of one bucket,
// a draw the few of a nucleus.
template <typename Take>
int64_t Compact(int64_t begin, int64_t end, Take take, int32_t* out) {
  constexpr int64_t kBlock = 16;
  int64_t count = 0;
  uint32_t taken[kBlock];
  for (int64_t start = begin; start < end; start += kBlock) {
    const int64_t size = std::min(end - start, kBlock);
    uint32_t any = 0;
    for (int64_t i = 0; i < size; ++i) {
      taken[i] = take(start + i);
      any |= taken[i];
    }
    if (any == 0) continue;
    for (int64_t i = 0; i < size; ++i) {
      out[count] = static_cast<int32_t>(start + i);
      count += taken[i];
    }
  }
  return count;
}

// Parts of a row ----------------------------------------------------------------------------------------------

// How a row's passes are cut: `count` consecutive parts, run on XLA's pool where the call's rows are fewer than its
// threads (a batch of one row is the common call: the per-row loops hand the kernels one row at a time), else one
// part on the thread that runs the row.
struct Parts {
  ffi::ThreadPool* pool;
  int64_t count;

  static constexpr int64_t kMinLength = 1 << 15;  // shorter parts cost more to hand out than they save

  static Parts For(ffi::ThreadPool& pool, int64_t rows, int64_t n) {
    const int64_t threads = std::max<int64_t>(1, pool.num_threads());
    if (rows >= threads) return {&pool, 1};
    return {&pool, std::clamp<int64_t>(n / kMinLength, 1, threads)};
  }

  int64_t Begin(int64_t part, int64_t n) const { return n * part / count; }

  template <typename Body>
  void Run(Body body) const {
    if (count == 1) return body(0);
    ParallelFor(*pool, count, count, body);
  }

  // The lists the parts compacted, part p's found[p] indices at out + Begin(p, n), moved together in part order to
  // the front of out; returns how many.
  int64_t Join(const std::vector<int64_t>& found, int64_t n, int32_t* out) const {
    int64_t total = 0;
    for (int64_t part = 0; part < count; ++part) {
      const int64_t begin = Begin(part, n), here = found[static_cast<size_t>(part)];
      if (begin != total) std::memmove(out + total, out + begin, static_cast<size_t>(here) * sizeof(int32_t));
      total += here;
    }
    return total;
  }

  // row(r) for each of a call's rows: one after another where each row's passes run in parts, else spread over the
  // pool.
  template <typename Body>
  void EachRow(int64_t rows, Body row) const {
    if (count == 1) return ParallelFor(*pool, std::min<int64_t>(pool->num_threads(), rows), rows, row);
    for (int64_t r = 0; r < rows; ++r) row(r);
  }
};

// Scratch -----------------------------------------------------------------------------------------------------

// n elements of T for one call's passes over a row, from a buffer the calling thread keeps from call to call (the
// caller passes its thread_local vector) for rows of up to kKeptLength entries, else of the call's own. A buffer
// allocated afresh for every call paid for its pages every time: the allocator hands a large freed block back to the
// system, and the next call faults its pages in again (a third of the time of a 128,256-entry row's cut). A thread
// keeps at most 4 bytes per entry of such a row (1 MiB); the caller's thread waits for the pool's threads without
// running other work, so no other call shares its buffers.
template <typename T>
class RowScratch {
 public:
  static constexpr size_t kKeptLength = size_t{1} << 18;

  RowScratch(std::vector<T>& kept, size_t n) {
    std::vector<T>& use = n <= kKeptLength ? kept : own_;
    if (use.size() < n) use.resize(n);
    data_ = use.data();
  }
  T* data() const { return data_; }

 private:
  std::vector<T> own_;
  T* data_ = nullptr;
};

// The search ---------------------------------------------------------------------------------------------------

template <typename T>
struct Cut {
  T t;
  int64_t j;
};

// A row's digits, computed where a pass reads them: one at a time (the passes over a bucket's few members), or a
// block at a time into a buffer the first-level cache holds (the passes over the whole row: a loop the compiler
// vectorizes). A row-long array of them, written in a pass of its own, cost more in memory traffic than computing
// them again.
template <typename Type>
struct RowDigits {
  using Digit = typename Type::Digit;
  const typename Type::Bits* x;

  Digit operator()(int64_t i) const { return Type::DigitOf(x[i]); }
  void Block(int64_t begin, int64_t end, Digit* __restrict__ out) const {
    for (int64_t i = begin; i < end; ++i) out[i - begin] = Type::DigitOf(x[i]);
  }
};

// What a search measures: measure(i, digit) of entry i; Block the measures of a block of entries from their digits,
// where kBlocks (each below 2**bits, so that a part's sums fit 64 bits where bits + log2(n) <= 64).
template <typename Digit>
struct CountOne {  // top-k: every entry counts 1
  static constexpr bool kBlocks = true;
  int bits = 1;
  U128 operator()(int64_t, Digit) const { return 1; }
  void Block(int64_t begin, int64_t end, const Digit*, uint64_t* out) const { std::fill(out, out + (end - begin), 1); }
};

template <typename Digit, typename Weight>
struct CutUnits {  // top-p: an entry's units, where it lies in the prior cut (top-k's prefix, or the whole row)
  static constexpr bool kBlocks = std::is_same_v<Weight, float>;
  const Weight* w;
  int fraction_bits;
  Cut<Digit> prior;
  // A weight of at most 1 (every weight: w = exp(z), z <= 0) counts at most 2**F units.
  int bits = kBlocks ? fraction_bits + 1 : 128;

  bool In(int64_t i, Digit d) const { return (d > prior.t) | ((d == prior.t) & (i <= prior.j)); }
  U128 operator()(int64_t i, Digit d) const {
    if constexpr (kBlocks) {
      uint32_t weight_bits;
      std::memcpy(&weight_bits, w + i, sizeof weight_bits);
      return UnitsOf(weight_bits, fraction_bits) & (uint64_t{0} - static_cast<uint64_t>(In(i, d)));
    } else {
      return In(i, d) ? UnitsOf(w[i], fraction_bits) : U128{0};
    }
  }
  void Block(int64_t begin, int64_t end, const Digit* digits, uint64_t* out) const {
    UnitsOf(reinterpret_cast<const uint32_t*>(w) + begin, end - begin, fraction_bits, out);
    // In(i, d) is d >= t through index j and d > t after it: two loops without a test of i, which vectorize (none
    // where every entry is in, the whole row's cut: every digit is at least 0).
    const int64_t split = std::clamp<int64_t>(prior.j + 1, begin, end);
    if (prior.t != 0) {
      for (int64_t i = begin; i < split; ++i) {
        out[i - begin] &= uint64_t{0} - static_cast<uint64_t>(digits[i - begin] >= prior.t);
      }
    }
    for (int64_t i = split; i < end; ++i) {
      out[i - begin] &= uint64_t{0} - static_cast<uint64_t>(digits[i - begin] > prior.t);
    }
  }
};

// The cut (a digit and an index) of the shortest prefix of the entries whose measure reaches need(total), total
// being the measure of them all (need(total) <= total): digit(i) is entry i's digit, measure(i, digit) its count or
// units, 0 for an entry outside the set measured. Counts by the top kFirst bits of the digits over the whole row
// (its parts summed apart, then together: the sums are exact), then kNext bits at a time over the entries of the
// chosen bucket (members: room for n); returns the total too.
template <typename Digit, typename Digits, typename Measure, typename Need>
Cut<Digit> Select(const Parts& parts, int64_t n, const Digits& digit, const Measure& measure, Need need_of,
                  U128* total, int32_t* members) {
  int n_bits = 0;
  while (n_bits < 63 && (int64_t{1} << n_bits) <= n) ++n_bits;
  const bool narrow = Measure::kBlocks && measure.bits + n_bits <= 64;  // a part's sums fit 64 bits
  constexpr int kWidth = sizeof(Digit) * 8;
  constexpr int kFirst = kWidth >= 32 ? 11 : 8;
  constexpr int kNext = 8;
  U128 above = 0;  // the measure of the entries above the bucket searched
  U128 need = 0;
  Digit prefix = 0;  // the top `decided` bits of the threshold
  int decided = 0;
  std::vector<U128> sums;
  std::vector<std::vector<U128>> part_sums(static_cast<size_t>(parts.count));
  std::vector<int64_t> part_members(static_cast<size_t>(parts.count));
  int64_t count = 0;  // members[0, count): the entries of the bucket searched
  while (decided < kWidth) {
    const int width = std::min(decided == 0 ? kFirst : kNext, kWidth - decided);
    const int shift = kWidth - decided - width;
    const size_t buckets = size_t{1} << width;
    const uint64_t mask = (uint64_t{1} << width) - 1;
    sums.assign(buckets, 0);
    if (decided == 0) {
      parts.Run([&, shift, mask](int64_t part) {
        std::vector<U128>& local = part_sums[static_cast<size_t>(part)];
        local.assign(buckets, 0);
        U128* const counts = local.data();  // (not read through the vector: its stores would reload it)
        const int64_t begin = parts.Begin(part, n), end = parts.Begin(part + 1, n);
        if constexpr (Measure::kBlocks) {
          if (narrow) {
            // Blocks of digits and measures (vectorized loops), counted in kLanes histograms, entry i in lane
            // i % kLanes: consecutive entries often share a bucket (a row's keys crowd a few exponents), and each
            // add would wait for the last one's store.
            constexpr int64_t kBlock = 256, kLanes = 4;
            Digit block_digits[kBlock];
            uint64_t block_measures[kBlock];
            std::vector<uint64_t> lanes(static_cast<size_t>(kLanes) * buckets, 0);
            uint64_t* const lane = lanes.data();
            for (int64_t start = begin; start < end; start += kBlock) {
              const int64_t stop = std::min(end, start + kBlock), size = stop - start;
              digit.Block(start, stop, block_digits);
              measure.Block(start, stop, block_digits, block_measures);
              for (int64_t i = 0; i < size; ++i) {
                lane[static_cast<size_t>(i % kLanes) * buckets + ((block_digits[i] >> shift) & mask)] +=
                    block_measures[i];
              }
            }
            for (size_t b = 0; b < buckets; ++b) {
              for (int64_t l = 0; l < kLanes; ++l) counts[b] += lane[static_cast<size_t>(l) * buckets + b];
            }
            return;
          }
        }
        for (int64_t i = begin; i < end; ++i) {
          const Digit d = digit(i);
          counts[static_cast<size_t>((d >> shift) & mask)] += measure(i, d);
        }
      });
      for (const std::vector<U128>& local : part_sums) {
        for (size_t b = 0; b < buckets; ++b) sums[b] += local[b];
      }
      U128 all = 0;
      for (const U128 sum : sums) all += sum;
      *total = all;
      need = need_of(all);
    } else {
      for (int64_t m = 0; m < count; ++m) {
        const int32_t i = members[m];
        const Digit d = digit(i);
        sums[static_cast<size_t>((d >> shift) & mask)] += measure(i, d);
      }
    }
    size_t chosen = buckets - 1;
    while (chosen > 0 && above + sums[chosen] < need) above += sums[chosen--];
    prefix = static_cast<Digit>(prefix | (static_cast<Digit>(chosen) << shift));
    const Digit high = static_cast<Digit>(prefix >> shift);
    if (decided == 0) {
      // Each part compacts its members into its own span of members, then the spans are moved together in order.
      parts.Run([&, shift, high](int64_t part) {
        const int64_t begin = parts.Begin(part, n), end = parts.Begin(part + 1, n);
        const auto member = [&](int64_t i) {
          return static_cast<uint32_t>(static_cast<Digit>(digit(i) >> shift) == high);
        };
        part_members[static_cast<size_t>(part)] = Compact(begin, end, member, members + begin);
      });
      count = parts.Join(part_members, n, members);
    } else {
      int64_t out = 0;
      for (int64_t m = 0; m < count; ++m) {
        const int32_t i = members[m];
        if (static_cast<Digit>(digit(i) >> shift) == high) members[out++] = i;
      }
      count = out;
    }
    decided += width;
  }
  // Every member now equals the threshold: the prefix takes them in ascending index order until it reaches.
  for (int64_t m = 0; m < count; ++m) {
    above += measure(members[m], prefix);
    if (above >= need) return {prefix, members[m]};
  }
  return {prefix, count == 0 ? n - 1 : members[count - 1]};
}

struct Row {
  int64_t n;
  int32_t k;
  uint32_t pi;
  int32_t what;  // bit 0: top-k's prefix is searched; bit 1: top-p's
};

constexpr int32_t kCount = 1, kMass = 2;

// One row's cut and the mass top-p measured (its top-k prefix's, or the row's; 0 where top-p is not searched).
template <typename Type, typename Weight>
void CutRow(const Parts& parts, const typename Type::Bits* x, const Weight* w, const Row& row, int fraction_bits,
            typename Type::Key* t_out, int32_t* j_out, U128* total) {
  using Digit = typename Type::Digit;
  thread_local std::vector<int32_t> kept_members;
  const RowScratch<int32_t> members(kept_members, static_cast<size_t>(row.n));
  const RowDigits<Type> digit{x};
  Cut<Digit> cut{0, row.n - 1};  // every entry: every digit is at least 0
  *total = 0;
  if (row.what & kCount) {
    U128 count = 0;
    const auto need = [&](U128) { return static_cast<U128>(row.k); };
    cut = Select<Digit>(parts, row.n, digit, CountOne<Digit>{}, need, &count, members.data());
  }
  if ((row.what & kMass) && w != nullptr) {
    const CutUnits<Digit, Weight> units{w, fraction_bits, cut};
    const auto need = [&](U128 all) { return MassNeed(all, row.pi); };
    cut = Select<Digit>(parts, row.n, digit, units, need, total, members.data());
  }
  *t_out = Type::KeyOf(cut.t);
  *j_out = static_cast<int32_t>(cut.j);
}

// One row's kept entries: each part compacts its indices into its own span of the output, then the spans are moved
// together in order.
template <typename Type>
void KeptRow(const Parts& parts, const typename Type::Bits* x, int64_t n, typename Type::Key t, int32_t j,
             int32_t* indices, int32_t* count) {
  // Compared as the library's keys, not as digits: a cut's t need not be the key of any value of a narrow type
  // (the whole row's cut is t = 0, below the widened key of every 16-bit value).
  const auto in = [&](int64_t i, bool through) {
    const typename Type::Key key = Type::KeyOf(Type::DigitOf(x[i]));
    return (static_cast<uint32_t>(key > t) | (static_cast<uint32_t>(key == t) & static_cast<uint32_t>(through))) &
           static_cast<uint32_t>(!Type::IsNaN(x[i]));
  };
  const int64_t split = std::clamp<int64_t>(int64_t{j} + 1, 0, n);  // through index j, the entries of key t are in
  std::vector<int64_t> found(static_cast<size_t>(parts.count), 0);
  parts.Run([&](int64_t part) {
    const int64_t begin = parts.Begin(part, n), end = parts.Begin(part + 1, n);
    int64_t& here = found[static_cast<size_t>(part)];
    // Each store lies within the part's own span of indices (Compact stores entry i at most at its place).
    const int64_t middle = std::clamp(split, begin, end);
    here = Compact(begin, middle, [&](int64_t i) { return in(i, true); }, indices + begin);
    here += Compact(middle, end, [&](int64_t i) { return in(i, false); }, indices + begin + here);
  });
  const int64_t total = parts.Join(found, n, indices);
  std::fill(indices + total, indices + n, 0);
  *count = static_cast<int32_t>(total);
}

// The calls ----------------------------------------------------------------------------------------------------

ffi::Error Invalid(const std::string& what) { return ffi::Error::InvalidArgument("dmljax_cpu_sampling: " + what); }

template <typename Type, typename Weight>
void CutRows(ffi::ThreadPool& pool, int64_t rows, int64_t n, const void* logits, const void* weights,
             const int32_t* k, const int32_t* pi, const int32_t* what, int fraction_bits, int limb_bits,
             int64_t limbs, void* t, int32_t* j, int32_t* total) {
  const auto* x = static_cast<const typename Type::Bits*>(logits);
  const auto* w = static_cast<const Weight*>(weights);
  auto* t_out = static_cast<typename Type::Key*>(t);
  const Parts parts = Parts::For(pool, rows, n);
  const auto cut = [&](int64_t r) {
    const Row row{n, k[r], static_cast<uint32_t>(pi[r]), what[r]};
    U128 sum = 0;
    CutRow<Type, Weight>(parts, x + r * n, w == nullptr ? nullptr : w + r * n, row, fraction_bits, &t_out[r], &j[r],
                         &sum);
    const U128 mask = (U128{1} << limb_bits) - 1;
    for (int64_t l = 0; l < limbs; ++l) total[r * limbs + l] = static_cast<int32_t>((sum >> (limb_bits * l)) & mask);
  };
  parts.EachRow(rows, cut);
}

template <typename Type>
ffi::Error CutTyped(ffi::ThreadPool& pool, int64_t rows, int64_t n, ffi::AnyBuffer& logits, ffi::AnyBuffer& weights,
                    const int32_t* k, const int32_t* pi, const int32_t* what, int fraction_bits, int limb_bits,
                    int64_t limbs, void* t, int32_t* j, int32_t* total) {
  const void* w = weights.size_bytes() == 0 ? nullptr : weights.untyped_data();
  if (w != nullptr && weights.element_type() == ffi::DataType::F32) {
    CutRows<Type, float>(pool, rows, n, logits.untyped_data(), w, k, pi, what, fraction_bits, limb_bits, limbs, t, j,
                         total);
  } else if (w != nullptr && weights.element_type() == ffi::DataType::F64) {
    CutRows<Type, double>(pool, rows, n, logits.untyped_data(), w, k, pi, what, fraction_bits, limb_bits, limbs, t, j,
                          total);
  } else if (w == nullptr) {
    CutRows<Type, float>(pool, rows, n, logits.untyped_data(), nullptr, k, pi, what, fraction_bits, limb_bits, limbs,
                         t, j, total);
  } else {
    return Invalid("weights must be float32 or float64");
  }
  return ffi::Error::Success();
}

ffi::Error CheckedCut(ffi::ThreadPool& pool, ffi::AnyBuffer& logits, ffi::AnyBuffer& weights,
                      ffi::Buffer<ffi::S32>& k, ffi::Buffer<ffi::S32>& pi, ffi::Buffer<ffi::S32>& what,
                      ffi::Result<ffi::AnyBuffer>& t, ffi::Result<ffi::Buffer<ffi::S32>>& j,
                      ffi::Result<ffi::Buffer<ffi::S32>>& total, int64_t fraction_bits, int64_t limb_bits) {
  // dmljax validates shapes and types at trace time; these checks only keep a call made any other way from reading
  // or writing outside its buffers.
  const auto dims = logits.dimensions();
  if (dims.size() != 2) return Invalid("logits must be a matrix (rows, n)");
  const int64_t rows = dims[0], n = dims[1];
  if (n < 1 || n > std::numeric_limits<int32_t>::max()) return Invalid("need 1 <= n <= 2**31 - 1");
  const auto total_dims = total->dimensions();
  if (total_dims.size() != 2 || total_dims[0] != rows) return Invalid("total must be (rows, limbs)");
  const int64_t limbs = total_dims[1];
  const auto weight_dims = weights.dimensions();
  const bool has_weights = weights.size_bytes() != 0;
  if (has_weights && (weight_dims.size() != 2 || weight_dims[0] != rows || weight_dims[1] != n)) {
    return Invalid("weights must be (rows, n), or empty");
  }
  if (static_cast<int64_t>(k.element_count()) != rows || static_cast<int64_t>(pi.element_count()) != rows ||
      static_cast<int64_t>(what.element_count()) != rows || static_cast<int64_t>(j->element_count()) != rows ||
      static_cast<int64_t>(t->element_count()) != rows) {
    return Invalid("per-row operands must hold one value per row");
  }
  if (fraction_bits < 1 || fraction_bits > 96 || limb_bits < 1 || limb_bits > 24 || limb_bits * limbs > 127) {
    return Invalid("fraction_bits, limb_bits or the limbs are out of range");
  }
  if (rows == 0) return ffi::Error::Success();
  const auto type = logits.element_type();
  const bool wide = type == ffi::DataType::F64;
  if (t->element_type() != (wide ? ffi::DataType::U64 : ffi::DataType::U32)) {
    return Invalid("t must be uint64 for float64 logits, uint32 otherwise");
  }
  const int32_t* kk = k.typed_data();
  const int32_t* pp = pi.typed_data();
  const int32_t* ww = what.typed_data();
  for (int64_t r = 0; r < rows; ++r) {
    if ((ww[r] & kCount) && (kk[r] < 1 || kk[r] > n)) return Invalid("a searched k must be in [1, n]");
    if ((ww[r] & kMass) && (!has_weights || pp[r] < 0 || pp[r] > (1 << 24))) {
      return Invalid("a searched top-p needs weights and 0 <= pi <= 2**24");
    }
  }
  const int fb = static_cast<int>(fraction_bits), lb = static_cast<int>(limb_bits);
  void* tt = t->untyped_data();
  int32_t* jj = j->typed_data();
  int32_t* sums = total->typed_data();
  switch (type) {
    case ffi::DataType::F32: return CutTyped<F32>(pool, rows, n, logits, weights, kk, pp, ww, fb, lb, limbs, tt, jj, sums);
    case ffi::DataType::F16: return CutTyped<F16>(pool, rows, n, logits, weights, kk, pp, ww, fb, lb, limbs, tt, jj, sums);
    case ffi::DataType::BF16:
      return CutTyped<BF16>(pool, rows, n, logits, weights, kk, pp, ww, fb, lb, limbs, tt, jj, sums);
    case ffi::DataType::F64: return CutTyped<F64>(pool, rows, n, logits, weights, kk, pp, ww, fb, lb, limbs, tt, jj, sums);
    default: return Invalid("logits must be float16, bfloat16, float32 or float64");
  }
}

template <typename Type>
void KeptRows(ffi::ThreadPool& pool, int64_t rows, int64_t n, const void* logits, const void* t, const int32_t* j,
              int32_t* indices, int32_t* count) {
  const auto* x = static_cast<const typename Type::Bits*>(logits);
  const auto* tt = static_cast<const typename Type::Key*>(t);
  const Parts parts = Parts::For(pool, rows, n);
  const auto kept = [&](int64_t r) { KeptRow<Type>(parts, x + r * n, n, tt[r], j[r], indices + r * n, count + r); };
  parts.EachRow(rows, kept);
}

ffi::Error CheckedKept(ffi::ThreadPool& pool, ffi::AnyBuffer& logits, ffi::AnyBuffer& t, ffi::Buffer<ffi::S32>& j,
                       ffi::Result<ffi::Buffer<ffi::S32>>& indices, ffi::Result<ffi::Buffer<ffi::S32>>& count) {
  const auto dims = logits.dimensions();
  if (dims.size() != 2) return Invalid("logits must be a matrix (rows, n)");
  const int64_t rows = dims[0], n = dims[1];
  if (n < 1 || n > std::numeric_limits<int32_t>::max()) return Invalid("need 1 <= n <= 2**31 - 1");
  const auto index_dims = indices->dimensions();
  if (index_dims.size() != 2 || index_dims[0] != rows || index_dims[1] != n) return Invalid("indices must be (rows, n)");
  if (static_cast<int64_t>(t.element_count()) != rows || static_cast<int64_t>(j.element_count()) != rows ||
      static_cast<int64_t>(count->element_count()) != rows) {
    return Invalid("per-row operands must hold one value per row");
  }
  if (rows == 0) return ffi::Error::Success();
  const auto type = logits.element_type();
  if (t.element_type() != (type == ffi::DataType::F64 ? ffi::DataType::U64 : ffi::DataType::U32)) {
    return Invalid("t must be uint64 for float64 logits, uint32 otherwise");
  }
  const void* x = logits.untyped_data();
  switch (type) {
    case ffi::DataType::F32: KeptRows<F32>(pool, rows, n, x, t.untyped_data(), j.typed_data(), indices->typed_data(), count->typed_data()); break;
    case ffi::DataType::F16: KeptRows<F16>(pool, rows, n, x, t.untyped_data(), j.typed_data(), indices->typed_data(), count->typed_data()); break;
    case ffi::DataType::BF16: KeptRows<BF16>(pool, rows, n, x, t.untyped_data(), j.typed_data(), indices->typed_data(), count->typed_data()); break;
    case ffi::DataType::F64: KeptRows<F64>(pool, rows, n, x, t.untyped_data(), j.typed_data(), indices->typed_data(), count->typed_data()); break;
    default: return Invalid("logits must be float16, bfloat16, float32 or float64");
  }
  return ffi::Error::Success();
}

ffi::Error CutHandler(ffi::ThreadPool pool, ffi::AnyBuffer logits, ffi::AnyBuffer weights, ffi::Buffer<ffi::S32> k,
                      ffi::Buffer<ffi::S32> pi, ffi::Buffer<ffi::S32> what, ffi::Result<ffi::AnyBuffer> t,
                      ffi::Result<ffi::Buffer<ffi::S32>> j, ffi::Result<ffi::Buffer<ffi::S32>> total,
                      int64_t fraction_bits, int64_t limb_bits) {
  return Guarded("dmljax_cpu_sampling_cut", "search", [&] {
    return CheckedCut(pool, logits, weights, k, pi, what, t, j, total, fraction_bits, limb_bits);
  });
}

ffi::Error KeptHandler(ffi::ThreadPool pool, ffi::AnyBuffer logits, ffi::AnyBuffer t, ffi::Buffer<ffi::S32> j,
                       ffi::Result<ffi::Buffer<ffi::S32>> indices, ffi::Result<ffi::Buffer<ffi::S32>> count) {
  return Guarded("dmljax_cpu_sampling_kept", "whole-row draw",
                 [&] { return CheckedKept(pool, logits, t, j, indices, count); });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(DmljaxCpuSamplingCut, CutHandler,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::S32>>()
                                  .Attr<int64_t>("fraction_bits")
                                  .Attr<int64_t>("limb_bits"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(DmljaxCpuSamplingKept, KeptHandler,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::S32>>());
