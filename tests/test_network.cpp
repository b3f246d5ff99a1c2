#include <doctest/doctest.h>

#include "sim/network.hpp"
#include "sim_fixtures.hpp"

using namespace trainsim;
using namespace trainsim::testing;

TEST_CASE("ring all-reduce inside one node = 2(n-1)/n * S/B + 2(n-1) * alpha") {
  const Cluster cluster(toy_cluster(1, 8));
  const std::vector<CalibrationProfile> profiles{ideal_profile(2e-6, 0)};
  const AnalyticalNetwork net(cluster, profiles);
  const CommShape s = net.shape({0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(s.nodes == 1);
  CHECK(s.max_per_node == 8);
  const double bytes = 1e9;
  // 2*7/8 * 1e9 B / 100e9 B/s = 17.5 ms; 14 steps * 2 us = 28 us.
  CHECK(net.collective_seconds(s, CollectiveKind::AllReduce, bytes) == doctest::Approx(17.5e-3 + 28e-6).epsilon(0.01));
  // All-gather: (n-1)/n * S/B + (n-1) alpha = 8.75 ms + 14 us.
  CHECK(net.collective_seconds(s, CollectiveKind::AllGather, bytes) == doctest::Approx(8.75e-3 + 14e-6).epsilon(0.01));
}

TEST_CASE("a data-parallel group with one GPU per node runs at one NIC's bandwidth") {
  const Cluster cluster(toy_cluster(4, 8));
  const std::vector<CalibrationProfile> profiles{ideal_profile(0, 0)};
  const AnalyticalNetwork net(cluster, profiles);
  const CommShape s = net.shape({0, 8, 16, 24});
  CHECK(s.nodes == 4);
  CHECK(s.max_per_node == 1);
  // 2*3/4 * 1 GB / 10 GB/s = 150 ms.
  CHECK(net.collective_seconds(s, CollectiveKind::AllReduce, 1e9) == doctest::Approx(0.150).epsilon(1e-6));
  // Eight GPUs per node in the group share the node's eight NICs: 8x faster than
  // one NIC, but never faster than the scale-up links.
  std::vector<int> all;
  for (int i = 0; i < 32; ++i) all.push_back(i);
  const CommShape w = net.shape(all);
  CHECK(w.max_per_node == 8);
  // busbw = min(100 GB/s NVLink, 8 * 10 GB/s) = 80 GB/s; 2*31/32 * 1 GB / 80 GB/s.
  CHECK(net.collective_seconds(w, CollectiveKind::AllReduce, 1e9) == doctest::Approx(2.0 * 31 / 32 / 80).epsilon(1e-6));
}

TEST_CASE("all-to-all across nodes cannot aggregate NICs") {
  const Cluster cluster(toy_cluster(2, 8));
  const std::vector<CalibrationProfile> profiles{ideal_profile(0, 0)};
  const AnalyticalNetwork net(cluster, profiles);
  std::vector<int> all;
  for (int i = 0; i < 16; ++i) all.push_back(i);
  const CommShape s = net.shape(all);
  // Half of each GPU's 1 GB buffer leaves the node through its own 10 GB/s NIC: 50 ms.
  CHECK(net.collective_seconds(s, CollectiveKind::AllToAll, 1e9) == doctest::Approx(0.05).epsilon(1e-6));
}

TEST_CASE("point-to-point inside and across nodes") {
  const Cluster cluster(toy_cluster(2, 8));
  const std::vector<CalibrationProfile> profiles{ideal_profile(1e-6, 5e-6)};
  const AnalyticalNetwork net(cluster, profiles);
  CHECK(net.p2p_seconds(net.shape({0, 1}), 1e8) == doctest::Approx(6e-6 + 1e-3));
  CHECK(net.p2p_seconds(net.shape({0, 8}), 1e8) == doctest::Approx(6e-6 + 1e-2));
}
