// The JSON writer behind summary.json.
#include "test_support.hpp"

#include <cmath>

#include "io/json.hpp"
#include "strata/errors.hpp"

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

TEST_CASE("json parse reads back what dump writes") {
  strata::Json j = strata::Json::object();
  j["name"] = "a \"quoted\"\n\tvalue";
  j["int"] = std::int64_t{-42};
  j["real"] = 0.1;
  j["none"] = strata::Json();
  j["flag"] = true;
  j["nested"]["list"] = strata::Json::Array{strata::Json(1), strata::Json(2.5), strata::Json("x")};
  const auto back = strata::Json::parse(j.dump());
  CHECK(back.dump() == j.dump());
  CHECK(back.find("real")->number_or(0) == 0.1);
  CHECK(back.at_path("nested.list") != nullptr);
  CHECK(back.at_path("nested.missing") == nullptr);
  CHECK(back.find("name")->string_or("") == "a \"quoted\"\n\tvalue");
  CHECK(back.find("none")->is_null());
  CHECK(strata::Json::parse(R"("\u00e9\ud83d\ude00")").string_or("") == "\xc3\xa9\xf0\x9f\x98\x80");
}

TEST_CASE("json parse rejects malformed text with the offset") {
  for (const char* bad : {"", "{", "[1,]", "{\"a\" 1}", "01x", "\"open", "nul", "{} x", "1e"}) {
    INFO(bad);
    CHECK_THROWS_AS(strata::Json::parse(bad), strata::Error);
  }
  try {
    strata::Json::parse("[1, 2, ?]");
    FAIL("no error");
  } catch (const strata::Error& e) {
    CHECK(std::string(e.what()).find("offset 7") != std::string::npos);
  }
}

TEST_CASE("json parse bounds nesting: deep text is an error, not a stack overflow") {
  for (const std::string& open : {std::string("["), std::string("{\"k\":")}) {
    const std::string deep = [&] {
      std::string text;
      for (int i = 0; i < 150000; ++i) text += open;
      return text + "1";
    }();
    try {
      strata::Json::parse(deep);
      FAIL("no error");
    } catch (const strata::Error& e) {
      CHECK(std::string(e.what()).find("nested deeper than 256 levels") != std::string::npos);
    }
  }
  std::string fits;
  for (int i = 0; i < 255; ++i) fits = "[" + fits + "]";
  CHECK(strata::Json::parse(fits).elements() != nullptr);
}
