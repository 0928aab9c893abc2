// `strata compare --estimate`: predictions paired with measured cells, and the errors reported.
#include <doctest/doctest.h>

#include <cmath>

#include "compare/accuracy.hpp"

namespace {

strata::ReportCell accuracy_cell(const std::string& series, int world, std::vector<double> times, double peak) {
  strata::ReportCell c;
  c.series = series;
  c.world_size = world;
  c.runs = c.ok = times.size();
  c.step_time_s = strata::stats::spread(std::move(times));
  c.peak_tensor_bytes = strata::stats::spread({peak});
  return c;
}

strata::Json row(const std::string& strategy, int world, double step, double peak, double process = 0,
                 bool applicable = true) {
  strata::Json r = strata::Json::object();
  r["strategy"] = strategy;
  r["world_size"] = world;
  r["applicable"] = applicable;
  r["step_time_s"] = step;
  r["memory"] = strata::Json::object();
  r["memory"]["peak_bytes"] = peak;
  if (process > 0) r["memory"]["process_peak_bytes"] = process;
  return r;
}

}  // namespace

TEST_CASE("accuracy: each cell's prediction against its median, medians over world sizes above 1") {
  strata::Json e = strata::Json::object();
  e["rows"] = strata::Json::array();
  e["rows"].push_back(row("single", 1, 0.010, 1000));
  e["rows"].push_back(row("ddp", 2, 0.011, 1100));          // +10% time, +10% memory
  e["rows"].push_back(row("zero3", 2, 0.015, 600));         // -25% time, -40% memory
  e["rows"].push_back(row("dp", 2, 0.012, 800, 1500));      // the process's figure is the one compared
  e["rows"].push_back(row("ddp", 3, 0.020, 900, 0, false)); // not applicable: no row
  const std::vector<strata::ReportCell> cells = {
      accuracy_cell("single", 1, {0.009, 0.010, 0.012}, 1000),
      accuracy_cell("ddp", 2, {0.010, 0.0101, 0.0099}, 1000),
      accuracy_cell("zero3", 2, {0.020}, 1000),
      accuracy_cell("dp", 2, {0.012}, 1500),
      accuracy_cell("ddp", 3, {0.02}, 900),
      accuracy_cell("ddp, lr=0.1", 2, {0.01}, 1000)};
  const auto a = strata::accuracy(cells, e);
  REQUIRE(a.rows.size() == 4);
  CHECK(a.rows[0].time_error() == doctest::Approx(0.0));
  CHECK(a.rows[1].time_error() == doctest::Approx(0.10));
  CHECK(a.rows[1].memory_error() == doctest::Approx(0.10));
  CHECK(a.rows[2].time_error() == doctest::Approx(-0.25));
  CHECK(a.rows[3].process_bytes);
  CHECK(a.rows[3].memory_error() == doctest::Approx(0.0));
  // Over ddp@2, zero3@2 and dp@2 (single@1 is the profile's own cell): |errors| 0.10, 0.25, 0.
  CHECK(a.counted == 3);
  CHECK(a.median_time_error == doctest::Approx(0.10));
  CHECK(a.median_memory_error == doctest::Approx(0.10));
  REQUIRE(a.unmatched.size() == 1);
  CHECK(a.unmatched[0] == "ddp, lr=0.1@2");
  const std::string md = strata::accuracy_markdown(a);
  CHECK(md.find("| zero3 | 2 | 15.00 | 20.00 | 0.0% | -25.0% |") != std::string::npos);
  CHECK(md.find("| ddp | 2 | 11.00 | 10.00 | 2.0% | +10.0% |") != std::string::npos);
  CHECK(md.find("step time 10.0%, peak memory 10.0%") != std::string::npos);
  CHECK(md.find("Worst step time: zero3@2 (-25.0%), ddp@2 (+10.0%), dp@2 (+0.0%).") != std::string::npos);
  CHECK(md.find("| dp | 2 | 12.00 | 12.00 | 0.0% | +0.0% | 0.00 (process) |") != std::string::npos);
  // Per strategy: one cell each here.
  REQUIRE(a.strategies.size() == 3);
  CHECK(a.strategies[0].strategy == "ddp");
  CHECK(a.strategies[0].median_time_error == doctest::Approx(0.10));
  CHECK(md.find("| zero3 | 1 | 25.0% | 40.0% | 0 |") != std::string::npos);
  CHECK(strata::accuracy_csv(a).find("zero3,2,0.015,0.02,-0.25") != std::string::npos);
}

