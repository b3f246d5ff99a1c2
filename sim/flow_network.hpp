#pragma once
// A flow-level network: transfers made of flows on fixed paths of links,
// sharing link capacity max-min fairly (docs/network.md).
//
// - Rates come from progressive filling (raise every unfrozen flow's rate
//   together; when a link saturates, freeze its flows), which gives the unique
//   max-min fair allocation.
// - When flows arrive or depart, only the connected component of links and
//   flows they touch (links joined by a common flow) is recomputed; flows whose
//   rate did not change keep their scheduled drain time. A flow keeps its
//   remaining bytes and the time they were last brought up to date.
// - A link that cannot saturate does not join a component through its flows:
//   its flows' bounds elsewhere (each flow's smallest capacity on the rest of
//   its path) sum to less than its capacity, so it never limits a rate and
//   the flows beyond it keep their max-min rates.
// - A flow drains its bytes at its rate, then arrives `latency` later (path
//   propagation plus whatever fixed cost the caller adds). A transfer completes
//   when its last flow arrives.
// - Times are integer nanoseconds; a drain is rounded up to the next
//   nanosecond. Everything is indexed by dense ids and processed in id or
//   (time, sequence) order, so runs are deterministic.
#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "sim/time.hpp"

namespace trainsim {

struct FlowSpec {
  std::span<const std::uint32_t> path;  // link ids, in order; empty = infinitely fast
  double bytes = 0;
  Time latency;  // added after the last byte drains
};

using TransferId = std::uint32_t;

// What a tracked link carried: bytes of the flows started on it, and the time
// it spent carrying at least one flow.
struct LinkLoad {
  double bytes = 0;
  double busy_s = 0;
};

struct TransferDone {
  TransferId id = 0;
  std::uint64_t cookie = 0;
  Time time;
};

class FlowNetwork {
 public:
  // Capacity of each link, bytes/s (> 0).
  explicit FlowNetwork(std::vector<double> link_capacity);

  // Starts a transfer at `now` (>= the last advance). `cookie` comes back on
  // completion. A transfer without flows completes at now + `latency`.
  TransferId start(Time now, std::span<const FlowSpec> flows, std::uint64_t cookie, Time latency = {});
  // From `at` (>= the last advance) link `link` carries `capacity` bytes/s
  // (>= 0; 0 stalls its flows until a later change restores it). Rates of the
  // flows sharing a component with the link are recomputed then.
  void schedule_capacity(Time at, std::uint32_t link, double capacity);
  double link_capacity(std::uint32_t link) const { return links_[link].capacity; }
  // Sets a link's capacity (> 0) before any transfer has started (a quotient
  // of the cluster by a symmetry, sim/link_images.hpp).
  void set_initial_capacity(std::uint32_t link, double capacity);
  // Earliest time at which a flow drains, a transfer completes or a link
  // changes capacity; Time::max() when idle.
  Time next_event() const;
  // Processes everything up to and including `now`; appends the transfers
  // completed by then, in (completion time, start order).
  void advance(Time now, std::vector<TransferDone>& done);

  Time now() const { return now_; }
  std::size_t active_flows() const { return active_flows_; }
  std::size_t active_transfers() const { return active_transfers_; }
  std::size_t num_links() const { return links_.size(); }
  // Current rate (bytes/s) of flow `index` of a running transfer; 0 once it drained.
  double flow_rate(TransferId t, std::size_t index) const;
  // Counters: rate recomputations, flows whose rate they re-derived, flows whose rate changed.
  std::uint64_t recomputations() const { return recomputations_; }
  std::uint64_t rerated_flows() const { return rerated_flows_; }
  std::uint64_t retimed_flows() const { return retimed_flows_; }
  // From now on, count the bytes and the busy time of links `links` (WAN
  // utilisation in the report); untracked links pay one test per hop.
  void track_links(std::span<const std::uint32_t> links);
  // Load of a tracked link up to the last advance.
  LinkLoad tracked_load(std::uint32_t link) const;
  // Bytes held by the network's own state (for the memory budget).
  std::size_t memory_bytes() const;

 private:
  struct Hop {
    std::uint32_t link, pos;  // pos: index of this flow in links_[link].flows
  };
  // A flow's hops, held in the flow up to kInline (every route inside one
  // datacenter, relays included), so that draining and re-rating a flow do
  // not miss the cache on a separate allocation.
  class HopList {
   public:
    static constexpr std::uint32_t kInline = 8;
    void clear() {
      size_ = 0;
      more_.clear();
    }
    void push_back(Hop h) {
      if (size_ < kInline) {
        inline_[size_] = h;
      } else {
        if (size_ == kInline) more_.assign(inline_.begin(), inline_.end());
        more_.push_back(h);
      }
      ++size_;
    }
    Hop* begin() { return size_ <= kInline ? inline_.data() : more_.data(); }
    Hop* end() { return begin() + size_; }
    const Hop* begin() const { return size_ <= kInline ? inline_.data() : more_.data(); }
    const Hop* end() const { return begin() + size_; }
    std::size_t heap_bytes() const { return more_.capacity() * sizeof(Hop); }

