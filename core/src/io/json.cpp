#include "io/json.hpp"

#include <cmath>
#include <stdexcept>

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

void Json::dump_to(std::string& out, int indent, int depth) const {
  auto newline = [&](int d) {
    if (indent >= 0) out += "\n" + std::string(static_cast<std::size_t>(indent * d), ' ');
  };
  if (std::holds_alternative<std::nullptr_t>(value_)) out += "null";
  else if (auto* b = std::get_if<bool>(&value_)) out += *b ? "true" : "false";
  else if (auto* i = std::get_if<std::int64_t>(&value_)) out += std::to_string(*i);
  else if (auto* d = std::get_if<double>(&value_)) out += std::isfinite(*d) ? fmt::format("{}", *d) : "null";
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

}  // namespace strata
