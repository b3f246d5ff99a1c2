#include "sim/network_model.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace trainsim {

void AnalyticalNetworkModel::bind(const std::vector<Communicator>& comms) {
  comms_ = &comms;
  shapes_.assign(comms.size(), CommShape{});
  shaped_.assign(comms.size(), 0);
  durations_.assign(comms.size(), {});
  shift_period_ = network_->shift_period();
  shaped_ids_.clear();
}

const CommShape& AnalyticalNetworkModel::shape_of(std::uint32_t comm) {
  if (shaped_[comm]) return shapes_[comm];
  const std::vector<int>& members = (*comms_)[comm].members;
  bool found = false;
  // A communicator whose members are those of one already shaped shifted by a
  // multiple of the shift period has its shape (AnalyticalNetwork::shift_period):
  // the data-parallel groups of a big cluster's stages, one per stage.
  for (std::size_t i = 0; i < shaped_ids_.size() && shift_period_ > 0 && !found; ++i) {
    const std::vector<int>& other = (*comms_)[shaped_ids_[i]].members;
    if (other.size() != members.size() || members.empty()) continue;
    const int shift = members[0] - other[0];
    if (shift % shift_period_ != 0) continue;
    // Every member moved by `shift`: one pass without an early exit, which
    // the compiler vectorises (thousands of members per data-parallel group).
    int moved_otherwise = 0;
    for (std::size_t j = 1; j < members.size(); ++j) moved_otherwise |= (members[j] - other[j]) ^ shift;
    if (moved_otherwise == 0) {
      shapes_[comm] = shapes_[shaped_ids_[i]];
      found = true;
    }
  }
  if (!found) {
    shapes_[comm] = network_->shape(members);
    shaped_ids_.push_back(comm);
  }
  shaped_[comm] = 1;
  return shapes_[comm];
}

Time AnalyticalNetworkModel::start(Time now, const TransferRequest& t, std::uint64_t) { return now + duration(t); }

Time AnalyticalNetworkModel::duration(const TransferRequest& t) {
  const std::uint32_t what = t.what();
  auto& known = durations_[t.comm];
  for (const Duration& d : known) {
    if (d.what == what && d.bytes == t.bytes) return d.time;
  }
  const CommShape& shape = shape_of(t.comm);
  const double bytes = static_cast<double>(t.bytes);
  const Time duration =
      Time::seconds(t.p2p                   ? network_->p2p_seconds(shape, bytes)
                    : t.matrix != kNoMatrix ? network_->all_to_all_v_seconds(shape, (*comms_)[t.comm].members, t.pairs)
                                            : network_->collective_seconds(shape, t.kind, bytes));
  known.push_back(Duration{what, t.bytes, duration});
  return duration;
}

void AnalyticalNetworkModel::set_link_capacity(Time, std::uint32_t link, double) {
  throw std::invalid_argument("the analytical network model has no links: a capacity change of link " +
                              std::to_string(link) + " needs --fidelity flow");
}

FlowNetworkModel::FlowNetworkModel(const Cluster& cluster, Topology& topology,
                                   const std::vector<CalibrationProfile>& profiles)
    : owned_(std::make_unique<FlowCollectives>(cluster, topology, profiles)), flows_(owned_.get()) {}

void FlowNetworkModel::bind(const std::vector<Communicator>& comms) {
  comms_ = &comms;
  plans_.assign(comms.size(), {});
}

void FlowNetworkModel::set_simulated_gpus(std::span<const int> gpus) {
  simulated_gpu_.clear();
  for (int g : gpus) {
    if (static_cast<std::size_t>(g) >= simulated_gpu_.size()) simulated_gpu_.resize(static_cast<std::size_t>(g) + 1, 0);
    simulated_gpu_[static_cast<std::size_t>(g)] = 1;
  }
}

