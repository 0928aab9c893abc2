#include "test_support.hpp"
// How `strata compare` measures: the order of its rounds (interleaved, shuffled per round,
// reproducible from the seed), a combination's repeats aggregated, and the verdict columns
// (within noise, ranks, suspect efficiency, identical work that is not).

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "compare/aggregate.hpp"
#include "sweep/sweep.hpp"
#include "strata/registry.hpp"

namespace {

struct NoOptions {};

strata::Registry registry() {
  strata::Registry r;
  const auto none = [](const auto&) { return std::shared_ptr<strata::Strategy>(); };
  r.add_strategy("single", "one device", strata::Schema<NoOptions>{}, none, strata::Placement::one_device());
  r.add_strategy("ddp", "rank per device", strata::Schema<NoOptions>{}, none);
  r.add_strategy("zero1", "rank per device", strata::Schema<NoOptions>{}, none);
  return r;
}

/// A plan of single, ddp and zero1 at world sizes 1 and 2 (5 combinations), with `extra` in [compare].
std::pair<strata::Sweep, strata::SweepPlan> plan(const std::string& extra, std::vector<std::string> overrides = {}) {
  strata::test::TempDir dir;
  dir.write("base.toml", "");
  const auto file = dir.write("sweep.toml", "[compare]\nbase = \"base.toml\"\n" + extra +
                                                "\n[compare.axes]\nstrategy = [\"single\", \"ddp\", \"zero1\"]\n"
                                                "world_size = [1, 2]\n");
  auto sweep = strata::parse_sweep(file, overrides);
  auto p = strata::plan_sweep(sweep, registry(), "single", 1, 32);
  return {std::move(sweep), std::move(p)};
}

std::vector<std::string> labels(const std::vector<strata::SweepRun>& runs) {
  std::vector<std::string> out;
  for (const auto& r : runs) out.push_back(r.label);
  return out;
}

/// A successful run whose summary has these figures (NaN: the key is left out).
strata::RunResult run_result(double steady_step_s, double step_s = NAN, double batch = 32) {
  std::string json = fmt::format(R"({{"status": "ok", "global_batch_size": {}, "train_time_s": 1.0,
                                      "memory": {{"peak_bytes": 1000, "peak_tensor_bytes": 100}})", batch);
  if (std::isfinite(steady_step_s))
    json += fmt::format(R"(, "steady_step_time_s": {}, "steady_samples_per_s": {})", steady_step_s, batch / steady_step_s);
  if (std::isfinite(step_s)) json += fmt::format(R"(, "step_time_s": {})", step_s);
  strata::RunResult r;
  r.summary = strata::Json::parse(json + "}");
  r.status = "ok";
  return r;
}

/// The runs of cells (series@world with its steady step times); the baseline is single@1.
struct Runs {
  std::vector<strata::RunResult> results;
  std::vector<strata::MeasuredRun> runs;
  void add(const std::string& series, int world, std::vector<double> times, std::string work = "") {
    for (std::size_t i = 0; i < times.size(); ++i) {
      results.push_back(run_result(times[i]));
      runs.push_back({series, world, fmt::format("{}-w{}-r{}", series, world, i + 1), nullptr, "single", 1, work});
    }
  }
  strata::Aggregate aggregate(double threshold = 0.10, const std::string& scaling = "strong") {
    for (std::size_t i = 0; i < runs.size(); ++i) runs[i].result = &results[i];
    return strata::aggregate(runs, {scaling, threshold});
  }
};

const strata::ReportCell& report_cell(const strata::Aggregate& a, const std::string& name) {
  for (const auto& c : a.cells)
    if (c.name() == name) return c;
  FAIL("no cell " << name);
  return a.cells.front();
}

}  // namespace

