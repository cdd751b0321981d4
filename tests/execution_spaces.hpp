#pragma once
// The execution spaces the kernel tests run on: every backend of the Kokkos build (Serial,
// OpenMP, Cuda) and dpk::DefaultExecutionSpace, each once, as doctest type lists:
//
//   TEST_CASE_TEMPLATE_DEFINE("what is checked", Space, what_is_checked) { ... }
//   TEST_CASE_TEMPLATE_APPLY(what_is_checked, dpk_test::ExecutionSpaces);
//
// and, for the cases that also run in float and double, the pairs (space, scalar):
//
//   TEST_CASE_TEMPLATE_DEFINE("what is checked", Case, what_is_checked) {
//     using Space = typename Case::execution_space;
//     using Scalar = typename Case::scalar;
//     ...
//   }
//   TEST_CASE_TEMPLATE_APPLY(what_is_checked, dpk_test::SpacesAndScalars);
//
// A test case then runs once per entry, named "what is checked<Serial, double>" and so on.

#include <dpk/core/types.hpp>

#include <Kokkos_Core.hpp>
#include <doctest/doctest.h>

#include <tuple>
#include <type_traits>
#include <utility>

namespace dpk_test {

namespace detail {

/// std::tuple<Ts...> with T appended unless it is already there.
template <class List, class T>
struct append_unique;
template <class... Ts, class T>
struct append_unique<std::tuple<Ts...>, T> {
  using type = std::conditional_t<(std::is_same_v<Ts, T> || ...), std::tuple<Ts...>, std::tuple<Ts..., T>>;
};

/// The types of Ts... in order, duplicates dropped, as a std::tuple.
template <class List, class... Ts>
struct unique_list {
  using type = List;
};
template <class List, class T, class... Rest>
struct unique_list<List, T, Rest...> : unique_list<typename append_unique<List, T>::type, Rest...> {};

/// Every (space, scalar) pair of two std::tuple lists, spaces outermost.
template <template <class, class> class Pair, class Spaces, class Scalars>
struct product;
template <template <class, class> class Pair, class... Spaces, class... Scalars>
struct product<Pair, std::tuple<Spaces...>, std::tuple<Scalars...>> {
  template <class Space>
  using row = std::tuple<Pair<Space, Scalars>...>;
  using type = decltype(std::tuple_cat(std::declval<row<Spaces>>()...));
};

}  // namespace detail

/// The execution spaces of the Kokkos build (dpk's default among them, once); the CUDA build
/// leaves OpenMP to the CPU builds (Serial and Cuda), which keeps its nvcc compile short.
using ExecutionSpaces = typename detail::unique_list<std::tuple<>,
#if defined(KOKKOS_ENABLE_SERIAL)
                                                     Kokkos::Serial,
#endif
#if defined(KOKKOS_ENABLE_OPENMP) && !defined(KOKKOS_ENABLE_CUDA)  // the CPU builds test OpenMP
                                                     Kokkos::OpenMP,
#endif
#if defined(KOKKOS_ENABLE_CUDA)
                                                     Kokkos::Cuda,
#endif
                                                     dpk::DefaultExecutionSpace>::type;

/// One test case's execution space, the memory space of its Views, and its scalar type.
template <class ExecutionSpace, class Scalar>
struct SpaceScalar {
  using execution_space = ExecutionSpace;
  using memory_space = dpk::memory_space_t<ExecutionSpace>;
  using scalar = Scalar;
};

/// Every execution space in double and in float.
using SpacesAndScalars = typename detail::product<SpaceScalar, ExecutionSpaces, std::tuple<double, float>>::type;

}  // namespace dpk_test

// Short names in the test case names and reports ("<Serial, double>").
#if defined(KOKKOS_ENABLE_SERIAL)
DOCTEST_TYPE_TO_STRING_AS("Serial", Kokkos::Serial);
DOCTEST_TYPE_TO_STRING_AS("Serial, double", dpk_test::SpaceScalar<Kokkos::Serial, double>);
DOCTEST_TYPE_TO_STRING_AS("Serial, float", dpk_test::SpaceScalar<Kokkos::Serial, float>);
#endif
#if defined(KOKKOS_ENABLE_OPENMP)
DOCTEST_TYPE_TO_STRING_AS("OpenMP", Kokkos::OpenMP);
DOCTEST_TYPE_TO_STRING_AS("OpenMP, double", dpk_test::SpaceScalar<Kokkos::OpenMP, double>);
DOCTEST_TYPE_TO_STRING_AS("OpenMP, float", dpk_test::SpaceScalar<Kokkos::OpenMP, float>);
#endif
#if defined(KOKKOS_ENABLE_CUDA)
DOCTEST_TYPE_TO_STRING_AS("Cuda", Kokkos::Cuda);
DOCTEST_TYPE_TO_STRING_AS("Cuda, double", dpk_test::SpaceScalar<Kokkos::Cuda, double>);
DOCTEST_TYPE_TO_STRING_AS("Cuda, float", dpk_test::SpaceScalar<Kokkos::Cuda, float>);
#endif
