#pragma once
// Replica images at flow fidelity (docs/network.md, "Group representatives"):
// where a permutation group of nodes maps the cluster graph and every rank's
// traffic onto itself (shifting the data-parallel index by a fixed step), the
// max-min fair rates are invariant under it, so a flow's images run at its
// rate. The flow model then keeps the flows that leave a representative node,
// each on the images of its links on the representatives' side, and gives a
// link that several images of one flow would cross (a leaf's up-links when
// the nodes under the leaf are permuted) its capacity divided by how many do:
// the same link loads, the same rates, the same times as every rank.
#include <cstdint>
#include <optional>
#include <vector>

#include "topologies/graph.hpp"

namespace trainsim {

struct NodeImages {
  int images = 1;                       // order of the group: the images of each representative node
  std::vector<int> node_rep;            // per node: the representative of its class (itself for one)
  std::vector<std::uint32_t> link_rep;  // per link: its image on the representatives' side
  std::vector<double> capacity;         // per link: its capacity in the quotient (read on representative links)
};

// The link images for `node_rep` (node -> representative of its class under a
// group of `images` node permutations that keep every GPU's and NIC's index
// in its node). nullopt when a link has no image of the same capacity and
// latency, a leaf's nodes map under several leaves, or two links join the
// same pair of vertices.
std::optional<NodeImages> node_images(const Topology& topology, std::vector<int> node_rep, int images);

}  // namespace trainsim
