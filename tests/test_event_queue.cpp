#include <doctest/doctest.h>

#include <algorithm>
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

TEST_CASE("events pushed in order pop exactly where plain pushes would") {
  // Two queues get the same events (random times; every third one, with a
  // non-decreasing time, through push_in_order on the first): the pop
  // sequences must match, ties included.
  EventQueue mixed, plain;
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> step(0, 3), ahead(0, 50), coin(0, 2);
  Time now, in_order;
  std::vector<std::uint32_t> a, b;
  for (std::uint32_t i = 0; i < 30000; ++i) {
    if (coin(rng) == 0) {
      in_order = std::max(in_order, now) + Time::ns(step(rng));
      mixed.push_in_order(in_order, 0, i);
      plain.push(in_order, 0, i);
    } else {
      const Time t = now + Time::ns(ahead(rng));
      mixed.push(t, 0, i);
      plain.push(t, 0, i);
    }
    if (i % 2 == 1) {
      const Event x = mixed.pop(), y = plain.pop();
      now = x.time;
      a.push_back(x.payload);
      b.push_back(y.payload);
    }
  }
  while (!mixed.empty()) a.push_back(mixed.pop().payload);
  while (!plain.empty()) b.push_back(plain.pop().payload);
  CHECK(a.size() == 30000);
  CHECK(a == b);
}
