#pragma once
/// \file json.hpp
/// A small JSON value for writing summary.json (ordered keys, exact doubles) and reading JSON back
/// (`strata compare` reads the summaries of its runs; models read Hugging Face config.json files;
/// safetensors headers are JSON).

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace strata {

class Json {
 public:
  using Array = std::vector<Json>;
  using Object = std::vector<std::pair<std::string, Json>>;  // insertion order is kept

  Json() : value_(nullptr) {}
  Json(std::nullptr_t) : value_(nullptr) {}
  Json(bool b) : value_(b) {}
  Json(int i) : value_(static_cast<std::int64_t>(i)) {}
  Json(std::int64_t i) : value_(i) {}
  Json(double d) : value_(d) {}
  Json(const char* s) : value_(std::string(s)) {}
  Json(std::string s) : value_(std::move(s)) {}
  Json(Array a) : value_(std::move(a)) {}
  static Json object() { Json j; j.value_ = Object{}; return j; }
  static Json array() { Json j; j.value_ = Array{}; return j; }

  /// Object member (created, in insertion order, if absent).
  Json& operator[](const std::string& key);
  /// Appends to an array.
  void push_back(Json value);
  /// Serialized text; non-finite numbers become null. indent < 0: one line.
  std::string dump(int indent = 2) const;

  /// Parses JSON text (RFC 8259; \\u escapes outside ASCII become UTF-8). Throws strata::Error
  /// naming the offset of the first error.
  static Json parse(const std::string& text);
  /// Object member `key`, or nullptr (also when this is not an object).
  const Json* find(const std::string& key) const;
  /// Member at a dotted path ("memory.peak_bytes"), or nullptr.
  const Json* at_path(const std::string& path) const;
  bool is_null() const { return std::holds_alternative<std::nullptr_t>(value_); }
  bool is_number() const { return std::holds_alternative<std::int64_t>(value_) || std::holds_alternative<double>(value_); }
  /// The number, or `fallback` when this is not a number.
  double number_or(double fallback) const;
  /// The string, or `fallback` when this is not a string.
  std::string string_or(std::string fallback) const;
  /// The boolean, or `fallback` when this is not a boolean.
  bool bool_or(bool fallback) const;
  bool is_string() const { return std::holds_alternative<std::string>(value_); }
  /// The members of an object in order, or nullptr when this is not an object.
  const Object* members() const { return std::get_if<Object>(&value_); }
  /// The elements of an array, or nullptr when this is not an array.
  const Array* elements() const { return std::get_if<Array>(&value_); }

 private:
  void dump_to(std::string& out, int indent, int depth) const;
  std::variant<std::nullptr_t, bool, std::int64_t, double, std::string, Array, Object> value_;
};

/// JSON string literal with escapes.
std::string json_quote(const std::string& s);

}  // namespace strata
