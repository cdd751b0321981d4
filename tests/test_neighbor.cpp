// Neighbour search: DeePMD-kit's list on the water fixture, brute force on random triclinic
// boxes (also smaller than rcut), non-periodic clusters, several frames, sel overflow; on every
// execution space of the build (execution_spaces.hpp).
#include <doctest/doctest.h>

#include "execution_spaces.hpp"
#include "neighbor_test_helpers.hpp"

#include <dpk/neighbor/neighbor_search.hpp>

#include <set>

using dpk_test::brute_force;
using dpk_test::HostBatch;
using dpk_test::make_frames;
using dpk_test::random_batch;
using dpk_test::to_host;
using dpk_test::water_batch;
using dpk_test::water_file;

namespace {

/// Compares a list with the brute-force result: per centre and type block, the same
/// (owner, r_ij) pairs, ascending distance, and -1/0 padding after the filled slots.
template <class Scalar, class Mem>
void check_against_brute_force(HostBatch const& b, double rcut, std::vector<int> const& sel,
                               dpk::NeighborList<Scalar, Mem> const& list, double tol) {
  int const ntypes = int(sel.size());
  auto brute = brute_force(b, rcut, ntypes);
  auto h = to_host(list);
  long expected_dropped = 0;
  int const nloc = b.nframes * b.natoms;
  REQUIRE(list.nloc == nloc);
  for (int i = 0; i < nloc; ++i) {
    for (int t = 0; t < ntypes; ++t) {
      auto const& want = brute[i][t];
      int const keep = std::min<int>(int(want.size()), sel[t]);
      expected_dropped += long(want.size()) - keep;
      REQUIRE(h.count(i, t) == keep);
      int const base = list.sel_offset[t];
      // Kept = the `keep` nearest (brute force sorted by distance); compare as sets of
      // (owner, rounded r_ij) -- ties at the boundary are improbable with random positions.
      std::multiset<std::tuple<int, long, long, long>> got_set, want_set;
      auto key = [&](int owner, double const* r) {
        return std::make_tuple(owner, std::lround(r[0] / tol), std::lround(r[1] / tol), std::lround(r[2] / tol));
      };
      double previous = -1;
      for (int s = 0; s < keep; ++s) {
        double r[3] = {double(h.rij(i, base + s, 0)), double(h.rij(i, base + s, 1)), double(h.rij(i, base + s, 2))};
        double const r2 = r[0] * r[0] + r[1] * r[1] + r[2] * r[2];
        CHECK(r2 >= previous - 10 * tol);  // ascending (float32 key; tolerance for rounding)
        previous = r2;
        int const owner = h.index(i, base + s);
        CHECK(owner >= (i / b.natoms) * b.natoms);
        CHECK(owner < (i / b.natoms + 1) * b.natoms);
        got_set.insert(key(owner, r));
        want_set.insert(key(want[s].owner, want[s].rij));
      }
      if (got_set != want_set) {
        // Rounding buckets can split a value; fall back to a tolerant match.
        for (int s = 0; s < keep; ++s) {
          bool found = false;
          for (int q = 0; q < keep && !found; ++q) {
            found = h.index(i, base + s) == want[q].owner;
            for (int d = 0; d < 3; ++d) found = found && std::fabs(double(h.rij(i, base + s, d)) - want[q].rij[d]) < tol;
          }
          CHECK_MESSAGE(found, "centre " << i << " type " << t << " slot " << s);
        }
      }
      for (int s = keep; s < sel[t]; ++s) {
        CHECK(h.index(i, base + s) == -1);
        CHECK(h.rij(i, base + s, 0) == Scalar(0));
      }
    }
  }
  CHECK(list.dropped == expected_dropped);
}

/// Reverse index: every filled (centre, slot) appears exactly once, under its neighbour.
template <class Scalar, class Mem>
void check_reverse(dpk::NeighborList<Scalar, Mem> const& list) {
  auto h = to_host(list);
  auto offset = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), list.reverse_offset);
  auto pair = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), list.reverse_pair);
  REQUIRE(list.reverse_nloc == list.nloc);
  long filled = 0;
  for (int i = 0; i < list.nloc; ++i)
    for (int s = 0; s < list.nnei; ++s) filled += h.index(i, s) >= 0;
  auto position = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), list.reverse_position);
  CHECK(offset(list.nloc) == filled);
  for (int n = 0; n < list.nloc; ++n)
    for (int e = offset(n); e < offset(n + 1); ++e) {
      int const centre = pair(e) / list.nnei, slot = pair(e) % list.nnei;
      CHECK(h.index(centre, slot) == n);
      if (e > offset(n)) CHECK(pair(e) > pair(e - 1));
      CHECK(position(pair(e)) == e);
    }
}

}  // namespace

