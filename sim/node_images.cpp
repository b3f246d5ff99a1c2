#include "sim/node_images.hpp"

#include <unordered_map>

namespace trainsim {

std::optional<NodeImages> node_images(const Topology& topology, std::vector<int> node_rep, int images) {
  const auto nodes = static_cast<int>(node_rep.size());
  const std::size_t nv = topology.num_vertices();
  // The GPU and NIC vertices of every node, in vertex order, and each one's place among them.
  std::vector<std::vector<std::uint32_t>> gpus_of(nodes), nics_of(nodes);
  std::vector<std::uint32_t> place(nv, 0);
  for (std::uint32_t v = 0; v < nv; ++v) {
    const TopologyVertex& x = topology.vertex(v);
    if (x.node < 0 || x.node >= nodes || (x.kind != VertexKind::Gpu && x.kind != VertexKind::Nic)) continue;
    auto& list = x.kind == VertexKind::Gpu ? gpus_of[x.node] : nics_of[x.node];
    place[v] = static_cast<std::uint32_t>(list.size());
    list.push_back(v);
  }
  for (int n = 0; n < nodes; ++n) {
    const int r = node_rep[n];
    if (r < 0 || r >= nodes || node_rep[r] != r || gpus_of[r].size() != gpus_of[n].size() ||
        nics_of[r].size() != nics_of[n].size()) {
      return std::nullopt;
    }
  }
  // Vertex images: a node's vertices to the same ones of its representative;
  // a leaf to the leaf of its NICs' images; spines and gateways stay.
  std::vector<std::uint32_t> image(nv, kNoVertex);
  for (std::uint32_t v = 0; v < nv; ++v) {
    const TopologyVertex& x = topology.vertex(v);
    if (x.kind == VertexKind::Gpu) image[v] = gpus_of[node_rep[x.node]][place[v]];
    if (x.kind == VertexKind::Nic) image[v] = nics_of[node_rep[x.node]][place[v]];
    if (x.kind == VertexKind::ScaleupSwitch) image[v] = topology.switch_vertex(node_rep[x.node]);
    if (x.kind == VertexKind::Spine || x.kind == VertexKind::Gateway) image[v] = v;
  }
  std::vector<std::uint32_t> leaf_of_nic(nv, kNoVertex);
  for (const TopologyLink& l : topology.links()) {
    if (topology.vertex(l.from).kind == VertexKind::Nic && topology.vertex(l.to).kind == VertexKind::Leaf) {
      if (leaf_of_nic[l.from] != kNoVertex) return std::nullopt;  // a NIC under two leaves
      leaf_of_nic[l.from] = l.to;
    }
  }
  for (const TopologyLink& l : topology.links()) {
    if (topology.vertex(l.from).kind != VertexKind::Nic || topology.vertex(l.to).kind != VertexKind::Leaf) continue;
    const std::uint32_t leaf = leaf_of_nic[image[l.from]];
    if (leaf == kNoVertex || (image[l.to] != kNoVertex && image[l.to] != leaf)) return std::nullopt;
    image[l.to] = leaf;
  }
  std::unordered_map<std::uint64_t, std::uint32_t> link_between;
  auto key = [](std::uint32_t a, std::uint32_t b) { return (static_cast<std::uint64_t>(a) << 32) | b; };
  const auto nl = static_cast<std::uint32_t>(topology.num_links());
  for (std::uint32_t l = 0; l < nl; ++l) {
    if (!link_between.emplace(key(topology.link(l).from, topology.link(l).to), l).second) return std::nullopt;
  }
  NodeImages out;
  out.images = images;
  out.link_rep.assign(nl, 0);
  out.capacity.assign(nl, 0);
  std::vector<int> preimages(nl, 0);
  for (std::uint32_t l = 0; l < nl; ++l) {
    const TopologyLink& link = topology.link(l);
    if (image[link.from] == kNoVertex || image[link.to] == kNoVertex) return std::nullopt;
    const auto it = link_between.find(key(image[link.from], image[link.to]));
    if (it == link_between.end()) return std::nullopt;
    const TopologyLink& rep = topology.link(it->second);
    if (rep.capacity != link.capacity || rep.latency != link.latency) return std::nullopt;
    out.link_rep[l] = it->second;
    ++preimages[it->second];
  }
  // A representative link stands for its class of links (its preimages),
  // which the images of one flow cross images / (class size) times each: its
  // capacity scales alike. Links that stand for none keep theirs (unused).
  for (std::uint32_t l = 0; l < nl; ++l) {
    const double c = topology.link(l).capacity;
    out.capacity[l] = preimages[l] == 0 || preimages[l] == images ? c : c * preimages[l] / images;
  }
  out.node_rep = std::move(node_rep);
  return out;
}

}  // namespace trainsim
