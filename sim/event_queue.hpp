#pragma once
// A flat binary heap of small POD events ordered by (time, insertion sequence):
// ties resolve in insertion order, so every run replays identically.
#include <cstdint>
#include <vector>

#include "sim/time.hpp"

namespace trainsim {

struct Event {
  Time time;
  std::uint64_t seq = 0;
  std::uint32_t rank = 0;     // simulated rank index
  std::uint32_t payload = 0;  // task index within the rank's program
};

class EventQueue {
 public:
  void push(Time time, std::uint32_t rank, std::uint32_t payload) {
    heap_.push_back(Event{time, next_seq_++, rank, payload});
    sift_up(heap_.size() - 1);
  }
  bool empty() const { return heap_.empty(); }
  std::size_t size() const { return heap_.size(); }
  const Event& top() const { return heap_.front(); }
  Event pop();
  void reserve(std::size_t n) { heap_.reserve(n); }
  std::uint64_t pushed() const { return next_seq_; }

 private:
  static bool before(const Event& a, const Event& b) { return a.time < b.time || (a.time == b.time && a.seq < b.seq); }
  void sift_up(std::size_t i);
  void sift_down(std::size_t i);

  std::vector<Event> heap_;
  std::uint64_t next_seq_ = 0;
};

}  // namespace trainsim