TEST_CASE_TEMPLATE_DEFINE("neighbour list equals DeePMD-kit's on the water frame", Case, neighbor_water) {
  using Space = typename Case::execution_space;
  using Mem = typename Case::memory_space;
  using Scalar = typename Case::scalar;
  HostBatch const b = water_batch();
  auto frames = make_frames<Scalar, Mem>(b);
  dpk::NeighborSearch<Scalar, Space> search(6.0, {46, 92});
  dpk::NeighborList<Scalar, Mem> list;
  search.build(Space(), frames, list);
  auto h = to_host(list);
  auto nlist = dpk::read_npy(water_file("nlist.npy"));
  auto rij = dpk::read_npy(water_file("rij.npy"));
  REQUIRE(list.nloc == 192);
  REQUIRE(list.nnei == 138);
  CHECK(list.dropped == 0);
  long mismatches = 0, filled = 0;
  double max_error = 0, max_value = 0;
  for (int i = 0; i < 192; ++i)
    for (int s = 0; s < 138; ++s) {
      mismatches += h.index(i, s) != int(nlist.data[138 * i + s]);
      filled += h.index(i, s) >= 0;
      for (int d = 0; d < 3; ++d) {
        double const want = rij.data[(138 * i + s) * 3 + d];
        max_error = std::max(max_error, std::fabs(double(h.rij(i, s, d)) - want));
        max_value = std::max(max_value, std::fabs(want));
      }
    }
  CHECK(mismatches == 0);
  CHECK(filled == 17064);
  double const tol = std::is_same<Scalar, double>::value ? 1e-10 : 1e-4;
  CHECK(max_error / max_value <= tol);
  check_reverse(list);

  // Rebuilding with the same sizes allocates nothing.
  auto const* index_data = list.index.data();
  auto const* rij_data = list.rij.data();
  search.build(Space(), frames, list);
  CHECK(list.index.data() == index_data);
  CHECK(list.rij.data() == rij_data);
  auto h2 = to_host(list);
  for (int i = 0; i < 192; ++i)
    for (int s = 0; s < 138; ++s) CHECK(h2.index(i, s) == h.index(i, s));
}
TEST_CASE_TEMPLATE_APPLY(neighbor_water, dpk_test::SpacesAndScalars);

TEST_CASE_TEMPLATE_DEFINE("neighbour list equals brute force on random triclinic boxes", Case, neighbor_triclinic) {
  using Space = typename Case::execution_space;
  using Mem = typename Case::memory_space;
  using Scalar = typename Case::scalar;
  std::mt19937 rng(1234);
  double const tol = std::is_same<Scalar, double>::value ? 1e-9 : 2e-4;
  std::vector<int> const sel = {200, 200, 200};
  dpk::NeighborSearch<Scalar, Space> search(4.0, sel);
  dpk::NeighborList<Scalar, Mem> list;
  for (int trial = 0; trial < 3; ++trial) {
    // Several frames per batch, boxes between 8 and 15 A (1 to 3 cells per direction).
    HostBatch const b = random_batch(rng, 3, 60 + 10 * trial, 3, 8.0, 15.0, true);
    search.build(Space(), make_frames<Scalar, Mem>(b), list);
    check_against_brute_force(b, 4.0, sel, list, tol);
    check_reverse(list);
  }
}
TEST_CASE_TEMPLATE_APPLY(neighbor_triclinic, dpk_test::SpacesAndScalars);

