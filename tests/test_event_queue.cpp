#include <doctest/doctest.h>

#include <random>
#include <vector>

#include "sim/event_queue.hpp"

using namespace trainsim;

TEST_CASE("events pop in time order, ties in insertion order") {
  EventQueue q;
  q.push(Time::ns(30), 0, 1);
  q.push(Time::ns(10), 0, 2);
  q.push(Time::ns(30), 0, 3);
  q.push(Time::ns(20), 0, 4);
  q.push(Time::ns(10), 0, 5);
  std::vector<std::uint32_t> order;
  while (!q.empty()) order.push_back(q.pop().payload);
  CHECK(order == std::vector<std::uint32_t>{2, 5, 4, 1, 3});
}

TEST_CASE("a random mix of pushes and pops stays sorted by (time, sequence)") {
  EventQueue q;
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<int> t(0, 1000);
  Time last;
  std::uint64_t last_seq = 0;
  int popped = 0;
  for (int i = 0; i < 20000; ++i) {
    q.push(last + Time::ns(t(rng)), 0, static_cast<std::uint32_t>(i));
    if (i % 3 == 0) {
      const Event e = q.pop();
      CHECK((e.time > last || (e.time == last && e.seq > last_seq) || popped == 0));
      last = e.time;
      last_seq = e.seq;
      ++popped;
    }
  }
  while (!q.empty()) {
    const Event e = q.pop();
    REQUIRE((e.time > last || (e.time == last && e.seq > last_seq)));
    last = e.time;
    last_seq = e.seq;
  }
}
