#include "io/json.hpp"

#include <cmath>
#include <stdexcept>
#include <string_view>

#include "strata/errors.hpp"

#include <fmt/format.h>

namespace strata {

Json& Json::operator[](const std::string& key) {
  if (std::holds_alternative<std::nullptr_t>(value_)) value_ = Object{};
  auto* object = std::get_if<Object>(&value_);
  if (!object) throw std::logic_error("Json: not an object");
  for (auto& [k, v] : *object)
    if (k == key) return v;
  object->emplace_back(key, Json());
  return object->back().second;
}

void Json::push_back(Json value) {
  if (std::holds_alternative<std::nullptr_t>(value_)) value_ = Array{};
  auto* array = std::get_if<Array>(&value_);
  if (!array) throw std::logic_error("Json: not an array");
  array->push_back(std::move(value));
}

std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20) out += fmt::format("\\u{:04x}", c);
        else out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string Json::dump(int indent) const {
  std::string out;
  dump_to(out, indent, 0);
  return out;
}

namespace {

/// Shortest round-trip text of a double that reads back as a real number (32.0, not 32), as
/// Python writes it: readers that check types (transformers' config checks) see a float.
std::string double_text(double d) {
  std::string s = fmt::format("{}", d);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

}  // namespace

void Json::dump_to(std::string& out, int indent, int depth) const {
  auto newline = [&](int d) {
    if (indent >= 0) out.append("\n").append(static_cast<std::size_t>(indent * d), ' ');
  };
  if (std::holds_alternative<std::nullptr_t>(value_)) out += "null";
  else if (auto* b = std::get_if<bool>(&value_)) out += *b ? "true" : "false";
  else if (auto* i = std::get_if<std::int64_t>(&value_)) out += std::to_string(*i);
  else if (auto* d = std::get_if<double>(&value_)) out += std::isfinite(*d) ? double_text(*d) : "null";
  else if (auto* s = std::get_if<std::string>(&value_)) out += json_quote(*s);
  else if (auto* a = std::get_if<Array>(&value_)) {
    // Arrays of scalars stay on one line; arrays of containers get one element per line.
    bool flat = true;
    for (const auto& v : *a)
      if (std::holds_alternative<Array>(v.value_) || std::holds_alternative<Object>(v.value_)) flat = false;
    out += "[";
    for (std::size_t k = 0; k < a->size(); ++k) {
      if (k) out += flat ? ", " : ",";
      if (!flat) newline(depth + 1);
      (*a)[k].dump_to(out, flat ? -1 : indent, depth + 1);
    }
    if (!flat && !a->empty()) newline(depth);
    out += "]";
  } else if (auto* o = std::get_if<Object>(&value_)) {
    out += "{";
    for (std::size_t k = 0; k < o->size(); ++k) {
      if (k) out += ",";
      newline(depth + 1);
      out += json_quote((*o)[k].first) + (indent >= 0 ? ": " : ":");
      (*o)[k].second.dump_to(out, indent, depth + 1);
    }
    if (!o->empty()) newline(depth);
    out += "}";
  }
}

namespace {

class Parser {
 public:
  /// Each level is a frame of the recursive descent: a bound keeps damaged or hostile text from
  /// overflowing the stack. Strata's own files nest a few levels.
  static constexpr int kMaxDepth = 256;

  explicit Parser(const std::string& text) : t_(text) {}

  Json document() {
    Json v = value();
    space();
    if (i_ != t_.size()) fail("unexpected text after the value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(fmt::format("invalid JSON at offset {}: {}", i_, what), "The file is damaged or not JSON.");
  }
  void space() {
    while (i_ < t_.size() && (t_[i_] == ' ' || t_[i_] == '\n' || t_[i_] == '\t' || t_[i_] == '\r')) ++i_;
  }
  bool eat(char c) {
    space();
    if (i_ < t_.size() && t_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c)) fail(fmt::format("expected '{}'", c));
  }
  bool word(const char* w) {
    const std::string_view v(w);
    if (t_.compare(i_, v.size(), v) != 0) return false;
    i_ += v.size();
    return true;
  }

