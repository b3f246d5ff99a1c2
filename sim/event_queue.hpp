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
  // Pushes an event no earlier than any event pushed this way before (the
  // network's completions, reported in time order). It waits in a FIFO that
  // top() and pop() merge with the heap by (time, sequence): the same order as
  // push() gives, without a heap insertion and removal per event.
  void push_in_order(Time time, std::uint32_t rank, std::uint32_t payload);
  bool empty() const { return heap_.empty() && head_ == fifo_.size(); }
  std::size_t size() const { return heap_.size() + (fifo_.size() - head_); }
  const Event& top() const { return from_fifo() ? fifo_[head_] : heap_.front(); }
  Event pop();
  void reserve(std::size_t n) { heap_.reserve(n); }
  std::uint64_t pushed() const { return next_seq_; }

 private:
  static bool before(const Event& a, const Event& b) { return a.time < b.time || (a.time == b.time && a.seq < b.seq); }
  bool from_fifo() const { return head_ < fifo_.size() && (heap_.empty() || before(fifo_[head_], heap_.front())); }
  void sift_up(std::size_t i);

  std::vector<Event> heap_;
  std::vector<Event> fifo_;  // [head_, end) pending, in (time, sequence) order
  std::size_t head_ = 0;
  std::uint64_t next_seq_ = 0;
};

}  // namespace trainsim
