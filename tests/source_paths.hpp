#pragma once
/// Where tests and benchmarks find the source tree and its test data. The two paths are compiled
/// into one small generated translation unit (target dpk_source_paths, cmake/dpkHelpers.cmake)
/// instead of -D flags on every test: the large test objects then do not depend on where the tree
/// is checked out, and a compiler cache (ccache with CCACHE_BASEDIR, scripts/ccache_env.sh) reuses
/// them across clones.
namespace dpk_test {
/// DPK_TEST_SOURCE_DIR at configure time (default: this source tree), absolute: a relative one
/// (the GPU bundle's ".") is taken against the working directory of the first call.
char const* source_dir();
/// DPK_TEST_DATA_DIR at configure time (default: <source>/tests/data), absolute as source_dir().
char const* data_dir();
}  // namespace dpk_test
