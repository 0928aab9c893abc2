#include "strata/options.hpp"

#include <cmath>
#include <sstream>

#include <fmt/format.h>

#include "strata/errors.hpp"
#include "text/suggest.hpp"

namespace strata {

const char* type_name(OptionType type) noexcept {
  switch (type) {
    case OptionType::kBool: return "boolean";
    case OptionType::kInt: return "integer";
    case OptionType::kFloat: return "float";
    case OptionType::kString: return "string";
    case OptionType::kIntList: return "array of integers";
    case OptionType::kFloatList: return "array of floats";
    case OptionType::kStringList: return "array of strings";
  }
  return "?";
}

namespace {
/// "[a, b]". Built with append: GCC 12 warns (-Wrestrict, a false positive) on `"[" + s + "]"`.
std::string bracketed(const std::vector<std::string>& items) {
  std::string out = "[";
  out.append(detail::join(items)).append("]");
  return out;
}
std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}
std::string number(double v) {
  // Shortest text that reads back to the same double; keep a '.' so TOML sees a float.
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}
}  // namespace

std::string to_toml(const OptionValue& value) {
  struct Visitor {
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(std::int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const { return number(d); }
    std::string operator()(const std::string& s) const { return quote(s); }
    std::string operator()(const std::vector<std::int64_t>& v) const {
      std::vector<std::string> items;
      for (auto i : v) items.push_back(std::to_string(i));
      return bracketed(items);
    }
    std::string operator()(const std::vector<double>& v) const {
      std::vector<std::string> items;
      for (auto d : v) items.push_back(number(d));
      return bracketed(items);
    }
    std::string operator()(const std::vector<std::string>& v) const {
      std::vector<std::string> items;
      for (const auto& s : v) items.push_back(quote(s));
      return bracketed(items);
    }
  };
  return std::visit(Visitor{}, value);
}

std::string OptionSpec::constraint_text() const {
  std::vector<std::string> parts;
  const auto& c = constraint;
  if (c.min) parts.push_back(fmt::format("{} {}", c.min_exclusive ? ">" : ">=", *c.min));
  if (c.max) parts.push_back(fmt::format("{} {}", c.max_exclusive ? "<" : "<=", *c.max));
  if (!c.choices.empty()) parts.push_back("one of: " + detail::join(c.choices));
  if (c.path) parts.push_back("a path; relative to the experiment file");
  if (c.max_items) parts.push_back(fmt::format("at most {} elements", *c.max_items));
  return detail::join(parts, " and ");
}

namespace {
std::string check_number(const OptionSpec& spec, double v) {
  const auto& c = spec.constraint;
  if (!std::isfinite(v)) return fmt::format("must be a finite number, got {}", v);
  bool low = c.min && (c.min_exclusive ? v <= *c.min : v < *c.min);
  bool high = c.max && (c.max_exclusive ? v >= *c.max : v > *c.max);
  if (low || high) return fmt::format("must be {}, got {}", spec.constraint_text(), v);
  return {};
}
std::string check_choice(const OptionSpec& spec, const std::string& s) {
  const auto& choices = spec.constraint.choices;
  if (choices.empty()) return {};
  for (const auto& c : choices)
    if (c == s) return {};
  return fmt::format("must be one of: {}; got \"{}\".{}", detail::join(choices), detail::shown(s),
                     detail::did_you_mean(s, choices));
}
}  // namespace

std::string OptionSpec::check(const OptionValue& value) const {
  const std::size_t max_items = constraint.max_items.value_or(kMaxListItems);
  const std::size_t max_bytes = constraint.max_bytes.value_or(kMaxStringBytes);
  const auto too_long = [&](const std::string& s) {
    return s.size() > max_bytes ? fmt::format("must be at most {} bytes long, got {}", max_bytes, s.size())
                                : std::string();
  };
  std::size_t items = 0;
  if (auto* v = std::get_if<std::vector<std::int64_t>>(&value)) items = v->size();
  if (auto* v = std::get_if<std::vector<double>>(&value)) items = v->size();
  if (auto* v = std::get_if<std::vector<std::string>>(&value)) items = v->size();
  if (items > max_items) return fmt::format("must have at most {} elements, got {}", max_items, items);
  if (auto* s = std::get_if<std::string>(&value))
    if (auto e = too_long(*s); !e.empty()) return e;
  if (auto* v = std::get_if<std::vector<std::string>>(&value))
    for (const auto& s : *v)
      if (auto e = too_long(s); !e.empty()) return "each element " + e;
  if (auto* i = std::get_if<std::int64_t>(&value)) return check_number(*this, static_cast<double>(*i));
  if (auto* d = std::get_if<double>(&value)) return check_number(*this, *d);
  if (auto* s = std::get_if<std::string>(&value)) return check_choice(*this, *s);
  if (auto* v = std::get_if<std::vector<std::int64_t>>(&value))
    for (auto i : *v)
      if (auto e = check_number(*this, static_cast<double>(i)); !e.empty()) return "each element " + e;
  if (auto* v = std::get_if<std::vector<double>>(&value))
    for (auto d : *v)
      if (auto e = check_number(*this, d); !e.empty()) return "each element " + e;
  if (auto* v = std::get_if<std::vector<std::string>>(&value))
    for (const auto& s : *v)
      if (auto e = check_choice(*this, s); !e.empty()) return "each element " + e;
  return {};
}

const OptionValue& Options::at(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) throw Error("internal: option '" + name + "' was not validated");
  return it->second;
}

}  // namespace strata