TEST_CASE("rounds interleave: every combination of round r runs before round r + 1, each round shuffled") {
  const auto [sweep, p] = plan("repeats = 3");
  REQUIRE(p.combinations.size() == 5);  // single@2 does not apply
  CHECK(p.numbered);
  CHECK(p.runs.size() == 15);  // the plan itself stays combination by combination
  std::vector<std::string> schedule;
  std::vector<std::vector<std::size_t>> orders;
  for (int round = 1; round <= 3; ++round) {
    const auto runs = strata::round_runs(p, sweep.measure, round);
    REQUIRE(runs.size() == 5);
    std::set<std::size_t> seen;
    std::vector<std::size_t> order;
    for (const auto& r : runs) {
      CHECK(r.repeat == round);
      CHECK(r.label == p.combinations[r.combination].label + "-r" + std::to_string(round));
      seen.insert(r.combination);
      order.push_back(r.combination);
    }
    CHECK(seen.size() == 5);  // each combination exactly once per round
    orders.push_back(order);
    for (const auto& l : labels(runs)) schedule.push_back(l);
  }
  // Round r of every combination before any run of round r + 1.
  for (std::size_t i = 0; i < schedule.size(); ++i) CHECK(schedule[i].back() == static_cast<char>('1' + i / 5));
  // Shuffled: not the sweep's order every round, and not the same order every round.
  const std::vector<std::size_t> sweep_order{0, 1, 2, 3, 4};
  CHECK(!(orders[0] == sweep_order && orders[1] == sweep_order && orders[2] == sweep_order));
  CHECK(!(orders[0] == orders[1] && orders[1] == orders[2]));
}

TEST_CASE("the order of a round is reproducible from the seed alone, and shuffle = false keeps the sweep's") {
  // The same (seed, round) gives the same order on every call, compiler and library: mt19937_64's
  // output is fixed by the standard, the shuffle is ours. These values pin it.
  CHECK(strata::round_order(5, 0, 1) == strata::round_order(5, 0, 1));
  CHECK(strata::round_order(8, 0, 1) == std::vector<std::size_t>{5, 0, 1, 3, 7, 2, 4, 6});
  std::set<std::vector<std::size_t>> by_seed;
  for (std::int64_t seed = 0; seed < 8; ++seed) by_seed.insert(strata::round_order(8, seed, 1));
  CHECK(by_seed.size() > 4);  // other seeds, other orders
  for (int round = 1; round <= 4; ++round) {
    auto order = strata::round_order(8, 3, round);
    std::sort(order.begin(), order.end());
    CHECK(order == strata::round_order(8, 3, round, /*shuffle=*/false));  // a permutation
  }
  const auto [sweep, p] = plan("shuffle = false\nseed = 7");
  CHECK(!sweep.measure.shuffle);
  CHECK(labels(strata::round_runs(p, sweep.measure, 2)) ==
        std::vector<std::string>{"single-w1-r2", "ddp-w1-r2", "ddp-w2-r2", "zero1-w1-r2", "zero1-w2-r2"});
  const auto [seeded, q] = plan("seed = 7");
  CHECK(labels(strata::round_runs(q, seeded.measure, 1)) == labels(strata::round_runs(q, seeded.measure, 1)));
}

TEST_CASE("the measurement keys of compare: defaults, types, the auto-repeat mode, errors at their line") {
  const auto [sweep, p] = plan("");
  CHECK(sweep.repeats == 3);
  CHECK(sweep.measure.seed == 0);
  CHECK(sweep.measure.shuffle);
  CHECK(sweep.measure.warmup_run_steps == 10);
  CHECK(sweep.measure.noise_threshold == doctest::Approx(0.10));
  CHECK(!sweep.auto_repeat());
  CHECK(sweep.max_rounds() == 3);
  const auto [tight, t] = plan("repeats = 1\nnoise_threshold = 0.2", {"compare.until_tight=0.05", "compare.budget_s=60"});
  CHECK(tight.auto_repeat());
  CHECK(tight.measure.until_tight == doctest::Approx(0.05));
  CHECK(tight.measure.budget_s == doctest::Approx(60));
  CHECK(tight.measure.noise_threshold == doctest::Approx(0.2));
  CHECK(tight.max_rounds() == 10);
  CHECK(t.numbered);  // more than one round may run: labels end in -rN from the first
  CHECK(t.runs.front().label == "single-w1-r1");
  const auto [one, o] = plan("repeats = 1");
  CHECK(!o.numbered);
  CHECK(o.runs.front().label == "single-w1");
  const auto error = [](const std::string& extra, std::vector<std::string> overrides = {}) {
    try {
      plan(extra, std::move(overrides));
    } catch (const strata::ConfigError& e) {
      return fmt::format("{}:{} {} {}", e.where().line, e.where().column, e.key(), e.what());
    }
    return std::string("no error");
  };
  CHECK(error("noise_threshold = \"high\"").rfind("3:19 compare.noise_threshold noise_threshold must be a number", 0) == 0);
  CHECK(error("shuffle = 1").rfind("3:11 compare.shuffle shuffle must be a boolean", 0) == 0);
  CHECK(error("seed = -1").rfind("3:8 compare.seed", 0) == 0);
  CHECK(error("until_tight = 0.1\nmax_repeats = 2").rfind("4:15 compare.max_repeats max_repeats 2 is below repeats 3", 0) == 0);
  CHECK(error("", {"compare.until_tight=-1"}).find("until_tight must be >= 0") != std::string::npos);
  CHECK(error("until_tigth = 0.1").find("Did you mean 'until_tight'") != std::string::npos);
}

