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
// 128-bit integers, and a prefix of K units reaches p of T when K >= 1 and K * 2**24 >= pi * T, pi = ceil(p *
// 2**24). So the cut is the one XLA's bisection finds (the same entries, compared in the same integers), found
// here by a radix selection over the keys: the entries are counted (or their units summed) by the top bits of
// their key, the bucket where the running sum from the top first reaches the target is kept, and the entries in
// it are counted again by the next bits, until the key t is known; then the entries equal to t, in ascending
// index order, until the target is reached at index j. One pass over the row, then passes over ever fewer
// entries.
//
// DmljaxCpuSamplingKept: per row, the indices of the entries through a cut that are not NaN, in ascending order,
// and how many there are (the rest of the row of indices is 0): what sample's draw over a whole row races over.
//
// Rows are spread over XLA's intra-op pool (csrc/cpu_parallel.h); a call of one row runs on the calling thread.

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
  static Digit DigitOf(U bits) {
    U magnitude = bits & kMagnitude;
    bool negative = (bits & kSign) != 0;
    if (magnitude > kInf) magnitude = kInf, negative = true;  // NaN as -inf
    const U twos = negative ? static_cast<U>(U{0} - magnitude) : magnitude;
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

// floor(w * 2**F) of a non-negative weight, exactly (a subnormal or zero weight counts none: w * 2**F < 1).
inline U128 UnitsOf(float w, int fraction_bits) {
  uint32_t bits;
  std::memcpy(&bits, &w, sizeof bits);
  const int exponent = static_cast<int>((bits >> 23) & 0xff);
  if (exponent == 0 || exponent == 0xff || (bits >> 31) != 0) return 0;
  const uint64_t mantissa = (bits & 0x7fffffu) | 0x800000u;
  const int shift = exponent - 150 + fraction_bits;  // w = mantissa * 2**(exponent - 150)
  if (shift >= 0) return static_cast<U128>(mantissa) << shift;
  return shift <= -24 ? 0 : static_cast<U128>(mantissa >> -shift);
}

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

// The search ---------------------------------------------------------------------------------------------------

template <typename T>
struct Cut {
  T t;
  int64_t j;
};

// The cut (a digit and an index) of the shortest prefix of the entries whose measure reaches need(total), total
// being the measure of them all (need(total) <= total): measure(i) is entry i's count or units, 0 for an entry
// outside the set measured. Counts by the top kFirst bits of the digits, then kNext bits at a time over the entries
// of the chosen bucket; returns the total too.
template <typename Digit, typename Measure, typename Need>
Cut<Digit> Select(const Digit* digits, int64_t n, Measure measure, Need need_of, U128* total,
                  std::vector<int32_t>& members, std::vector<U128>& sums) {
  constexpr int kWidth = sizeof(Digit) * 8;
  constexpr int kFirst = kWidth >= 32 ? 11 : 8;
  constexpr int kNext = 8;
  U128 above = 0;  // the measure of the entries above the bucket searched
  U128 need = 0;
  Digit prefix = 0;  // the top `decided` bits of the threshold
  int decided = 0;
  members.clear();
  while (decided < kWidth) {
    const int width = std::min(decided == 0 ? kFirst : kNext, kWidth - decided);
    const int shift = kWidth - decided - width;
    const size_t buckets = size_t{1} << width;
    const uint64_t mask = (uint64_t{1} << width) - 1;
    sums.assign(buckets, 0);
    if (decided == 0) {
      for (int64_t i = 0; i < n; ++i) sums[static_cast<size_t>((digits[i] >> shift) & mask)] += measure(i);
      U128 all = 0;
      for (const U128 sum : sums) all += sum;
      *total = all;
      need = need_of(all);
    } else {
      for (const int32_t i : members) sums[static_cast<size_t>((digits[i] >> shift) & mask)] += measure(i);
    }
    size_t chosen = buckets - 1;
    while (chosen > 0 && above + sums[chosen] < need) above += sums[chosen--];
    prefix = static_cast<Digit>(prefix | (static_cast<Digit>(chosen) << shift));
    const Digit high = static_cast<Digit>(prefix >> shift);
    if (decided == 0) {
      for (int64_t i = 0; i < n; ++i) {
        if (static_cast<Digit>(digits[i] >> shift) == high) members.push_back(static_cast<int32_t>(i));
      }
    } else {
      size_t out = 0;
      for (const int32_t i : members) {
        if (static_cast<Digit>(digits[i] >> shift) == high) members[out++] = i;
      }
      members.resize(out);
    }
    decided += width;
  }
  // Every member now equals the threshold: the prefix takes them in ascending index order until it reaches.
  for (const int32_t i : members) {
    above += measure(i);
    if (above >= need) return {prefix, i};
  }
  return {prefix, members.empty() ? n - 1 : members.back()};
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
void CutRow(const typename Type::Bits* x, const Weight* w, const Row& row, int fraction_bits,
            typename Type::Key* t_out, int32_t* j_out, U128* total, std::vector<typename Type::Digit>& digits,
            std::vector<int32_t>& members, std::vector<U128>& sums) {
  using Digit = typename Type::Digit;
  digits.resize(static_cast<size_t>(row.n));
  for (int64_t i = 0; i < row.n; ++i) digits[i] = Type::DigitOf(x[i]);
  Cut<Digit> cut{0, row.n - 1};  // every entry: every digit is at least 0
  *total = 0;
  if (row.what & kCount) {
    U128 count = 0;
    const auto one = [](int64_t) { return U128{1}; };
    cut = Select(digits.data(), row.n, one, [&](U128) { return static_cast<U128>(row.k); }, &count, members, sums);
  }
  if ((row.what & kMass) && w != nullptr) {
    const Cut<Digit> prior = cut;
    const auto units = [&](int64_t i) {
      const bool in = digits[i] > prior.t || (digits[i] == prior.t && i <= prior.j);
      return in ? UnitsOf(w[i], fraction_bits) : U128{0};
    };
    const auto need = [&](U128 all) { return MassNeed(all, row.pi); };
    cut = Select(digits.data(), row.n, units, need, total, members, sums);
  }
  *t_out = Type::KeyOf(cut.t);
  *j_out = static_cast<int32_t>(cut.j);
}

template <typename Type>
void KeptRow(const typename Type::Bits* x, int64_t n, typename Type::Key t, int32_t j, int32_t* indices,
             int32_t* count) {
  // Compared as the library's keys, not as digits: a cut's t need not be the key of any value of a narrow type
  // (the whole row's cut is t = 0, below the widened key of every 16-bit value).
  int32_t found = 0;
  for (int64_t i = 0; i < n; ++i) {
    const typename Type::Key key = Type::KeyOf(Type::DigitOf(x[i]));
    const bool in = (key > t || (key == t && i <= j)) && !Type::IsNaN(x[i]);
    indices[found] = static_cast<int32_t>(i);
    found += in ? 1 : 0;
  }
  std::fill(indices + found, indices + n, 0);
  *count = found;
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
  const int64_t threads = rows > 1 ? std::min<int64_t>(pool.num_threads(), rows) : 1;
  ParallelFor(pool, threads, rows, [&](int64_t r) {
    std::vector<typename Type::Digit> digits;
    std::vector<int32_t> members;
    std::vector<U128> sums;
    const Row row{n, k[r], static_cast<uint32_t>(pi[r]), what[r]};
    U128 sum = 0;
    CutRow<Type, Weight>(x + r * n, w == nullptr ? nullptr : w + r * n, row, fraction_bits, &t_out[r], &j[r],
                         &sum, digits, members, sums);
    const U128 mask = (U128{1} << limb_bits) - 1;
    for (int64_t l = 0; l < limbs; ++l) total[r * limbs + l] = static_cast<int32_t>((sum >> (limb_bits * l)) & mask);
  });
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
  const int64_t threads = rows > 1 ? std::min<int64_t>(pool.num_threads(), rows) : 1;
  ParallelFor(pool, threads, rows, [&](int64_t r) { KeptRow<Type>(x + r * n, n, tt[r], j[r], indices + r * n, count + r); });
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
