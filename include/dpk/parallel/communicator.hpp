#pragma once
/// \file communicator.hpp
/// \brief Data-parallel communication (SPEC.md section 9): broadcast of the parameters, one
/// allreduce of the flat gradient buffer per step, a few host reductions.
///
/// With DPK_ENABLE_MPI defined this wraps an MPI communicator (MPI_COMM_WORLD by default).
/// Device buffers are staged through host mirrors unless the MPI library reports CUDA-aware
/// support (Open MPI's MPIX_Query_cuda_support), in which case device pointers go to MPI
/// directly. Without DPK_ENABLE_MPI, Communicator is a one-rank stand-in with the same API.

#include <dpk/core/error.hpp>
#include <dpk/core/types.hpp>

#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#if defined(DPK_ENABLE_MPI)
#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif
#endif

namespace dpk {

#if defined(DPK_ENABLE_MPI)
namespace detail {
/// MPI datatype of a scalar type.
template <class T>
MPI_Datatype mpi_type() {
  if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
  else if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, int>) return MPI_INT;
  else if constexpr (std::is_same_v<T, long>) return MPI_LONG;
  else static_assert(sizeof(T) == 0, "dpk::Communicator: unsupported element type");
}
/// Throws dpk::Error naming `what` when an MPI call failed.
inline void check_mpi(int code, char const* what) {
  if (code != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(code, text, &length);
    throw Error(std::string("MPI error in ") + what + ": " + std::string(text, length));
  }
}
}  // namespace detail
#endif

/// Initialises MPI on construction and finalises it on destruction (when this object did the
/// initialisation). A no-op without DPK_ENABLE_MPI.
class MpiSession {
 public:
  /// Calls MPI_Init unless MPI is already initialised.
  MpiSession(int* argc, char*** argv) {
#if defined(DPK_ENABLE_MPI)
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      detail::check_mpi(MPI_Init(argc, argv), "MPI_Init");
      owner_ = true;
    }
#else
    (void)argc;
    (void)argv;
#endif
  }
  ~MpiSession() {
#if defined(DPK_ENABLE_MPI)
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owner_ && !finalized) MPI_Finalize();
#endif
  }
  MpiSession(MpiSession const&) = delete;
  MpiSession& operator=(MpiSession const&) = delete;

#if defined(DPK_ENABLE_MPI)
 private:
  bool owner_ = false;  ///< this session called MPI_Init (and so finalizes)
#endif
};

/// Rank/size and the collective operations the trainer needs.
class Communicator {
 public:
#if defined(DPK_ENABLE_MPI)
  /// Wraps `comm` (MPI must be initialised). Detects CUDA-aware MPI once.
  explicit Communicator(MPI_Comm comm = MPI_COMM_WORLD) : comm_(comm) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      // A program that never initialised MPI runs as one rank.
      comm_ = MPI_COMM_NULL;
      return;
    }
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
    device_aware_ = MPIX_Query_cuda_support() == 1;
#endif
  }
#else
  /// One rank, no communication.
  Communicator() = default;
#endif

  int rank() const { return rank_; }            ///< this process, 0-based
  int size() const { return size_; }            ///< number of ranks
  bool is_root() const { return rank_ == 0; }   ///< rank 0 writes the files
  /// True when device buffers are handed to MPI directly (CUDA-aware MPI).
  bool device_aware() const { return device_aware_; }
  /// Forces host staging even with a CUDA-aware MPI (for tests and debugging).
  void set_device_aware(bool enabled) { device_aware_ = enabled && device_aware_; }

  /// Copies `view` from rank `root` to every rank (same extent everywhere).
  template <class T, class MemorySpace>
  void broadcast(View1<T, MemorySpace> const& view, int root = 0) const {
#if defined(DPK_ENABLE_MPI)
    if (size_ == 1) return;
    if (direct<MemorySpace>()) {
      Kokkos::fence();
      detail::check_mpi(MPI_Bcast(view.data(), int(view.extent(0)), detail::mpi_type<T>(), root, comm_),
                        "broadcast");
      return;
    }
    auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), view);
    detail::check_mpi(MPI_Bcast(host.data(), int(host.extent(0)), detail::mpi_type<T>(), root, comm_),
                      "broadcast");
    Kokkos::deep_copy(view, host);
#else
    (void)view;
    (void)root;