TEST_CASE("accuracy: no cell above world size 1 leaves the medians undefined, not zero") {
  strata::Json e = strata::Json::object();
  e["rows"] = strata::Json::array();
  e["rows"].push_back(row("single", 1, 0.010, 1000));
  const auto a = strata::accuracy({accuracy_cell("single", 1, {0.01}, 1000)}, e);
  CHECK(a.counted == 0);
  CHECK(std::isnan(a.median_time_error));
  CHECK(strata::accuracy_markdown(a).find("step time n/a, peak memory n/a") != std::string::npos);
}

TEST_CASE("accuracy: a sweep of one device counts its strategies at world size 1 other than the baseline") {
  strata::Json e = strata::Json::object();
  e["baseline"] = "single@1";
  e["rows"] = strata::Json::array();
  e["rows"].push_back(row("single", 1, 0.010, 1000));
  e["rows"].push_back(row("ddp", 1, 0.011, 1200));    // +10% time, +20% memory
  e["rows"].push_back(row("zero3", 1, 0.009, 900));   // -40% time, -10% memory
  e["rows"].push_back(row("fsdp", 1, 0.012, 1000));   // +20% time, 0 memory
  const auto a = strata::accuracy({accuracy_cell("single", 1, {0.02}, 2000), accuracy_cell("ddp", 1, {0.01}, 1000),
                                   accuracy_cell("zero3", 1, {0.015}, 1000), accuracy_cell("fsdp", 1, {0.01}, 1000)},
                                  e);
  CHECK(a.counted_world_1);
  CHECK(a.counted == 3);  // single@1, the profile's own run, is left out although it is off by -50%
  CHECK(a.median_time_error == doctest::Approx(0.20));
  CHECK(a.median_memory_error == doctest::Approx(0.10));
  const std::string md = strata::accuracy_markdown(a);
  CHECK(md.find("over the 3 cells at world size 1 other than the baseline's whose measured spread is within 3%: step "
                "time 20.0%") != std::string::npos);
  CHECK(md.find("Worst step time: zero3@1 (-40.0%), fsdp@1 (+20.0%), ddp@1 (+10.0%).") != std::string::npos);
}

TEST_CASE("accuracy: a cell noisier than 3% is reported apart, out of the medians, per strategy too") {
  strata::Json e = strata::Json::object();
  e["rows"] = strata::Json::array();
  e["rows"].push_back(row("single", 1, 0.010, 1000));
  e["rows"].push_back(row("ddp", 2, 0.011, 1000));    // +10% against a tight cell
  e["rows"].push_back(row("ddp", 3, 0.010, 1000));    // -50% against a cell spread 40%
  e["rows"].push_back(row("zero3", 2, 0.0102, 1000)); // +2%
  const auto a = strata::accuracy({accuracy_cell("single", 1, {0.01}, 1000),
                                   accuracy_cell("ddp", 2, {0.0100, 0.0101, 0.0100}, 1000),
                                   accuracy_cell("ddp", 3, {0.016, 0.020, 0.024}, 1000),
                                   accuracy_cell("zero3", 2, {0.01}, 1000)},
                                  e);
  REQUIRE(a.rows.size() == 4);
  CHECK_FALSE(a.rows[1].noisy);
  CHECK(a.rows[2].noisy);
  CHECK(a.rows[2].spread == doctest::Approx(0.40));
  CHECK(a.counted == 2);  // ddp@2 and zero3@2; ddp@3 is apart
  CHECK(a.median_time_error == doctest::Approx(0.06));
  REQUIRE(a.strategies.size() == 2);
  CHECK(a.strategies[0].cells == 1);
  CHECK(a.strategies[0].noisy == 1);
  CHECK(a.strategies[0].median_time_error == doctest::Approx(0.10));
  const std::string md = strata::accuracy_markdown(a);
  CHECK(md.find("| ddp | 1 | 10.0% | 0.0% | 1 |") != std::string::npos);
  CHECK(md.find("Noisier than 3% (reported apart, out of the medians): ddp@3 (spread 40%, error -50.0%).") !=
        std::string::npos);
  CHECK(md.find("Worst step time: ddp@2 (+10.0%), zero3@2 (+2.0%).") != std::string::npos);
  CHECK(strata::accuracy_csv(a).find(",0.4,true") != std::string::npos);
}
