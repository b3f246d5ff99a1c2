#include "sim/flow_network.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "sim/check.hpp"

namespace trainsim {

FlowNetwork::FlowNetwork(std::vector<double> link_capacity) {
  links_.resize(link_capacity.size());
  for (std::size_t l = 0; l < links_.size(); ++l) links_[l].capacity = link_capacity[l];
}

void FlowNetwork::set_initial_capacity(std::uint32_t link, double capacity) {
  TRAINSIM_CHECK(active_flows_ == 0 && active_transfers_ == 0 && capacity > 0,
                 "set_initial_capacity needs an idle network and a positive capacity");
  links_[link].capacity = capacity;
}

void FlowNetwork::push(std::vector<HeapEntry>& heap, HeapEntry e) {
  heap.push_back(e);
  std::push_heap(heap.begin(), heap.end(), later);
}

FlowNetwork::HeapEntry FlowNetwork::pop(std::vector<HeapEntry>& heap) {
  std::pop_heap(heap.begin(), heap.end(), later);
  const HeapEntry e = heap.back();
  heap.pop_back();
  return e;
}

std::uint32_t FlowNetwork::new_flow() {
  if (!free_flows_.empty()) {
    const std::uint32_t f = free_flows_.back();
    free_flows_.pop_back();
    return f;
  }
  flows_.emplace_back();
  return static_cast<std::uint32_t>(flows_.size() - 1);
}

TransferId FlowNetwork::start(Time now, std::span<const FlowSpec> specs, std::uint64_t cookie, Time latency) {
  TRAINSIM_CHECK(now >= now_, "a transfer starts before the flow network's current time");
  now_ = now;
  TransferId id;
  if (!free_transfers_.empty()) {
    id = free_transfers_.back();
    free_transfers_.pop_back();
  } else {
    transfers_.emplace_back();
    id = static_cast<TransferId>(transfers_.size() - 1);
  }
  ++active_transfers_;
  Transfer& t = transfers_[id];
  t.flows.clear();
  t.cookie = cookie;
  t.left = 0;
  t.finish = now + latency;
  t.active = true;
  for (const FlowSpec& s : specs) {
    const std::uint32_t f = new_flow();
    Flow& fl = flows_[f];
    transfers_[id].flows.push_back(f);
    fl.transfer = id;
    fl.latency = s.latency;
    fl.remaining = s.bytes;
    fl.rate = 0;
    fl.updated = now;
    fl.hops.clear();
    if (s.path.empty() || !(s.bytes > 0)) {
      // Nothing to send through a link: arrives after its latency alone.
      fl.active = false;
      free_flows_.push_back(f);
      Transfer& tr = transfers_[id];
      tr.finish = std::max(tr.finish, now + s.latency);
      continue;
    }
    fl.active = true;
    ++active_flows_;
    ++transfers_[id].left;
    fl.min_capacity = fl.second_capacity = std::numeric_limits<double>::infinity();
    fl.min_link = s.path.front();
    for (std::uint32_t l : s.path) {
      TRAINSIM_CHECK(l < links_.size(),
                     "a flow's path names link " + std::to_string(l) + " of " + std::to_string(links_.size()));
      if (!tracked_.empty() && tracked_[l] != 0) {
        if (links_[l].flows.empty()) busy_since_[l] = now;
        tracked_bytes_[l] += s.bytes;
      }
      const double c = links_[l].capacity;
      if (c < fl.min_capacity) {
        fl.second_capacity = fl.min_capacity;
        fl.min_capacity = c;
        fl.min_link = l;
      } else if (c < fl.second_capacity) {
        fl.second_capacity = c;
      }
      fl.hops.push_back(Hop{l, static_cast<std::uint32_t>(links_[l].flows.size())});
      links_[l].flows.push_back(f);
      seeds_.push_back(l);
    }
  }
  Transfer& tr = transfers_[id];
  if (tr.left == 0) {
    push(completions_, HeapEntry{tr.finish, seq_++, id, 0});
  } else {
    recompute(now);
    clean_drains();
  }
  return id;
}

void FlowNetwork::schedule_drain(std::uint32_t f) {
  Flow& fl = flows_[f];
  ++fl.version;
  Time t = fl.updated;
  if (fl.remaining > 0) {
    const double ns = std::ceil(fl.remaining / fl.rate * 1e9);
    t = ns < 9e18 ? fl.updated + Time::ns(static_cast<std::int64_t>(ns)) : Time::max();
  }
  fl.drain = t;
  push(drains_, HeapEntry{t, seq_++, f, fl.version});
}

void FlowNetwork::track_links(std::span<const std::uint32_t> links) {
  if (tracked_.empty()) {
    tracked_.assign(links_.size(), 0);
    tracked_bytes_.assign(links_.size(), 0.0);
    busy_since_.assign(links_.size(), Time{});
    busy_.assign(links_.size(), Time{});
  }
  for (std::uint32_t l : links) {
    TRAINSIM_CHECK(l < links_.size(), "tracking link " + std::to_string(l) + " of " + std::to_string(links_.size()));
    if (tracked_[l] == 0 && !links_[l].flows.empty()) busy_since_[l] = now_;
    tracked_[l] = 1;
  }
}

LinkLoad FlowNetwork::tracked_load(std::uint32_t link) const {
  TRAINSIM_CHECK(link < tracked_.size() && tracked_[link] != 0, "link " + std::to_string(link) + " is not tracked");
  Time busy = busy_[link];
  if (!links_[link].flows.empty()) busy += now_ - busy_since_[link];
  return LinkLoad{tracked_bytes_[link], busy.to_seconds()};
}

void FlowNetwork::drain(std::uint32_t f, Time now) {
  Flow& fl = flows_[f];
  for (const Hop& h : fl.hops) {
    auto& lf = links_[h.link].flows;
    const std::uint32_t moved = lf.back();
    lf[h.pos] = moved;
    lf.pop_back();
    if (!tracked_.empty() && tracked_[h.link] != 0 && lf.empty()) busy_[h.link] += now - busy_since_[h.link];
    if (moved != f) {
      for (Hop& mh : flows_[moved].hops) {
        if (mh.link == h.link) mh.pos = h.pos;
      }
    }
    seeds_.push_back(h.link);
  }
  fl.active = false;
  fl.remaining = 0;
  fl.rate = 0;
  ++fl.version;
  --active_flows_;
  free_flows_.push_back(f);
  Transfer& tr = transfers_[fl.transfer];
  tr.finish = std::max(tr.finish, now + fl.latency);
  if (--tr.left == 0) push(completions_, HeapEntry{tr.finish, seq_++, fl.transfer, 0});
}

// Whether `link` can never saturate with its present flows: each flow's rate
// is at most the capacity of every other link on its path, and those bounds
// sum to less than the link's capacity (with a margin well above the rounding
// of the rates). Such a link is never the one whose share freezes a flow in
// progressive filling, so leaving it out of a component changes no rate. The
// scan stops at the first flow that brings the sum to the capacity: on a link
// that can saturate it reads a few flows, on a slack one it reads the flows
// that expanding the link would have read anyway.
bool FlowNetwork::slack(std::uint32_t link) const {
  const LinkState& ls = links_[link];
  const double limit = ls.capacity * (1 - 1e-9);
  double sum = 0;
  for (const std::uint32_t f : ls.flows) {
    const Flow& fl = flows_[f];
    sum += fl.min_link == link ? fl.second_capacity : fl.min_capacity;
    if (!(sum < limit)) return false;  // also a flow bounded nowhere else (+inf)
  }
  return true;
}

void FlowNetwork::recompute(Time now) {
  if (++epoch_ == 0) {
    for (LinkState& ls : links_) ls.mark = 0;
    for (Flow& fl : flows_) fl.mark = 0;
    epoch_ = 1;
  }
  // The component: links reachable from the seeds through shared flows, but
  // not through a slack link (whose flows' rates it cannot limit). A seed is
  // always in: its flows changed, and it may have limited one before.
  comp_links_.clear();
  comp_flows_.clear();
  for (std::uint32_t l : seeds_) {
    if (links_[l].mark != epoch_) {
      links_[l].mark = epoch_;
      stack_.push_back(l);
    }
  }
  seeds_.clear();
  while (!stack_.empty()) {
    const std::uint32_t l = stack_.back();
    stack_.pop_back();
    comp_links_.push_back(l);
    for (std::uint32_t f : links_[l].flows) {
      if (flows_[f].mark == epoch_) continue;
      flows_[f].mark = epoch_;
      comp_flows_.push_back(f);
      for (const Hop& h : flows_[f].hops) {
        if (links_[h.link].mark != epoch_) {
          links_[h.link].mark = epoch_;
          if (!prune_slack_ || !slack(h.link)) stack_.push_back(h.link);
        }
      }
    }
  }
  if (comp_flows_.empty()) return;
  ++recomputations_;
  rerated_flows_ += comp_flows_.size();

  // Progressive filling: the link with the smallest fair share saturates
  // first and fixes the rate of its unfrozen flows. Freezing a flow at the
  // smallest share never lowers another link's share, so each link keeps one
  // heap entry whose key may be stale-low: a popped entry whose link's share
  // has grown goes back with the new key.
  auto heap_less = [](const ShareEntry& a, const ShareEntry& b) {
    return a.share > b.share || (a.share == b.share && a.link > b.link);
  };
  share_heap_.clear();
  for (std::uint32_t l : comp_links_) {
    links_[l].rem_cap = links_[l].capacity;
    links_[l].unfrozen = static_cast<std::uint32_t>(links_[l].flows.size());
    if (links_[l].unfrozen > 0) share_heap_.push_back(ShareEntry{links_[l].rem_cap / links_[l].unfrozen, l});
  }
  std::make_heap(share_heap_.begin(), share_heap_.end(), heap_less);
  for (std::uint32_t f : comp_flows_) flows_[f].new_rate = -1;
  while (!share_heap_.empty()) {
    std::pop_heap(share_heap_.begin(), share_heap_.end(), heap_less);
    const ShareEntry e = share_heap_.back();
    share_heap_.pop_back();
    const std::uint32_t l = e.link;
    if (links_[l].unfrozen == 0) continue;
    const double share = links_[l].rem_cap / links_[l].unfrozen;
    if (share > e.share) {
      share_heap_.push_back(ShareEntry{share, l});
      std::push_heap(share_heap_.begin(), share_heap_.end(), heap_less);
      continue;
    }
    for (std::uint32_t f : links_[l].flows) {
      if (flows_[f].new_rate >= 0) continue;
      flows_[f].new_rate = share;
      // A slack link left out of the component is updated too, unread: it is
      // set afresh whenever it is in one.
      for (const Hop& h : flows_[f].hops) {
        links_[h.link].rem_cap = std::max(0.0, links_[h.link].rem_cap - share);
        --links_[h.link].unfrozen;
      }
    }
    links_[l].unfrozen = 0;
  }

  // Re-time only the flows whose rate changed.
  for (std::uint32_t f : comp_flows_) {
    Flow& fl = flows_[f];
    const double r = flows_[f].new_rate;
    // Unchanged up to rounding (another order of the same subtractions): keep the schedule.
    if (std::abs(r - fl.rate) <= 1e-12 * fl.rate) continue;
    fl.remaining = std::max(0.0, fl.remaining - fl.rate * (now - fl.updated).to_seconds());
    fl.updated = now;
    fl.rate = r;
    ++retimed_flows_;
    schedule_drain(f);
  }
  // Stale heap entries pile up when rates change often: rebuild now and then.
  if (drains_.size() > 4 * active_flows_ + 1024) {
    std::vector<HeapEntry> keep;
    keep.reserve(active_flows_);
    for (const HeapEntry& h : drains_) {
      if (flows_[h.id].active && flows_[h.id].version == h.version) keep.push_back(h);
    }
    drains_.swap(keep);
    std::make_heap(drains_.begin(), drains_.end(), later);
  }
}

void FlowNetwork::clean_drains() {
  while (!drains_.empty()) {
    const HeapEntry& top = drains_.front();
    const Flow& fl = flows_[top.id];
    if (fl.active && fl.version == top.version) return;
    pop(drains_);
  }
}

namespace {
bool later_change(const auto& a, const auto& b) { return a.time > b.time || (a.time == b.time && a.seq > b.seq); }
}  // namespace

void FlowNetwork::schedule_capacity(Time at, std::uint32_t link, double capacity) {
  if (link >= links_.size()) throw std::invalid_argument("link " + std::to_string(link) + " does not exist");
  if (!(capacity >= 0)) throw std::invalid_argument("link capacity must be >= 0 bytes/s");
  if (at < now_) throw std::invalid_argument("a link capacity change cannot be scheduled in the past");
  changes_.push_back(CapacityChange{at, seq_++, link, capacity});
  std::push_heap(changes_.begin(), changes_.end(), later_change<CapacityChange, CapacityChange>);
}

Time FlowNetwork::next_event() const {
  // The top of drains_ is kept valid by start() and advance().
  Time t = drains_.empty() ? Time::max() : drains_.front().time;
  if (!completions_.empty()) t = std::min(t, completions_.front().time);
  if (!changes_.empty()) t = std::min(t, changes_.front().time);
  return t;
}

void FlowNetwork::advance(Time now, std::vector<TransferDone>& done) {
  for (;;) {
    clean_drains();
    const Time td = drains_.empty() ? Time::max() : drains_.front().time;
    const Time tc = completions_.empty() ? Time::max() : completions_.front().time;
    const Time tk = changes_.empty() ? Time::max() : changes_.front().time;
    const Time t = std::min({td, tc, tk});
    if (t > now || t == Time::max()) break;
    now_ = t;
    if (tk == t) {
      // Capacity changes first at equal times; flows on the link are re-rated.
      while (!changes_.empty() && changes_.front().time == tk) {
        std::pop_heap(changes_.begin(), changes_.end(), later_change<CapacityChange, CapacityChange>);
        const CapacityChange c = changes_.back();
        changes_.pop_back();
        links_[c.link].capacity = c.capacity;
        seeds_.push_back(c.link);
        prune_slack_ = false;  // the flows' recorded bounds may no longer hold
      }
      recompute(tk);
      continue;
    }
    if (td <= tc) {
      while (!drains_.empty() && drains_.front().time == td) {
        const HeapEntry e = pop(drains_);
        const Flow& fl = flows_[e.id];
        if (fl.active && fl.version == e.version) drain(e.id, td);
      }
      recompute(td);
    } else {
      const HeapEntry e = pop(completions_);
      Transfer& tr = transfers_[e.id];
      done.push_back(TransferDone{e.id, tr.cookie, e.time});
      tr.active = false;
      --active_transfers_;
      free_transfers_.push_back(e.id);
    }
  }
  clean_drains();
  now_ = std::max(now_, now);
}

double FlowNetwork::flow_rate(TransferId t, std::size_t index) const {
  const Transfer& tr = transfers_[t];
  if (!tr.active || index >= tr.flows.size()) return 0;
  const Flow& fl = flows_[tr.flows[index]];
  return fl.active && fl.transfer == t ? fl.rate : 0;
}

std::size_t FlowNetwork::memory_bytes() const {
  std::size_t b = links_.capacity() * sizeof(LinkState) + flows_.capacity() * sizeof(Flow) +
                  transfers_.capacity() * sizeof(Transfer) +
                  (drains_.capacity() + completions_.capacity()) * sizeof(HeapEntry);
  for (const LinkState& ls : links_) b += ls.flows.heap_bytes();
  for (const Flow& f : flows_) b += f.hops.heap_bytes();
  for (const Transfer& t : transfers_) b += t.flows.capacity() * sizeof(std::uint32_t);
  return b;
}

}  // namespace trainsim
