#include "sim/event_queue.hpp"

#include "sim/check.hpp"

namespace trainsim {

void EventQueue::push_in_order(Time time, std::uint32_t rank, std::uint32_t payload) {
  TRAINSIM_CHECK(head_ == fifo_.size() || fifo_.back().time <= time, "push_in_order() got an earlier time");
  if (head_ == fifo_.size()) {
    fifo_.clear();
    head_ = 0;
  } else if (head_ >= 4096 && 2 * head_ >= fifo_.size()) {
    fifo_.erase(fifo_.begin(), fifo_.begin() + static_cast<std::ptrdiff_t>(head_));
    head_ = 0;
  }
  fifo_.push_back(Event{time, next_seq_++, rank, payload});
}

namespace {
// (time, sequence) order without branches: the heap's child choice is data
// dependent and mispredicts half the time when written with && and ||.
inline bool earlier(const Event& a, const Event& b) {
  return (static_cast<unsigned>(a.time < b.time) |
          (static_cast<unsigned>(a.time == b.time) & static_cast<unsigned>(a.seq < b.seq))) != 0;
}
}  // namespace

Event EventQueue::pop() {
  if (from_fifo()) return fifo_[head_++];
  const Event out = heap_.front();
  const Event last = heap_.back();
  heap_.pop_back();
  const std::size_t n = heap_.size();
  if (n == 0) return out;
  // Bottom-up: move the hole at the root down along the earlier children to a
  // leaf (one comparison per level), then sift the last event up from there.
  // Keys are unique, so the pop order is the same as a top-down sift's.
  std::size_t i = 0;
  for (;;) {
    std::size_t child = 2 * i + 1;
    if (child + 1 < n) {
      child += static_cast<std::size_t>(earlier(heap_[child + 1], heap_[child]));
    } else if (child >= n) {
      break;
    }
    heap_[i] = heap_[child];
    i = child;
  }
  while (i > 0) {
    const std::size_t parent = (i - 1) / 2;
    if (!earlier(last, heap_[parent])) break;
    heap_[i] = heap_[parent];
    i = parent;
  }
  heap_[i] = last;
  return out;
}

void EventQueue::sift_up(std::size_t i) {
  const Event e = heap_[i];
  while (i > 0) {
    const std::size_t parent = (i - 1) / 2;
    if (!earlier(e, heap_[parent])) break;
    heap_[i] = heap_[parent];
    i = parent;
  }
  heap_[i] = e;
}

}  // namespace trainsim