TEST_CASE("a combination's repeats: spread of the steady step time, speedup and efficiency from every pairing") {
  Runs r;
  r.add("single", 1, {0.010, 0.011, 0.012});
  r.add("ddp", 2, {0.004, 0.005, 0.006});
  const auto a = r.aggregate();
  const auto& base = report_cell(a, "single@1");
  CHECK(base.is_baseline);
  CHECK(base.runs == 3);
  CHECK(base.ok == 3);
  CHECK(base.labels == std::vector<std::string>{"single-w1-r1", "single-w1-r2", "single-w1-r3"});
  CHECK(base.step_time_s.median == doctest::Approx(0.011));
  CHECK(base.samples_per_s.max == doctest::Approx(32 / 0.010));
  CHECK(base.peak_bytes.median == doctest::Approx(1000));
  const auto& ddp = report_cell(a, "ddp@2");
  CHECK(ddp.baseline == "single@1");
  CHECK(ddp.speedup.low == doctest::Approx(0.010 / 0.006));
  CHECK(ddp.speedup.point == doctest::Approx(0.011 / 0.005));
  CHECK(ddp.speedup.high == doctest::Approx(0.012 / 0.004));
  CHECK(ddp.efficiency.point == doctest::Approx(0.011 / 0.005 / 2));
  CHECK(ddp.verdict == strata::stats::Verdict::kFaster);  // every ddp run beat every single run
  CHECK(ddp.efficiency_flag == "within noise of 100%");   // 0.83..1.5: it reaches above 100%
  // A run's own speedup: the baseline's median over its own time.
  REQUIRE(a.speedup.size() == 6);
  CHECK(*a.speedup[3] == doctest::Approx(0.011 / 0.004));
  CHECK(*a.efficiency[3] == doctest::Approx(0.011 / 0.004 / 2));
  CHECK(*a.speedup[1] == doctest::Approx(1.0));
  CHECK(a.noise.empty() == false);  // 0.010..0.012 is 18% of 0.011: the repeats of single are noisy at 10%
  CHECK(base.noisy);
  CHECK(r.aggregate(0.5).noise.empty());
}

TEST_CASE("verdicts: overlapping ranges are within noise and share a rank, above 100% beyond the noise is suspect") {
  Runs r;
  r.add("single", 1, {0.010, 0.010, 0.010});
  r.add("ddp", 1, {0.0099, 0.0101, 0.0102});    // overlaps single
  r.add("zero1", 1, {0.012, 0.013, 0.014});     // slower than both in every run
  r.add("ddp", 2, {0.0048, 0.0052, 0.0056});   // 0.89..1.04 per device
  r.add("zero1", 2, {0.0030, 0.0033, 0.0034});  // 1.47..1.67x per device: suspect
  const auto a = r.aggregate(0.10);
  CHECK(report_cell(a, "ddp@1").verdict == strata::stats::Verdict::kWithinNoise);
  CHECK(report_cell(a, "zero1@1").verdict == strata::stats::Verdict::kSlower);
  CHECK(report_cell(a, "single@1").rank == 1);
  CHECK(report_cell(a, "ddp@1").rank == 1);
  CHECK(report_cell(a, "ddp@1").within_noise_of == std::vector<std::string>{"single@1"});
  CHECK(report_cell(a, "single@1").within_noise_of == std::vector<std::string>{"ddp@1"});
  CHECK(report_cell(a, "zero1@1").rank == 3);
  CHECK(report_cell(a, "zero1@1").within_noise_of.empty());
  CHECK(report_cell(a, "zero1@2").rank == 1);  // ranked among world size 2 only
  CHECK(report_cell(a, "ddp@2").rank == 2);
  CHECK(report_cell(a, "zero1@2").suspect);
  CHECK(report_cell(a, "zero1@2").efficiency_flag == "suspect");
  CHECK(report_cell(a, "ddp@2").efficiency.low == doctest::Approx(0.010 / 0.0056 / 2));
  CHECK(report_cell(a, "ddp@2").efficiency.point < 1.0);
  CHECK(report_cell(a, "ddp@2").efficiency_flag == "within noise of 100%");  // its range reaches above 100%
  CHECK(report_cell(a, "zero1@1").efficiency_flag.empty());  // at most 100%
  // Ranks hold within the same work: another lr is another ranking.
  Runs lr;
  lr.add("single, lr=0.1", 1, {0.010}, ", lr=0.1");
  lr.add("ddp, lr=0.2", 1, {0.020}, ", lr=0.2");
  const auto b = lr.aggregate();
  CHECK(report_cell(b, "ddp, lr=0.2@1").rank == 1);
}

