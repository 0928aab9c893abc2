#include <string>

#include "strata/errors.hpp"
#include "text/errors_text.hpp"
#include "text/suggest.hpp"

namespace strata::detail {

std::string exception_text(const std::exception& e) {
  std::string text = e.what();
  // c10::Error appends where it was raised and, with TORCH_SHOW_CPP_STACKTRACES, C++ frames;
  // c10's enforce failures start with the source line ("[enforce fail at alloc_cpu.cpp:117] ").
  for (const char* marker : {"Exception raised from ", "\nframe #", "frame #0", "(no backtrace available)"})
    if (auto pos = text.find(marker); pos != std::string::npos) text.erase(pos);
  if (text.rfind("[enforce fail at ", 0) == 0)
    if (auto end = text.find("] "); end != std::string::npos) text.erase(0, end + 2);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

std::string format_error(const std::exception& e) {
  std::string where;
  if (const auto* c = dynamic_cast<const ConfigError*>(&e)) {
    where = c->where().str();
    if (!c->key().empty()) where += (where.empty() ? "" : ": ") + shown(c->key(), 120);
  } else if (const auto* p = dynamic_cast<const PluginError*>(&e)) {
    where = p->library();
  } else if (const auto* t = dynamic_cast<const TrainingError*>(&e)) {
    where = "step " + std::to_string(t->step());
  }
  // Each part on its own line: a newline inside a value (or a message quoting one) is escaped, so
  // that no input can split the paragraph or forge a "fix:" line.
  constexpr std::size_t kWhole = 1 << 20;
  std::string out = "error: ";
  if (!where.empty()) out += shown(where, kWhole) + ": ";
  out += shown(exception_text(e), kWhole);
  if (const auto* s = dynamic_cast<const Error*>(&e); s && !s->fix().empty()) out += "\n  fix: " + shown(s->fix(), kWhole);
  return terminal_safe(out);
}

int exit_code_of(const std::exception& e) {
  if (const auto* s = dynamic_cast<const Error*>(&e)) return s->exit_code();
  return 1;
}

}  // namespace strata::detail

namespace strata {
Error::~Error() = default;
ConfigError::~ConfigError() = default;
OptionError::~OptionError() = default;
PluginError::~PluginError() = default;
UsageError::~UsageError() = default;
TrainingError::~TrainingError() = default;
DistributedError::~DistributedError() = default;
}  // namespace strata
