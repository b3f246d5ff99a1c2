#include <doctest/doctest.h>

#include <stdexcept>
#include <vector>

#include "sim/executor.hpp"
#include "sim/flow_network.hpp"
#include "sim/network_model.hpp"
#include "sim_fixtures.hpp"
#include "topologies/graph.hpp"

using namespace trainsim;
using namespace trainsim::testing;

namespace {

// Two ranks on a 2-GPU node, each posting one collective (or one p2p
// message) of the given kind and size.
SimulationSetup two_rank_setup(CollectiveKind k0, std::uint64_t b0, CollectiveKind k1, std::uint64_t b1) {
  SimulationSetup setup;
  setup.comms.push_back(Communicator{"pair", {0, 1}, 2});
  const std::pair<CollectiveKind, std::uint64_t> posts[] = {{k0, b0}, {k1, b1}};
  for (const auto& [kind, bytes] : posts) {
    ProgramBuilder b("p");
    const auto comm = b.add_stream("comm");
    const auto slot = b.add_comm_slot("pair");
    b.collective(comm, slot, kind, CommClass::DP, bytes, b.add_label("sync"), 0, {});
    setup.programs.push_back(std::move(b).finish());
  }
  setup.ranks.push_back(RankProgram{"rank a", 0, 0, {0}, false});
  setup.ranks.push_back(RankProgram{"rank b", 1, 1, {0}, false});
  return setup;
}

}  // namespace

TEST_CASE("network models: both fidelities drive one executor loop to the same closed-form time") {
  const Cluster cluster(toy_cluster(1, 2));
  const std::vector<CalibrationProfile> profiles{ideal_profile()};
  const ComputeCostModel costs(cluster, profiles);
  const SimulationSetup setup =
      two_rank_setup(CollectiveKind::AllReduce, 1000000000, CollectiveKind::AllReduce, 1000000000);
  // all-reduce of 1 GB between 2 GPUs over 100 GB/s: 2*(1/2) * 1e9 / 1e11 = 10 ms.
  const AnalyticalNetwork an(cluster, profiles);
  AnalyticalNetworkModel analytical(an);
  Topology topo(cluster);
  FlowCollectives fc(cluster, topo, profiles);
  FlowNetworkModel flow(fc);
  for (NetworkModel* model : {static_cast<NetworkModel*>(&analytical), static_cast<NetworkModel*>(&flow)}) {
    CAPTURE(model->name());
    Executor ex(setup, cluster, costs, *model);
    const SimulationResult r = ex.run();
    REQUIRE(r.completed);
    CHECK(r.makespan.to_seconds() == doctest::Approx(0.010).epsilon(1e-6));
  }
}

TEST_CASE("network models: members posting different collectives stop the run and are named") {
  const Cluster cluster(toy_cluster(1, 2));
  const std::vector<CalibrationProfile> profiles{ideal_profile()};
  const ComputeCostModel costs(cluster, profiles);
  const AnalyticalNetwork an(cluster, profiles);
  SUBCASE("different byte counts") {
    const SimulationSetup setup = two_rank_setup(CollectiveKind::AllReduce, 1000, CollectiveKind::AllReduce, 2000);
    Executor ex(setup, cluster, costs, an);
    const SimulationResult r = ex.run();
    CHECK_FALSE(r.completed);
    CHECK(r.mismatch);
    REQUIRE(r.deadlock.size() == 2);
    CHECK(r.deadlock[0].rank == "rank a");
    CHECK(r.deadlock[0].reason == "posted all-reduce of 1000 bytes on pair");
    CHECK(r.deadlock[1].rank == "rank b");
    CHECK(r.deadlock[1].reason == "posted all-reduce of 2000 bytes on pair");
  }
  SUBCASE("different kinds") {
    const SimulationSetup setup = two_rank_setup(CollectiveKind::AllReduce, 1000, CollectiveKind::AllGather, 1000);
    Executor ex(setup, cluster, costs, an);
    const SimulationResult r = ex.run();
    CHECK(r.mismatch);
    REQUIRE(r.deadlock.size() == 2);
    CHECK(r.deadlock[1].reason == "posted all-gather of 1000 bytes on pair");
  }
  SUBCASE("a send and a receive of different sizes") {
    SimulationSetup setup;
    setup.comms.push_back(Communicator{"link", {0, 1}, 2});
    for (int side = 0; side < 2; ++side) {
      ProgramBuilder b("p");
      const auto s = b.add_stream("pp");
      const auto slot = b.add_comm_slot("link");
      if (side == 0) {
        b.send(s, slot, CommClass::PP, 4096, b.add_label("send"), 0, {});
      } else {
        b.recv(s, slot, CommClass::PP, 8192, b.add_label("recv"), 0, {});
      }
      setup.programs.push_back(std::move(b).finish());
    }
    setup.ranks.push_back(RankProgram{"sender", 0, 0, {0}, false});
    setup.ranks.push_back(RankProgram{"receiver", 1, 1, {0}, false});
    Executor ex(setup, cluster, costs, an);
    const SimulationResult r = ex.run();
    CHECK(r.mismatch);
    REQUIRE(r.deadlock.size() == 2);
    CHECK(r.deadlock[0].reason == "posted send of 4096 bytes on link");
    CHECK(r.deadlock[1].reason == "posted recv of 8192 bytes on link");
  }
}

TEST_CASE("flow network: a link's capacity changes at a time; its flows are re-rated") {
  // One 1 GB flow on a 10 GB/s link: alone it takes 100 ms.
  FlowNetwork net({10e9});
  const std::uint32_t path[] = {0};
  const FlowSpec spec{path, 1e9, Time{}};
  net.start(Time{}, std::span(&spec, 1), 7);
  SUBCASE("halved after 50 ms: the other half takes 100 ms") {
    net.schedule_capacity(Time::seconds(0.05), 0, 5e9);
    std::vector<TransferDone> done;
    while (net.next_event() != Time::max()) net.advance(net.next_event(), done);
    REQUIRE(done.size() == 1);
    CHECK(done[0].cookie == 7);
    CHECK(done[0].time.to_seconds() == doctest::Approx(0.150).epsilon(1e-6));
    CHECK(net.link_capacity(0) == 5e9);
  }
  SUBCASE("failed for 200 ms, then restored: the flow stalls and resumes") {
    net.schedule_capacity(Time::seconds(0.02), 0, 0.0);
    net.schedule_capacity(Time::seconds(0.22), 0, 10e9);
    std::vector<TransferDone> done;
    while (net.next_event() != Time::max()) net.advance(net.next_event(), done);
    REQUIRE(done.size() == 1);
    CHECK(done[0].time.to_seconds() == doctest::Approx(0.300).epsilon(1e-6));
  }
  SUBCASE("bad changes are refused") {
    CHECK_THROWS_AS(net.schedule_capacity(Time{}, 3, 1e9), std::invalid_argument);
    CHECK_THROWS_AS(net.schedule_capacity(Time{}, 0, -1.0), std::invalid_argument);
  }
}

TEST_CASE("network models: the analytical model refuses link capacity changes by name") {
  const Cluster cluster(toy_cluster(1, 2));
  const std::vector<CalibrationProfile> profiles{ideal_profile()};
  const AnalyticalNetwork an(cluster, profiles);
  AnalyticalNetworkModel model(an);
  try {
    model.set_link_capacity(Time::seconds(1), 4, 1e9);
    FAIL("expected an error");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("needs --fidelity flow") != std::string::npos);
  }
}