TEST_CASE("identical work: world-size-1 strategies whose medians differ beyond the threshold are named") {
  Runs r;
  r.add("single", 1, {0.015, 0.016, 0.015});
  r.add("ddp", 1, {0.016, 0.015, 0.016});
  r.add("zero1", 1, {0.150, 0.156, 0.152});  // the 1132% of a shared machine
  r.add("ddp", 2, {0.020, 0.021, 0.020});
  const auto a = r.aggregate(0.10);
  REQUIRE(a.noise.size() == 1);
  const auto& f = a.noise.front();
  CHECK(f.what.find("world-size-1") != std::string::npos);
  REQUIRE(f.members.size() == 3);  // ddp@2 does other work
  CHECK(f.members.front().first == "single@1");
  CHECK(f.members.back().first == "zero1@1");
  CHECK(f.members.back().second == doctest::Approx(0.152));
  CHECK(f.relative_range > 5);
  // Disjoint ranges over interleaved rounds: a steady overhead, said so (more repeats would not remove it).
  CHECK(f.note.find("zero1@1 was slower than single@1 in every run") == 0);
  Runs noisy;  // overlapping ranges: the machine's noise, no such note
  noisy.add("single", 1, {0.015, 0.040, 0.016});
  noisy.add("ddp", 1, {0.030, 0.016, 0.035});
  const auto n = noisy.aggregate(0.10);
  REQUIRE(n.noise.size() == 3);  // both cells' repeats, then the world-size-1 group
  CHECK(n.noise.back().what.find("world-size-1") == 0);
  CHECK(n.noise.back().note.empty());
  // Within the threshold: nothing.
  Runs quiet;
  quiet.add("single", 1, {0.015, 0.015, 0.015});
  quiet.add("ddp", 1, {0.0155, 0.0155, 0.0155});
  CHECK(quiet.aggregate(0.10).noise.empty());
}

TEST_CASE("summaries without steady_step_time_s fall back to step_time_s and say so, failed runs count apart") {
  Runs r;
  r.results.push_back(run_result(NAN, 0.020));
  r.runs.push_back({"single", 1, "old-r1", nullptr, "single", 1, ""});
  r.add("single", 1, {0.010});
  strata::RunResult failed;
  failed.status = "failed";
  r.results.push_back(failed);
  r.runs.push_back({"single", 1, "single-w1-r3", nullptr, "single", 1, ""});
  const auto timing = r.results.front().step_timing();
  CHECK(!timing.steady);
  CHECK(timing.step_time_s == doctest::Approx(0.020));
  CHECK(timing.samples_per_s == doctest::Approx(32 / 0.020));
  const auto a = r.aggregate();
  const auto& c = report_cell(a, "single@1");
  CHECK(!c.steady);
  CHECK(c.runs == 3);
  CHECK(c.ok == 2);
  CHECK(c.step_time_s.max == doctest::Approx(0.020));
  CHECK(a.not_steady == std::vector<std::string>{"old-r1"});
  CHECK(!a.speedup[2].has_value());
  CHECK(strata::loose_cells(a.cells, 0.05) == std::vector<std::string>{"single@1 (67%)"});
  CHECK(strata::loose_cells(a.cells, 1.0).empty());
}
