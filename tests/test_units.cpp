#include <doctest/doctest.h>

#include "tools/frontend/units.hpp"

using namespace trainsim;

TEST_CASE("quantities with units parse to base units") {
  CHECK(*parse_quantity("400Gbps", Quantity::Bandwidth).value == doctest::Approx(50e9));
  CHECK(*parse_quantity("450GB/s", Quantity::Bandwidth).value == doctest::Approx(450e9));
  CHECK(*parse_quantity("80GiB", Quantity::Bytes).value == doctest::Approx(80.0 * 1073741824.0));
  CHECK(*parse_quantity("40MB", Quantity::Bytes).value == doctest::Approx(40e6));
  CHECK(*parse_quantity("1.5us", Quantity::Time).value == doctest::Approx(1.5e-6));
  CHECK(*parse_quantity("20 ms", Quantity::Time).value == doctest::Approx(0.02));
  CHECK(*parse_quantity("989TFLOPS", Quantity::Flops).value == doctest::Approx(989e12));
  CHECK(*parse_quantity("1e3B", Quantity::Bytes).value == doctest::Approx(1000));
  CHECK(*parse_quantity("2.5e-3s", Quantity::Time).value == doctest::Approx(2.5e-3));
}

TEST_CASE("bad quantities say why") {
  const auto a = parse_quantity("400Gbs", Quantity::Bandwidth);
  CHECK_FALSE(a.value.has_value());
  CHECK(a.error.find("unknown unit \"Gbs\"") != std::string::npos);
  CHECK(a.error.find("Gbps") != std::string::npos);
  const auto b = parse_quantity("fast", Quantity::Bandwidth);
  CHECK_FALSE(b.value.has_value());
  CHECK(b.error.find("does not start with a number") != std::string::npos);
  CHECK_FALSE(parse_quantity("80GiB", Quantity::Time).value.has_value());  // right unit, wrong kind
}

TEST_CASE("a quantity whose value in base units overflows a double is refused, never infinity") {
  const auto a = parse_quantity("1e300TB", Quantity::Bytes);
  CHECK_FALSE(a.value.has_value());
  CHECK(a.error.find("beyond the range of a double") != std::string::npos);
  CHECK_FALSE(parse_quantity("1e400GB/s", Quantity::Bandwidth).value.has_value());
  CHECK_FALSE(parse_quantity("-1e300PFLOPS", Quantity::Flops).value.has_value());
  CHECK(parse_quantity("1e300B", Quantity::Bytes).value == 1e300);
}

TEST_CASE("a number without a unit is refused unless it is 0") {
  for (const char* text : {"1", "1e3", "400", "0.5"}) {
    CAPTURE(text);
    const auto q = parse_quantity(text, Quantity::Time);
    CHECK_FALSE(q.value.has_value());
    CHECK(q.error.find("has no unit; a bare number is only allowed for 0") != std::string::npos);
  }
  for (const char* text : {"0", "0.0", "0e3"}) {
    CAPTURE(text);
    const auto q = parse_quantity(text, Quantity::Bandwidth);
    REQUIRE(q.value.has_value());
    CHECK(*q.value == 0.0);
  }
  CHECK(*parse_quantity("0us", Quantity::Time).value == 0.0);
  CHECK(expected_with_unit(Quantity::Time) == "a duration with a unit such as \"0.5us\"");
  CHECK(expected_with_unit(Quantity::Bandwidth).find("400Gbps") != std::string::npos);
}
