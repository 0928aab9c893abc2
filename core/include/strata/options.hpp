#pragma once
/// \file options.hpp
/// Typed options for plugins and core sections. A component declares a plain struct with default
/// member initializers and binds its fields in a Schema<T>; the host validates the TOML section
/// against the schema (unknown keys, types, ranges, choices) and hands the component a filled
/// struct. `strata describe NAME` prints the same schema, so docs and validation cannot drift.
///
/// Example:
/// \code
///   struct MlpOptions {
///     std::int64_t hidden = 256;   // width of each hidden layer
///     std::string norm = "layer";
///   };
///   strata::Schema<MlpOptions> schema;
///   schema.option("hidden", &MlpOptions::hidden, "width of each hidden layer", strata::at_least(1))
///         .option("norm", &MlpOptions::norm, "normalization", strata::one_of({"none", "layer"}));
/// \endcode

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

namespace strata {

/// The value types an option can have (TOML: boolean, integer, float, string, arrays).
enum class OptionType { kBool, kInt, kFloat, kString, kIntList, kFloatList, kStringList };

/// A validated option value; the alternative always matches the option's OptionType.
using OptionValue = std::variant<bool, std::int64_t, double, std::string, std::vector<std::int64_t>,
                                 std::vector<double>, std::vector<std::string>>;

/// Human name of a type as used in error messages and `strata describe` ("integer", ...).
const char* type_name(OptionType type) noexcept;
/// Renders a value in TOML syntax (strings quoted, arrays bracketed).
std::string to_toml(const OptionValue& value);

/// Constraints checked by the host. Bounds apply to numbers and to each element of number lists.
struct Constraint {
  std::optional<double> min;           ///< inclusive lower bound unless min_exclusive
  std::optional<double> max;           ///< inclusive upper bound unless max_exclusive
  bool min_exclusive = false;
  bool max_exclusive = false;
  std::vector<std::string> choices;    ///< allowed strings (each element for string lists); empty: any
  /// The string is a filesystem path: the host makes a relative one absolute (relative to the
  /// experiment file, or to the working directory for `--set`) before the plugin sees it, so
  /// the resolved config.toml of a run works from anywhere.
  bool path = false;
  /// Most elements of a list option (the host allows kMaxListItems when unset).
  std::optional<std::size_t> max_items;
  /// Longest string (each string of a list), in bytes (the host allows kMaxStringBytes when unset).
  std::optional<std::size_t> max_bytes;
  /// This constraint with at most `n` list elements.
  Constraint items_at_most(std::size_t n) const { Constraint c = *this; c.max_items = n; return c; }
};

/// Host-wide bounds on any option value, so that no input can make validation itself slow or
/// large: strings (paths included, as PATH_MAX) and lists.
inline constexpr std::size_t kMaxStringBytes = 4096;
inline constexpr std::size_t kMaxListItems = 4096;
/// value >= v
inline Constraint at_least(double v) { Constraint c; c.min = v; return c; }
/// value > 0
inline Constraint positive() { Constraint c; c.min = 0.0; c.min_exclusive = true; return c; }
/// lo <= value <= hi
inline Constraint between(double lo, double hi) { Constraint c; c.min = lo; c.max = hi; return c; }
/// lo <= value < hi
inline Constraint half_open(double lo, double hi) { Constraint c = between(lo, hi); c.max_exclusive = true; return c; }
/// a filesystem path (see Constraint::path); "" stays "" (meaning: the plugin's default)
inline Constraint file_path() { Constraint c; c.path = true; return c; }
/// value is one of `choices`
inline Constraint one_of(std::vector<std::string> choices) { Constraint c; c.choices = std::move(choices); return c; }

/// One documented option.
struct OptionSpec {
  std::string name;            ///< key inside the section, snake_case
  OptionType type = OptionType::kString;
  OptionValue default_value;   ///< taken from the default-constructed options struct
  std::string doc;             ///< one line, with units
  Constraint constraint;
  /// Describes the constraint for humans ("> 0", "one of: a, b"); empty when unconstrained.
  std::string constraint_text() const;
  /// Empty when `value` satisfies the constraint, else what is wrong ("must be >= 1, got 0").
  std::string check(const OptionValue& value) const;
};

/// Validated values of one section: every option of the schema is present (defaults filled in).
class Options {
 public:
  void set(const std::string& name, OptionValue value) { values_[name] = std::move(value); }
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  const OptionValue& at(const std::string& name) const;
  template <class T>
  const T& get(const std::string& name) const { return std::get<T>(at(name)); }
  const std::map<std::string, OptionValue>& values() const noexcept { return values_; }

 private:
  std::map<std::string, OptionValue> values_;
};

/// A list of option specs, type-erased from Schema<T>.
struct OptionsSchema {
  std::vector<OptionSpec> specs;
  const OptionSpec* find(const std::string& name) const {
    for (const auto& s : specs)
      if (s.name == name) return &s;
    return nullptr;
  }
  /// Options holding every default.
  Options defaults() const {
    Options o;
    for (const auto& s : specs) o.set(s.name, s.default_value);
    return o;
  }
};

namespace detail {
template <class M> constexpr OptionType option_type_of() {
  if constexpr (std::is_same_v<M, bool>) return OptionType::kBool;
  else if constexpr (std::is_same_v<M, std::int64_t>) return OptionType::kInt;
  else if constexpr (std::is_same_v<M, double>) return OptionType::kFloat;
  else if constexpr (std::is_same_v<M, std::string>) return OptionType::kString;
  else if constexpr (std::is_same_v<M, std::vector<std::int64_t>>) return OptionType::kIntList;
  else if constexpr (std::is_same_v<M, std::vector<double>>) return OptionType::kFloatList;
  else if constexpr (std::is_same_v<M, std::vector<std::string>>) return OptionType::kStringList;
  else static_assert(sizeof(M) == 0, "option members must be bool, int64_t, double, string or vectors of them");
}
}  // namespace detail

/// Binds the fields of an options struct T to documented, validated option names.
template <class T>
class Schema {
 public:
  /// Adds option `name` stored in `member`; its default is `T{}.*member`.
  template <class M>
  Schema& option(std::string name, M T::*member, std::string doc, Constraint constraint = {}) {
    OptionSpec spec;
    spec.name = std::move(name);
    spec.type = detail::option_type_of<M>();
    spec.default_value = T{}.*member;
    spec.doc = std::move(doc);
    spec.constraint = std::move(constraint);
    erased_.specs.push_back(std::move(spec));
    setters_.push_back([member](T& target, const OptionValue& v) { target.*member = std::get<M>(v); });
    getters_.push_back([member](const T& source) { return OptionValue(source.*member); });
    return *this;
  }
  const OptionsSchema& erased() const noexcept { return erased_; }
  /// Fills a T from validated options (options absent from `values` keep their defaults).
  T bind(const Options& values) const {
    T result{};
    for (std::size_t i = 0; i < setters_.size(); ++i) {
      const auto& name = erased_.specs[i].name;
      if (values.has(name)) setters_[i](result, values.at(name));
    }
    return result;
  }
  /// The values held by `source`, by option name (for writing resolved configurations).
  Options dump(const T& source) const {
    Options out;
    for (std::size_t i = 0; i < getters_.size(); ++i) out.set(erased_.specs[i].name, getters_[i](source));
    return out;
  }

 private:
  OptionsSchema erased_;
  std::vector<std::function<void(T&, const OptionValue&)>> setters_;
  std::vector<std::function<OptionValue(const T&)>> getters_;
};

}  // namespace strata
