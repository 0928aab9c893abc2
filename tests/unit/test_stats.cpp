#include "test_support.hpp"
// The arithmetic of comparisons: spreads over repeats, ratio intervals from the runs, the
// "within noise" verdict, suspect efficiencies and identical work that is not.

#include <cmath>

#include "compare/stats.hpp"

namespace st = strata::stats;

TEST_CASE("a spread is min, quartiles, median and max of the finite values") {
  const auto s = st::spread({4.0, 1.0, NAN, 3.0, 2.0, INFINITY});
  CHECK(s.n == 4);
  CHECK(s.min == 1.0);
  CHECK(s.max == 4.0);
  CHECK(s.median == doctest::Approx(2.5));
  CHECK(s.q1 == doctest::Approx(1.75));  // numpy.quantile([1,2,3,4], 0.25)
  CHECK(s.q3 == doctest::Approx(3.25));
  CHECK(s.relative_range() == doctest::Approx(3.0 / 2.5));
  const auto one = st::spread({7.0});
  CHECK((one.min == 7.0 && one.median == 7.0 && one.max == 7.0 && one.n == 1));
  CHECK(one.relative_range() == 0.0);
  const auto none = st::spread({NAN});
  CHECK(none.n == 0);
  CHECK(std::isnan(none.median));
  CHECK(std::isnan(none.relative_range()));
}

TEST_CASE("a ratio's interval pairs every run of one side with every run of the other") {
  // Speedup = T(baseline) / T(run): baseline 10..12 s, run 4..6 s.
  const auto baseline = st::spread({10.0, 11.0, 12.0});
  const auto run = st::spread({4.0, 5.0, 6.0});
  const auto speedup = st::ratio(baseline, run);
  CHECK(speedup.point == doctest::Approx(11.0 / 5.0));
  CHECK(speedup.low == doctest::Approx(10.0 / 6.0));
  CHECK(speedup.high == doctest::Approx(12.0 / 4.0));
  CHECK(speedup.contains(2.2));
  const auto efficiency = st::scaled(speedup, 1.0 / 2);  // world 2 against a baseline at 1
  CHECK(efficiency.low == doctest::Approx(10.0 / 6.0 / 2));
  CHECK(efficiency.high == doctest::Approx(1.5));
  CHECK(std::isnan(st::ratio(baseline, st::spread({})).point));
  CHECK(std::isnan(st::ratio(baseline, st::spread({0.0, 1.0})).low));  // a zero time divides nothing
}

TEST_CASE("two results whose ranges overlap are within noise, not ranked") {
  const auto a = st::spread({1.0, 1.2, 1.4});
  CHECK(st::compare_times(a, st::spread({1.3, 1.5, 1.6})) == st::Verdict::kWithinNoise);
  CHECK(st::compare_times(a, st::spread({1.5, 1.6})) == st::Verdict::kFaster);
  CHECK(st::compare_times(st::spread({2.0, 2.1}), a) == st::Verdict::kSlower);
  CHECK(st::compare_times(a, st::spread({})) == st::Verdict::kUnknown);
  CHECK(std::string(st::verdict_name(st::Verdict::kWithinNoise)) == "within noise");
  CHECK(st::overlap(st::range(a), {1.4, 1.5, 1.6}));   // touching ends overlap
  CHECK_FALSE(st::overlap(st::range(a), {1.41, 1.5, 1.6}));
}

TEST_CASE("an efficiency above 100 percent is suspect only beyond the noise band") {
  CHECK(st::suspect_efficiency({1.05, 1.2, 1.4}));
  CHECK_FALSE(st::suspect_efficiency({0.9, 1.2, 1.4}));      // the band reaches below 1: within noise
  CHECK_FALSE(st::suspect_efficiency({1.05, 1.2, 1.4}, 0.1));  // within a stated tolerance
  CHECK_FALSE(st::suspect_efficiency({NAN, NAN, NAN}));
}

TEST_CASE("identical work that spreads beyond the threshold is named, slowest last") {
  // World-size-1 strategies doing the same work: 15 ms to 156 ms is machine noise, not a result.
  const auto found = st::identical_work_noise(
      "world size 1", {{"single", 0.156}, {"zero1-w1", 0.015}, {"ddp-w1", 0.020}, {"fsdp-w1", NAN}}, 0.10);
  REQUIRE(found.has_value());
  CHECK(found->members.size() == 3);
  CHECK(found->members.front().first == "zero1-w1");
  CHECK(found->members.back().first == "single");
  CHECK(found->relative_range == doctest::Approx((0.156 - 0.015) / 0.020));
  CHECK_FALSE(st::identical_work_noise("repeats of ddp-w2", {{"r0", 1.00}, {"r1", 1.05}, {"r2", 1.08}}, 0.10));
  CHECK_FALSE(st::identical_work_noise("alone", {{"r0", 1.0}}, 0.10));
}
