// The thread pool helpers dmljax's CPU kernels share (csrc/cpu_top_k.cc, csrc/cpu_reduce_extreme.cc,
// csrc/cpu_arg_extreme.cc): units of
// work taken from one atomic counter by the calling thread and by helpers scheduled on XLA's intra-op pool. The
// caller waits only for units that some thread has already taken, so it never waits on a helper that has not
// started (no deadlock when every pool thread is busy). The first exception a unit throws is kept, the units
// taken after it are skipped, and once every unit taken has finished it is rethrown on the calling thread.
// And the scratch memory of a call (Scratch): XLA's FFI scratch allocator where the runtime has one, else the heap;
// and how the reduction kernels cut (outer, n, inner) rows into units (RowSplit).

#ifndef DMLJAX_CSRC_CPU_PARALLEL_H_
#define DMLJAX_CSRC_CPU_PARALLEL_H_

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <limits>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

// Fault injection for the error-path tests (tests/test_cpu_kernel_errors.py), read once per process:
// DMLJAX_CPU_KERNEL_FAULT=bad_alloc, runtime_error or unknown makes the first unit of work of every call
// that runs over units throw std::bad_alloc, a std::runtime_error or an int, as a failed allocation or a bug
// there would. Unset (always, outside those tests), it costs one load of a static per call.
enum class Fault { kNone, kBadAlloc, kRuntimeError, kUnknown };

Fault InjectedFault() {
  static const Fault fault = [] {
    const char* name = std::getenv("DMLJAX_CPU_KERNEL_FAULT");
    if (name == nullptr) return Fault::kNone;
    const std::string value(name);
    if (value == "bad_alloc") return Fault::kBadAlloc;
    if (value == "runtime_error") return Fault::kRuntimeError;
    if (value == "unknown") return Fault::kUnknown;
    return Fault::kNone;
  }();
  return fault;
}

void MaybeInjectFault(int64_t unit) {
  if (unit != 0) return;
  switch (InjectedFault()) {
    case Fault::kNone: return;
    case Fault::kBadAlloc: throw std::bad_alloc();
    case Fault::kRuntimeError: throw std::runtime_error("fault injected by DMLJAX_CPU_KERNEL_FAULT");
    case Fault::kUnknown: throw 30;  // not a std::exception
  }
}

// Units [0, total) taken from one counter by the calling thread and by helpers on the pool. The first
// exception a unit throws is kept (Error); units taken after it are skipped, but still counted as done.
class Units {
 public:
  Units(int64_t total, std::function<void(int64_t)> body) : total_(total), body_(std::move(body)) {}

  // Never throws: it runs on pool threads, where an exception would terminate the process.
  void Run() noexcept {
    for (int64_t unit; (unit = next_.fetch_add(1, std::memory_order_relaxed)) < total_;) {
      if (!failed_.load(std::memory_order_acquire)) {
        try {
          MaybeInjectFault(unit);
          body_(unit);
        } catch (...) {
          Fail(std::current_exception());
        }
      }
      Finish(1);
    }
  }

  // Keeps the first exception; the units taken after it are skipped.
  void Fail(std::exception_ptr error) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_) error_ = std::move(error);
    failed_.store(true, std::memory_order_release);
  }

  // Waits for every unit: those not taken yet are taken by the caller in Run, so only running ones remain.
  void Wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    finished_.wait(lock, [&] { return done_.load(std::memory_order_acquire) == total_; });
  }

  // The first exception a unit threw (after Wait), or null.
  std::exception_ptr Error() {
    std::lock_guard<std::mutex> lock(mutex_);
    return error_;
  }

 private:
  void Finish(int64_t count) noexcept {
    if (done_.fetch_add(count, std::memory_order_acq_rel) + count == total_) {
      std::lock_guard<std::mutex> lock(mutex_);
      finished_.notify_all();
    }
  }

  const int64_t total_;
  const std::function<void(int64_t)> body_;
  std::atomic<int64_t> next_{0};
  std::atomic<int64_t> done_{0};
  std::atomic<bool> failed_{false};
  std::mutex mutex_;
  std::condition_variable finished_;
  std::exception_ptr error_;
};

// Runs body(0), ..., body(total - 1) over up to `threads` threads; rethrows, on the calling thread, the first
// exception a unit threw, once no thread runs a unit any more (the units use the caller's stack).
void ParallelFor(ffi::ThreadPool& pool, int64_t threads, int64_t total, std::function<void(int64_t)> body) {
  if (threads <= 1 || total <= 1) {
    for (int64_t unit = 0; unit < total; ++unit) {
      MaybeInjectFault(unit);
      body(unit);
    }
    return;
  }
  auto units = std::make_shared<Units>(total, std::move(body));
  try {
    for (int64_t helper = 1; helper < std::min(threads, total); ++helper) {
      pool.Schedule([units] { units->Run(); });
    }
  } catch (...) {
    // Scheduling failed (std::bad_alloc, say): fewer helpers. The caller still runs every unit not taken.
  }
  units->Run();
  units->Wait();
  if (std::exception_ptr error = units->Error()) std::rethrow_exception(error);
}

// The scratch memory of one call of a handler, freed when the call returns: from XLA's FFI scratch allocator
// where the runtime has one (a buffer XLA accounts for), else from the heap. XLA:CPU has none: its
// XLA_FFI_DeviceMemory_Allocate answers that the GPU context is not available (jaxlib 0.10.2, 0.11.2 and 0.12.0.1),
// so the first refusal is remembered for the process and later calls go to the heap at once. A kernel asks for it
// only where a call splits its work in a way that needs it, and bounds what it asks for (each kernel says how).
class Scratch {
 public:
  explicit Scratch(ffi::ScratchAllocator& allocator) : allocator_(allocator) {}