  Json value() {
    struct Depth {
      int& d;
      ~Depth() { --d; }
    } depth{depth_};
    if (++depth_ > kMaxDepth) fail(fmt::format("arrays and objects nested deeper than {} levels", kMaxDepth));
    space();
    if (i_ >= t_.size()) fail("unexpected end");
    const char c = t_[i_];
    if (c == '{') return object();
    if (c == '[') return array();
    if (c == '"') return Json(string());
    if (word("true")) return Json(true);
    if (word("false")) return Json(false);
    if (word("null")) return Json();
    return number();
  }

  Json object() {
    ++i_;
    Json o = Json::object();
    if (eat('}')) return o;
    do {
      space();
      if (i_ >= t_.size() || t_[i_] != '"') fail("expected a member name");
      std::string key = string();
      expect(':');
      o[key] = value();
    } while (eat(','));
    expect('}');
    return o;
  }

  Json array() {
    ++i_;
    Json a = Json::array();
    if (eat(']')) return a;
    do a.push_back(value());
    while (eat(','));
    expect(']');
    return a;
  }

  unsigned hex4() {
    if (i_ + 4 > t_.size()) fail("short \\u escape");
    unsigned v = 0;
    for (int k = 0; k < 4; ++k) {
      const char h = t_[i_++];
      v <<= 4;
      if (h >= '0' && h <= '9') v |= static_cast<unsigned>(h - '0');
      else if (h >= 'a' && h <= 'f') v |= static_cast<unsigned>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') v |= static_cast<unsigned>(h - 'A' + 10);
      else fail("bad \\u escape");
    }
    return v;
  }

  static void utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string string() {
    ++i_;  // opening quote
    std::string out;
    while (true) {
      if (i_ >= t_.size()) fail("unterminated string");
      const char c = t_[i_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= t_.size()) fail("unterminated escape");
      switch (const char e = t_[i_++]) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00 && t_.compare(i_, 2, "\\u") == 0) {
            i_ += 2;
            const unsigned low = hex4();
            if (low < 0xDC00 || low > 0xDFFF) fail("bad surrogate pair");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          utf8(out, cp);
          break;
        }
        default: fail(fmt::format("bad escape '\\{}'", e));
      }
    }
  }

  Json number() {
    const std::size_t start = i_;
    if (i_ < t_.size() && t_[i_] == '-') ++i_;
    bool integral = true;
    while (i_ < t_.size()) {
      const char c = t_[i_];
      if (c >= '0' && c <= '9') {
        ++i_;
      } else if (c == '.' || c == 'e' || c == 'E' || c == '+' || (c == '-' && i_ > start)) {
        integral = false;
        ++i_;
      } else {
        break;
      }
    }
    const std::string text = t_.substr(start, i_ - start);
    if (text.empty() || text == "-") fail("expected a value");
    std::size_t used = 0;
    try {
      if (integral) {
        const long long whole = std::stoll(text, &used);
        if (used == text.size()) return Json(static_cast<std::int64_t>(whole));
      } else {
        const double real = std::stod(text, &used);
        if (used == text.size()) return Json(real);
      }
    } catch (const std::logic_error&) {
    }
    fail("bad number '" + text + "'");
  }

  const std::string& t_;
  std::size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

Json Json::parse(const std::string& text) { return Parser(text).document(); }

const Json* Json::find(const std::string& key) const {
  const auto* object = std::get_if<Object>(&value_);
  if (!object) return nullptr;
  for (const auto& [k, v] : *object)
    if (k == key) return &v;
  return nullptr;
}

const Json* Json::at_path(const std::string& path) const {
  const Json* node = this;
  for (std::size_t start = 0; node;) {
    const auto dot = path.find('.', start);
    node = node->find(path.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return node;
}

double Json::number_or(double fallback) const {
  if (const auto* i = std::get_if<std::int64_t>(&value_)) return static_cast<double>(*i);
  if (const auto* d = std::get_if<double>(&value_)) return *d;
  return fallback;
}

bool Json::bool_or(bool fallback) const {
  const auto* b = std::get_if<bool>(&value_);
  return b != nullptr ? *b : fallback;
}

std::string Json::string_or(std::string fallback) const {
  if (const auto* s = std::get_if<std::string>(&value_)) return *s;
  return fallback;
}

}  // namespace strata
