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
}

Time AnalyticalNetworkModel::start(Time now, const TransferRequest& t, std::uint64_t) {
  const std::uint32_t what = t.what();
  auto& known = durations_[t.comm];
  for (const Duration& d : known) {
    if (d.what == what && d.bytes == t.bytes) return now + d.time;
  }
  if (!shaped_[t.comm]) {
    shapes_[t.comm] = network_->shape((*comms_)[t.comm].members);
    shaped_[t.comm] = 1;
  }
  const CommShape& shape = shapes_[t.comm];
  const double bytes = static_cast<double>(t.bytes);
  const Time duration =
      Time::seconds(t.p2p ? network_->p2p_seconds(shape, bytes) : network_->collective_seconds(shape, t.kind, bytes));
  known.push_back(Duration{what, t.bytes, duration});
  return now + duration;
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
                                : flows_->plan_collective(cm.members, t.kind, bytes, t.comm);
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
