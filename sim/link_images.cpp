#include "sim/link_images.hpp"

#include <algorithm>
#include <unordered_map>

namespace trainsim {

std::optional<LinkImages> link_images(const Topology& topology, std::vector<int> gpu_rep, int images) {
  const std::size_t nv = topology.num_vertices();
  const auto gpus = static_cast<int>(gpu_rep.size());
  int nodes = 0;
  for (std::uint32_t v = 0; v < nv; ++v) nodes = std::max(nodes, topology.vertex(v).node + 1);
  // The GPU and NIC vertices of every node, in vertex order, and each one's place among them.
  std::vector<std::vector<std::uint32_t>> gpus_of(nodes), nics_of(nodes);
  std::vector<std::uint32_t> place(nv, 0);
  for (std::uint32_t v = 0; v < nv; ++v) {
    const TopologyVertex& x = topology.vertex(v);
    if (x.node < 0 || (x.kind != VertexKind::Gpu && x.kind != VertexKind::Nic)) continue;
    auto& list = x.kind == VertexKind::Gpu ? gpus_of[x.node] : nics_of[x.node];
    place[v] = static_cast<std::uint32_t>(list.size());
    list.push_back(v);
  }
  // The node each node goes to, and whether its GPUs keep their places.
  std::vector<int> node_image(nodes, -1);
  std::vector<char> keeps_places(nodes, 1);
  for (int g = 0; g < gpus; ++g) {
    const int r = gpu_rep[g];
    if (r < 0 || r >= gpus || gpu_rep[r] != r) return std::nullopt;
    const int n = topology.vertex(static_cast<std::uint32_t>(g)).node;
    const int m = topology.vertex(static_cast<std::uint32_t>(r)).node;
    if (node_image[n] >= 0 && node_image[n] != m) return std::nullopt;  // a node split over two
    node_image[n] = m;
    keeps_places[n] = keeps_places[n] && place[g] == place[r];
  }
  // One NIC per GPU and one GPU per NIC (a NIC then follows its GPU).
  std::vector<std::uint32_t> nic_of_gpu(nv, kNoVertex), gpu_of_nic(nv, kNoVertex);
  std::vector<char> shared(nv, 0);
  for (const TopologyLink& l : topology.links()) {
    if (topology.vertex(l.from).kind != VertexKind::Gpu || topology.vertex(l.to).kind != VertexKind::Nic) continue;
    shared[l.from] = shared[l.from] || nic_of_gpu[l.from] != kNoVertex;
    shared[l.to] = shared[l.to] || gpu_of_nic[l.to] != kNoVertex;
    nic_of_gpu[l.from] = l.to;
    gpu_of_nic[l.to] = l.from;
  }
  // Vertex images: a GPU to its representative, its NIC along, the node's
  // switch to the image node's; a leaf to the leaf of its NICs' images;
  // spines and gateways stay.
  std::vector<std::uint32_t> image(nv, kNoVertex);
  for (std::uint32_t v = 0; v < nv; ++v) {
    const TopologyVertex& x = topology.vertex(v);
    if (x.kind == VertexKind::Spine || x.kind == VertexKind::Gateway) image[v] = v;
    if (x.node < 0 || node_image[x.node] < 0) {
      if (x.node >= 0) image[v] = v;  // a node without GPUs of the job's classes stays
      continue;
    }
    const int m = node_image[x.node];
    if (x.kind == VertexKind::Gpu) image[v] = static_cast<std::uint32_t>(gpu_rep[v]);
    if (x.kind == VertexKind::ScaleupSwitch) image[v] = topology.switch_vertex(m);
    if (x.kind == VertexKind::Nic) {
      const std::uint32_t g = gpu_of_nic[v];
      if (g != kNoVertex && !shared[v] && !shared[g]) {
        const std::uint32_t to = nic_of_gpu[static_cast<std::size_t>(gpu_rep[g])];
        if (to == kNoVertex || shared[to]) return std::nullopt;
        image[v] = to;
      } else if (keeps_places[x.node] && place[v] < nics_of[m].size()) {
        image[v] = nics_of[m][place[v]];
      } else {
        return std::nullopt;
      }
    }
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
    if (image[l.from] == kNoVertex) return std::nullopt;
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
  LinkImages out;
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
  out.gpu_rep = std::move(gpu_rep);
  return out;
}

}  // namespace trainsim
