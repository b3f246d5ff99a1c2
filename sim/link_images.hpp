#pragma once
// Images of ranks at flow fidelity (docs/network.md, "Group representatives"):
// where a permutation group of GPUs (shifting the data-parallel index by a
// fixed step, rotating the TP index inside each node) maps the cluster graph
// and every rank's traffic onto itself, the max-min fair rates are invariant
// under it, so a flow's images run at its rate. The flow model then keeps the
// flows of the representative GPUs (those leaving one, or reaching one from a
// switch), each on the images of its links on the representatives' side, and
// gives a link that several images of one flow would cross (a leaf's up-links
// when the nodes under the leaf are permuted) its capacity divided by how
// many do: the same link loads, the same rates, the same times as every rank.
#include <cstdint>
#include <optional>
#include <vector>

#include "topologies/graph.hpp"

namespace trainsim {

struct LinkImages {
  int images = 1;                       // order of the group: the images of each representative GPU
  std::vector<int> gpu_rep;             // per GPU: the representative of its class (itself for one)
  std::vector<std::uint32_t> link_rep;  // per link: its image on the representatives' side
  std::vector<double> capacity;         // per link: its capacity in the quotient (read on representative links)
};

// The link images for `gpu_rep` (GPU -> representative of its class under a
// group of `images` GPU permutations, each moving whole nodes and permuting
// the GPUs inside a node alike in every node). A GPU's links go to its
// representative's, a NIC of one GPU to that of the image GPU (a shared NIC
// keeps its place, the node's GPUs then must keep theirs), a leaf to the leaf
// of its NICs' images. nullopt when a link has no image of the same capacity
// and latency, a leaf's NICs map under several leaves, or two links join the
// same pair of vertices.
std::optional<LinkImages> link_images(const Topology& topology, std::vector<int> gpu_rep, int images);

}  // namespace trainsim