   private:
    std::array<Hop, kInline> inline_{};
    std::uint32_t size_ = 0;
    std::vector<Hop> more_;  // every hop, when more than kInline
  };
  struct Flow {
    HopList hops;
    double remaining = 0;  // bytes at `updated`
    double rate = 0;       // bytes/s
    Time updated;
    Time drain;  // scheduled drain time
    Time latency;
    TransferId transfer = 0;
    std::uint32_t version = 0;
    std::uint32_t mark = 0;  // recompute(): visited in this epoch
    double new_rate = 0;     // recompute(): the rate being derived, -1 until frozen
    // The two smallest capacities on the path (the second +inf for a one-link
    // path) and the link of the smallest: the flow's bound off each link (slack()).
    double min_capacity = 0, second_capacity = 0;
    std::uint32_t min_link = 0;
    bool active = false;
  };
  // The flows on a link, held in the link up to kInline (most links carry one
  // or two), so that draining a flow touches one cache line per hop.
  class FlowList {
   public:
    static constexpr std::uint32_t kInline = 4;
    std::uint32_t size() const { return size_; }
    bool empty() const { return size_ == 0; }
    std::size_t heap_bytes() const { return heap_ ? cap_ * sizeof(std::uint32_t) : 0; }
    std::uint32_t* begin() { return heap_ ? heap_.get() : inline_.data(); }
    std::uint32_t* end() { return begin() + size_; }
    const std::uint32_t* begin() const { return heap_ ? heap_.get() : inline_.data(); }
    const std::uint32_t* end() const { return begin() + size_; }
    std::uint32_t& operator[](std::uint32_t i) { return begin()[i]; }
    std::uint32_t back() const { return begin()[size_ - 1]; }
    void pop_back() { --size_; }
    void push_back(std::uint32_t f) {
      if (size_ == cap_) {
        auto grown = std::make_unique<std::uint32_t[]>(2 * static_cast<std::size_t>(cap_));
        std::copy(begin(), end(), grown.get());
        heap_ = std::move(grown);
        cap_ *= 2;
      }
      begin()[size_++] = f;
    }

   private:
    std::uint32_t size_ = 0, cap_ = kInline;
    std::array<std::uint32_t, kInline> inline_{};
    std::unique_ptr<std::uint32_t[]> heap_;  // every flow, once more than kInline
  };
  // What recomputations read of a link, side by side (one cache line).
  struct LinkState {
    double capacity = 0;
    double rem_cap = 0;          // recompute(): capacity not yet given to frozen flows
    std::uint32_t unfrozen = 0;  // recompute(): flows not yet frozen
    std::uint32_t mark = 0;      // recompute(): visited in this epoch
    FlowList flows;
  };
  struct Transfer {
    std::vector<std::uint32_t> flows;
    std::uint64_t cookie = 0;
    std::uint32_t left = 0;  // flows not drained yet
    Time finish;             // latest arrival so far
    bool active = false;
  };
  struct HeapEntry {
    Time time;
    std::uint64_t seq;
    std::uint32_t id, version;
  };
  // Without branches: heap operations choose among children on it.
  static bool later(const HeapEntry& a, const HeapEntry& b) {
    return (static_cast<unsigned>(a.time > b.time) |
            (static_cast<unsigned>(a.time == b.time) & static_cast<unsigned>(a.seq > b.seq))) != 0;
  }

  std::uint32_t new_flow();
  void schedule_drain(std::uint32_t f);
  void drain(std::uint32_t f, Time now);
  void recompute(Time now);  // over the component of the links in seeds_
  bool slack(std::uint32_t link) const;
  void clean_drains();
  void push(std::vector<HeapEntry>& heap, HeapEntry e);
  HeapEntry pop(std::vector<HeapEntry>& heap);

  std::vector<LinkState> links_;
  std::vector<Flow> flows_;
  std::vector<std::uint32_t> free_flows_;
  std::vector<Transfer> transfers_;
  std::vector<TransferId> free_transfers_;
  std::vector<HeapEntry> drains_, completions_;
  struct CapacityChange {
    Time time;
    std::uint64_t seq;
    std::uint32_t link;
    double capacity;
  };
  std::vector<CapacityChange> changes_;  // heap, earliest first
  std::uint64_t seq_ = 0;
  Time now_;
  std::size_t active_flows_ = 0, active_transfers_ = 0;

  // Scratch for recompute(): seeds, visit marks, the component, progressive filling.
  std::vector<std::uint32_t> seeds_;
  std::uint32_t epoch_ = 0;
  std::vector<std::uint32_t> comp_links_, comp_flows_, stack_;
  struct ShareEntry {
    double share;
    std::uint32_t link;
  };
  std::vector<ShareEntry> share_heap_;
  std::uint64_t recomputations_ = 0, rerated_flows_ = 0, retimed_flows_ = 0;
  // Whether slack links bound components: until a capacity changes mid-run
  // (the flows' recorded bounds then go stale).
  bool prune_slack_ = true;
  // Tracked links (empty when none): flag, bytes, start of the current busy spell, busy time before it.
  std::vector<std::uint8_t> tracked_;
  std::vector<double> tracked_bytes_;
  std::vector<Time> busy_since_, busy_;
};

}  // namespace trainsim
