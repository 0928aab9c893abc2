// The JSON writer behind summary.json.
#include "test_support.hpp"

#include <cmath>

#include "io/json.hpp"

TEST_CASE("json objects keep insertion order and escape strings") {
  strata::Json j = strata::Json::object();
  j["b"] = 1;
  j["a"] = "x\"y\n";
  j["nested"]["k"] = true;
  CHECK(j.dump(-1) == R"({"b":1,"a":"x\"y\n","nested":{"k":true}})");
}

TEST_CASE("json numbers round-trip and non-finite values become null") {
  strata::Json j = strata::Json::object();
  j["d"] = 0.1;
  j["n"] = std::nan("");
  j["i"] = std::int64_t{1} << 40;
  CHECK(j.dump(-1) == R"({"d":0.1,"n":null,"i":1099511627776})");
  strata::Json a = strata::Json::array();
  a.push_back(strata::Json::Array{strata::Json(1), strata::Json(2.5)});
  CHECK(a.dump(2) == "[\n  [1, 2.5]\n]");
}