TEST_CASE_TEMPLATE_DEFINE("neighbour list in boxes smaller than rcut (many images)", Case, neighbor_small_boxes) {
  using Space = typename Case::execution_space;
  using Mem = typename Case::memory_space;
  using Scalar = typename Case::scalar;
  std::mt19937 rng(99);
  double const tol = std::is_same<Scalar, double>::value ? 1e-9 : 2e-4;
  std::vector<int> const sel = {600, 600};
  dpk::NeighborSearch<Scalar, Space> search(6.0, sel);
  dpk::NeighborList<Scalar, Mem> list;
  for (int trial = 0; trial < 2; ++trial) {
    HostBatch const b = random_batch(rng, 2, 4 + trial, 2, 2.5, 5.0, true);
    search.build(Space(), make_frames<Scalar, Mem>(b), list);
    check_against_brute_force(b, 6.0, sel, list, tol);
    check_reverse(list);
  }
  // A single atom in a tiny cubic box: its own images are its neighbours.
  HostBatch one;
  one.nframes = 1;
  one.natoms = 1;
  one.coord = {0.3, 0.2, 0.1};
  one.box = {2.0, 0, 0, 0, 2.0, 0, 0, 0, 2.0};
  one.types = {0};
  dpk::NeighborSearch<Scalar, Space> single(3.0, {200});
  single.build(Space(), make_frames<Scalar, Mem>(one), list);
  check_against_brute_force(one, 3.0, {200}, list, tol);
  // Images at distance 2 (6), 2 sqrt 2 (12): 18 in total within 3.
  CHECK(to_host(list).count(0, 0) == 18);
}
TEST_CASE_TEMPLATE_APPLY(neighbor_small_boxes, dpk_test::SpacesAndScalars);

TEST_CASE_TEMPLATE_DEFINE("neighbour list of non-periodic clusters", Case, neighbor_clusters) {
  using Space = typename Case::execution_space;
  using Mem = typename Case::memory_space;
  using Scalar = typename Case::scalar;
  std::mt19937 rng(7);
  double const tol = std::is_same<Scalar, double>::value ? 1e-9 : 2e-4;
  std::vector<int> const sel = {300, 300};
  dpk::NeighborSearch<Scalar, Space> search(5.0, sel);
  dpk::NeighborList<Scalar, Mem> list;
  for (double side : {3.0, 12.0, 25.0}) {
    HostBatch const b = random_batch(rng, 2, 80, 2, side, side, false);
    search.build(Space(), make_frames<Scalar, Mem>(b), list);
    check_against_brute_force(b, 5.0, sel, list, tol);
    check_reverse(list);
  }
}
TEST_CASE_TEMPLATE_APPLY(neighbor_clusters, dpk_test::SpacesAndScalars);

TEST_CASE_TEMPLATE_DEFINE("neighbour list in very large boxes (cell grid capped: issue 18)", Case,
                          neighbor_large_boxes) {
  using Space = typename Case::execution_space;
  using Mem = typename Case::memory_space;
  using Scalar = typename Case::scalar;
  // A dense cluster in a 5000 A periodic box (atoms also across its boundary) and atoms spread
  // over 1e5 A without periodicity: the grid would need ~1e10 cells (refused before: "too many
  // cells"); capped at max(4096, 8 x atoms) larger cells it gives the brute-force list.
  std::mt19937 rng(18);
  double const tol = std::is_same<Scalar, double>::value ? 1e-7 : 2e-2;
  std::vector<int> const sel = {100, 100};
  dpk::NeighborSearch<Scalar, Space> search(5.0, sel);
  dpk::NeighborList<Scalar, Mem> list;
  HostBatch b = random_batch(rng, 2, 60, 2, 8.0, 8.0, true);
  for (int f = 0; f < b.nframes; ++f)
    for (int k = 0; k < 9; ++k) b.box[std::size_t(f) * 9 + k] = (k % 4 == 0) ? 5000.0 : 0.0;
  search.build(Space(), make_frames<Scalar, Mem>(b), list);
  check_against_brute_force(b, 5.0, sel, list, tol);
  check_reverse(list);
  HostBatch const spread = random_batch(rng, 1, 40, 2, 1e5, 1e5, false);
  search.build(Space(), make_frames<Scalar, Mem>(spread), list);
  check_against_brute_force(spread, 5.0, sel, list, tol);
}
TEST_CASE_TEMPLATE_APPLY(neighbor_large_boxes, dpk_test::SpacesAndScalars);