namespace {
// Group representatives: of a plan for a communicator whose unsimulated
// members each stand for a simulated one, keep per phase the flows that leave
// or reach a simulated GPU (the others are their images); a phase that has
// none keeps all its flows.
void keep_simulated_flows(CollectivePlan& plan, const std::vector<char>& simulated) {
  auto simulated_vertex = [&](std::uint32_t v) { return v < simulated.size() && simulated[v] != 0; };
  std::vector<PlannedFlow> kept;
  std::vector<std::uint32_t> ends;
  std::size_t first = 0;
  for (std::size_t ph = 0; ph < plan.phases(); ++ph) {
    const std::size_t end = plan.phase_end[ph];
    const std::size_t before = kept.size();
    for (std::size_t f = first; f < end; ++f) {
      if (simulated_vertex(plan.flows[f].src) || simulated_vertex(plan.flows[f].dst)) kept.push_back(plan.flows[f]);
    }
    if (kept.size() == before)
      kept.insert(kept.end(), plan.flows.begin() + static_cast<std::ptrdiff_t>(first),
                  plan.flows.begin() + static_cast<std::ptrdiff_t>(end));
    ends.push_back(static_cast<std::uint32_t>(kept.size()));
    first = end;
  }
  plan.flows = std::move(kept);
  plan.phase_end = std::move(ends);
}
// Rank images (sim/link_images.hpp): keep per phase the flows of the
// representative GPUs (leaving one, or reaching one from a switch), each on
// the images of its links. False where the plan is not symmetric under the
// GPU permutations (a double binary tree of a communicator spanning the
// classes has a root) or a route would cross one link's image twice.
bool keep_image_flows(CollectivePlan& plan, bool spans_classes, const LinkImages& images, Topology& topology) {
  if (spans_classes && plan.algorithm == FlowAlgorithm::Tree) return false;
  std::vector<PlannedFlow> kept;
  std::vector<std::uint32_t> ends;
  std::vector<std::uint32_t> links;
  std::size_t first = 0;
  for (std::size_t ph = 0; ph < plan.phases(); ++ph) {
    const std::size_t end = plan.phase_end[ph];
    const std::size_t before = kept.size();
    for (std::size_t f = first; f < end; ++f) {
      PlannedFlow flow = plan.flows[f];
      const std::uint32_t gpu = topology.vertex(flow.src).kind == VertexKind::Gpu ? flow.src : flow.dst;
      if (topology.vertex(gpu).kind != VertexKind::Gpu) return false;
      if (images.gpu_rep[gpu] != static_cast<int>(gpu)) continue;
      links.clear();
      bool moved = false;
      for (std::uint32_t l : topology.links_of(flow.route)) {
        const std::uint32_t image = images.link_rep[l];
        if (std::find(links.begin(), links.end(), image) != links.end()) return false;
        moved = moved || image != l;
        links.push_back(image);
      }
      if (moved) flow.route = topology.add_route(links, flow.route.latency);
      kept.push_back(flow);
    }
    if (kept.size() == before && end > first) return false;
    ends.push_back(static_cast<std::uint32_t>(kept.size()));
    first = end;
  }
  plan.flows = std::move(kept);
  plan.phase_end = std::move(ends);
  return true;
}
}  // namespace

void FlowNetworkModel::set_link_images(LinkImages images) {
  FlowNetwork& net = flows_->network();
  for (std::uint32_t l = 0; l < images.capacity.size(); ++l) {
    if (images.capacity[l] != net.link_capacity(l)) net.set_initial_capacity(l, images.capacity[l]);
  }
  images_ = std::move(images);
}

Time FlowNetworkModel::start(Time now, const TransferRequest& t, std::uint64_t cookie) {
  const auto key = std::make_pair(t.what(), t.bytes);
  auto& plans = plans_[t.comm];
  PlanId id = 0;
  bool found = false;
  for (const auto& [k, pid] : plans) {
    if (k == key) {
      id = pid;
      found = true;
      break;
    }
  }
  if (!found) {
    const Communicator& cm = (*comms_)[t.comm];
    const double bytes = static_cast<double>(t.bytes);
    CollectivePlan plan = t.p2p ? flows_->plan_p2p(cm.members[t.sender], cm.members[1 - t.sender], bytes, t.comm)
                          : t.matrix != kNoMatrix ? flows_->plan_all_to_all_v(cm.members, t.pairs, t.comm)
                                                  : flows_->plan_collective(cm.members, t.kind, bytes, t.comm);
    const bool partial = static_cast<std::size_t>(cm.simulated_members) < cm.members.size();
    if (images_) {
      if (!keep_image_flows(plan, partial, *images_, flows_->topology())) images_failed_ = true;
    } else if (!simulated_gpu_.empty() && partial) {
      keep_simulated_flows(plan, simulated_gpu_);
    }
    id = flows_->add_plan(std::move(plan));
    plans.emplace_back(key, id);
  }
  flows_->start(now, id, cookie);
  return Time::max();
}

void FlowNetworkModel::set_link_capacity(Time at, std::uint32_t link, double capacity) {
  flows_->network().schedule_capacity(at, link, capacity);
}

std::vector<LinkLoad> FlowNetworkModel::link_loads(const std::vector<std::uint32_t>& links) const {
  std::vector<LinkLoad> out;
  out.reserve(links.size());
  for (std::uint32_t l : links) out.push_back(flows_->network().tracked_load(l));
  return out;
}

}  // namespace trainsim