#endif
  }

  /// Sums `view` over all ranks in place (one contiguous buffer). Device data is staged
  /// through a host buffer kept between calls (no allocation per step) unless MPI is
  /// CUDA-aware; host data goes to MPI directly.
  template <class T, class MemorySpace>
  void allreduce_sum(View1<T, MemorySpace> const& view) {
#if defined(DPK_ENABLE_MPI)
    if (size_ == 1) return;
    if (direct<MemorySpace>()) {
      Kokkos::fence();
      detail::check_mpi(MPI_Allreduce(MPI_IN_PLACE, view.data(), int(view.extent(0)), detail::mpi_type<T>(),
                                      MPI_SUM, comm_),
                        "allreduce of the gradient buffer");
      return;
    }
    std::size_t const bytes = view.extent(0) * sizeof(T);
    if (staging_.size() < bytes) staging_.resize(bytes);
    Kokkos::View<T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> host(
        reinterpret_cast<T*>(staging_.data()), view.extent(0));
    Kokkos::deep_copy(host, view);
    detail::check_mpi(MPI_Allreduce(MPI_IN_PLACE, host.data(), int(host.extent(0)), detail::mpi_type<T>(),
                                    MPI_SUM, comm_),
                      "allreduce of the gradient buffer");
    Kokkos::deep_copy(view, host);
#else
    (void)view;
#endif
  }

  /// Sums a few host values over all ranks in place.
  void allreduce_sum(std::vector<double>& values) const { allreduce_host(values, false); }

  /// Sum of one host value over all ranks.
  double allreduce_sum(double value) const {
    std::vector<double> values{value};
    allreduce_sum(values);
    return values[0];
  }

  /// Element-wise maximum of a few host values over all ranks, in place.
  void allreduce_max(std::vector<double>& values) const { allreduce_host(values, true); }

  /// Maximum of one host value over all ranks.
  double allreduce_max(double value) const {
#if defined(DPK_ENABLE_MPI)
    if (size_ > 1)
      detail::check_mpi(MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_MAX, comm_), "allreduce max");
#endif
    return value;
  }

  /// Every rank's `text`, in rank order, on rank `root` (empty vector on the other ranks).
  std::vector<std::string> gather_strings(std::string const& text, int root = 0) const {
#if defined(DPK_ENABLE_MPI)
    if (size_ > 1) {
      int length = int(text.size());
      std::vector<int> lengths(size_);
      detail::check_mpi(MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, root, comm_), "gather lengths");
      std::vector<int> displacements(size_, 0);
      int total = 0;
      for (int r = 0; r < size_; ++r) {
        displacements[r] = total;
        total += lengths[r];
      }
      std::vector<char> all(std::size_t(total) + 1);
      detail::check_mpi(MPI_Gatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(), displacements.data(),
                                    MPI_CHAR, root, comm_),
                        "gather strings");
      std::vector<std::string> out;
      if (rank_ == root)
        for (int r = 0; r < size_; ++r) out.emplace_back(all.data() + displacements[r], std::size_t(lengths[r]));
      return out;
    }
#endif
    (void)root;
    return {text};
  }

  /// `text` from rank `root` on every rank.
  std::string broadcast_string(std::string const& text, int root = 0) const {
#if defined(DPK_ENABLE_MPI)
    if (size_ > 1) {
      long length = long(text.size());
      detail::check_mpi(MPI_Bcast(&length, 1, MPI_LONG, root, comm_), "broadcast length");
      std::string out = text;
      out.resize(std::size_t(length));
      if (length > 0) detail::check_mpi(MPI_Bcast(out.data(), int(length), MPI_CHAR, root, comm_), "broadcast string");
      return out;
    }
#endif
    (void)root;
    return text;
  }

  /// Waits for every rank.
  void barrier() const {
#if defined(DPK_ENABLE_MPI)
    if (size_ > 1) MPI_Barrier(comm_);
#endif
  }

  /// Aborts every rank (used after an error on one rank so that the others do not hang).
  [[noreturn]] void abort(int code) const {
#if defined(DPK_ENABLE_MPI)
    if (size_ > 1) MPI_Abort(comm_, code);
#endif
    std::exit(code);
  }

 private:
  /// allreduce_sum / allreduce_max of host values (`maximum`: MPI_MAX, else MPI_SUM).
  void allreduce_host(std::vector<double>& values, bool maximum) const {
#if defined(DPK_ENABLE_MPI)
    if (size_ == 1 || values.empty()) return;
    detail::check_mpi(MPI_Allreduce(MPI_IN_PLACE, values.data(), int(values.size()), MPI_DOUBLE,
                                    maximum ? MPI_MAX : MPI_SUM, comm_),
                      maximum ? "allreduce max of host values" : "allreduce of host values");
#else
    (void)values;
    (void)maximum;
#endif
  }

  template <class MemorySpace>
  bool direct() const {
    return device_aware_ || std::is_same_v<MemorySpace, Kokkos::HostSpace>;
  }

#if defined(DPK_ENABLE_MPI)
  MPI_Comm comm_ = MPI_COMM_NULL;
#endif
  int rank_ = 0;
  int size_ = 1;
  bool device_aware_ = false;
  std::vector<char> staging_;
};

}  // namespace dpk