TEST_CASE_TEMPLATE_DEFINE("neighbours beyond sel are dropped and counted", Case, neighbor_sel_overflow) {
  using Space = typename Case::execution_space;
  using Mem = typename Case::memory_space;
  using Scalar = typename Case::scalar;
  std::mt19937 rng(42);
  double const tol = std::is_same<Scalar, double>::value ? 1e-9 : 2e-4;
  std::vector<int> const sel = {5, 0, 9};
  dpk::NeighborSearch<Scalar, Space> search(4.5, sel);
  dpk::NeighborList<Scalar, Mem> list;
  HostBatch const b = random_batch(rng, 2, 120, 3, 9.0, 11.0, true);
  search.build(Space(), make_frames<Scalar, Mem>(b), list);
  CHECK(list.dropped > 0);
  check_against_brute_force(b, 4.5, sel, list, tol);
  // Water with sel too small: DeePMD-kit would warn; we count. With {2, 3} every centre's
  // candidates overflow the search's per-type scratch regions several times.
  HostBatch const w = water_batch();
  auto nlist = dpk::read_npy(water_file("nlist.npy"));
  for (std::vector<int> const& cut : {std::vector<int>{20, 40}, std::vector<int>{2, 3}}) {
    CAPTURE(cut[0]);
    dpk::NeighborSearch<Scalar, Space> small(6.0, cut);
    small.build(Space(), make_frames<Scalar, Mem>(w), list);
    long expected = 0;
    auto h = to_host(list);
    for (int i = 0; i < 192; ++i) {
      int per_type[2] = {0, 0};
      for (int s = 0; s < 138; ++s) per_type[s < 46 ? 0 : 1] += nlist.data[138 * i + s] >= 0;
      expected += std::max(0, per_type[0] - cut[0]) + std::max(0, per_type[1] - cut[1]);
      // The kept ones are the nearest: DeePMD-kit's first slots of each block.
      for (int s = 0; s < cut[0]; ++s) CHECK(h.index(i, s) == int(nlist.data[138 * i + s]));
      for (int s = 0; s < cut[1]; ++s) CHECK(h.index(i, cut[0] + s) == int(nlist.data[138 * i + 46 + s]));
    }
    CHECK(list.dropped == expected);
  }
}
TEST_CASE_TEMPLATE_APPLY(neighbor_sel_overflow, dpk_test::SpacesAndScalars);

TEST_CASE_TEMPLATE_DEFINE("neighbour list of a batch: frames are independent", Case, neighbor_batch_frames) {
  using Space = typename Case::execution_space;
  using Mem = typename Case::memory_space;
  using Scalar = typename Case::scalar;
  // The same frame twice in a batch gives the same rows, offset by natoms.
  HostBatch const w = water_batch();
  HostBatch two = w;
  two.nframes = 2;
  two.coord.insert(two.coord.end(), w.coord.begin(), w.coord.end());
  two.box.insert(two.box.end(), w.box.begin(), w.box.end());
  two.types.insert(two.types.end(), w.types.begin(), w.types.end());
  dpk::NeighborSearch<Scalar, Space> search(6.0, {46, 92});
  dpk::NeighborList<Scalar, Mem> list;
  search.build(Space(), make_frames<Scalar, Mem>(two), list);
  auto h = to_host(list);
  for (int i = 0; i < 192; ++i)
    for (int s = 0; s < 138; ++s) {
      int const a = h.index(i, s), c = h.index(192 + i, s);
      CHECK((a < 0 ? a : a + 192) == c);
      CHECK(h.rij(i, s, 0) == h.rij(192 + i, s, 0));
    }
  check_reverse(list);
}
TEST_CASE_TEMPLATE_APPLY(neighbor_batch_frames, dpk_test::SpacesAndScalars);