  // `count` elements of a trivial T, not initialized; throws std::bad_alloc where neither XLA nor the heap has them.
  template <typename T>
  T* Allocate(size_t count) {
    static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_default_constructible_v<T>);
    static_assert(alignof(T) <= 16, "XLA's scratch allocator and operator new[] align to 16 bytes at most");
    if (count == 0) return nullptr;
    if (count > std::numeric_limits<size_t>::max() / sizeof(T)) throw std::bad_alloc();
    const size_t bytes = count * sizeof(T);
    if (!Refused().load(std::memory_order_relaxed)) {
      std::optional<void*> memory = allocator_.Allocate(bytes, alignof(T));
      if (memory.has_value() && *memory != nullptr) return static_cast<T*>(*memory);
      Refused().store(true, std::memory_order_relaxed);
    }
    std::unique_ptr<unsigned char[]> block(new unsigned char[bytes]);
    T* data = reinterpret_cast<T*>(block.get());
    heap_.push_back(std::move(block));
    return data;
  }

 private:
  static std::atomic<bool>& Refused() {
    static std::atomic<bool> refused{false};
    return refused;
  }

  ffi::ScratchAllocator& allocator_;
  std::vector<std::unique_ptr<unsigned char[]>> heap_;
};

// How a reduction kernel (csrc/cpu_reduce_extreme.cc, csrc/cpu_arg_extreme.cc) cuts (outer, n, inner) rows, reduced
// along n, into units of work: groups of rows; where there are fewer groups than units, blocks of columns (inner > 1)
// too, a tile (`tile` columns) each at least; where there are fewer rows than units and still fewer units, chunks of
// n, each reading at least `min_bytes_per_unit` (none empty). Only chunks need memory beyond the output (a partial
// result per row, chunk and column, which a second pass combines), and they are cut only where outer * blocks <
// units, so blocks is the column tiles' count and chunks <= units / (outer * blocks) + 1: fewer than 2 * units * tile
// partial results, and at most units times the output, whatever the input's size.
struct RowSplit {
  int64_t per_group, groups;  // rows in a group, and the groups
  int64_t width, blocks;      // columns in a block, and the blocks
  int64_t length, chunks;     // elements of n in a chunk, and the chunks (1: every unit holds all of n)

  int64_t Units() const { return groups * blocks * chunks; }
  // The partial results the chunks write (none where every unit holds all of n).
  int64_t Slots(int64_t outer, int64_t inner) const { return chunks > 1 ? outer * chunks * inner : 0; }
};

inline RowSplit SplitRows(int64_t threads, int64_t outer, int64_t n, int64_t inner, int64_t element_bytes,
                          int64_t tile, int64_t units_per_thread, int64_t min_bytes_per_unit) {
  RowSplit split;
  const int64_t wanted = threads > 1 ? threads * units_per_thread : 1;
  split.per_group = (outer + std::min(outer, wanted) - 1) / std::min(outer, wanted);
  split.groups = (outer + split.per_group - 1) / split.per_group;
  split.width = inner;
  if (inner > 1 && split.groups < wanted) {
    const int64_t parts = std::min((wanted + split.groups - 1) / split.groups, (inner + tile - 1) / tile);
    split.width = (inner + parts - 1) / parts;
  }
  split.blocks = (inner + split.width - 1) / split.width;
  split.length = n;
  if (outer < wanted && split.groups * split.blocks < wanted) {  // one row a group, and still too few units
    const int64_t unit_bytes = n * split.width * element_bytes;
    const int64_t most = std::max<int64_t>(1, unit_bytes / min_bytes_per_unit);
    const int64_t rows = split.groups * split.blocks;
    const int64_t chunks = std::min({(wanted + rows - 1) / rows, most, n});
    split.length = (n + chunks - 1) / chunks;
  }
  split.chunks = (n + split.length - 1) / split.length;
  return split;
}

// The threads a call over `bytes` of input runs on: the calling thread alone below `min_parallel_bytes`, else up to
// the pool's, each with `min_bytes_per_unit` of the input at least.
inline int64_t ThreadsFor(ffi::ThreadPool& pool, int64_t bytes, int64_t min_parallel_bytes,
                          int64_t min_bytes_per_unit) {
  if (bytes < min_parallel_bytes) return 1;
  return std::max<int64_t>(1, std::min<int64_t>(pool.num_threads(), bytes / min_bytes_per_unit));
}

// body() for an FFI entry point, with every C++ exception turned into an FFI error (XLA raises it in Python):
// `kernel` names the handler in the message, `fallback` what DMLJAX_CPU_KERNEL=0 runs instead ("selection").
template <typename Body>
ffi::Error Guarded(const std::string& kernel, const std::string& fallback, Body&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return ffi::Error(ffi::ErrorCode::kResourceExhausted,
                      kernel + ": out of memory for the kernel's buffers; free memory, or set DMLJAX_CPU_KERNEL=0 to "
                      "run dmljax's XLA " + fallback + " instead");
  } catch (const std::exception& error) {
    return ffi::Error::Internal(kernel + ": " + error.what() + "; please report it (set DMLJAX_CPU_KERNEL=0 to run " +
                                "dmljax's XLA " + fallback + ")");
  } catch (...) {
    return ffi::Error::Internal(kernel + ": an unknown C++ exception; please report it (set DMLJAX_CPU_KERNEL=0 to " +
                                "run dmljax's XLA " + fallback + ")");
  }
}

}  // namespace

#endif  // DMLJAX_CSRC_CPU_PARALLEL_H_
