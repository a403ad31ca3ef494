// FaultPlan (see fault_injection.h).
#include "collectives/fault_injection.h"

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace tandem {

namespace {
int64_t parse_number(const char* var, const std::string& text) {
  int64_t v = -1;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size() || v < 0) {
    throw std::invalid_argument(std::string("environment variable ") + var + ": '" + text +
                                "' is not a non-negative integer");
  }
  return v;
}
}  // namespace

std::optional<FaultPlan> FaultPlan::from_env(int rank) {
  const char* spec = std::getenv("TANDEM_FAULT");
  if (!spec || !*spec) return std::nullopt;
  const std::string s = spec;
  const size_t colon = s.find(':');
  const std::string kind = s.substr(0, colon);
  FaultPlan plan;
  if (kind == "stop-before") plan.kind = Kind::stop_before;
  else if (kind == "stop-inside") plan.kind = Kind::stop_inside;
  else if (kind == "kill-inside") plan.kind = Kind::kill_inside;
  else if (kind == "hang-at-step") plan.kind = Kind::hang_at_step;
  else {
    throw std::invalid_argument("environment variable TANDEM_FAULT='" + s +
                                "': expected stop-before:N, stop-inside:N, kill-inside:N or hang-at-step:S");
  }
  if (colon == std::string::npos) {
    throw std::invalid_argument("environment variable TANDEM_FAULT='" + s + "': missing ':N' after " + kind);
  }
  plan.at = parse_number("TANDEM_FAULT", s.substr(colon + 1));
  const char* r = std::getenv("TANDEM_FAULT_RANK");
  plan.rank = r && *r ? static_cast<int>(parse_number("TANDEM_FAULT_RANK", r)) : 0;
  const char* a = std::getenv("TANDEM_FAULT_ATTEMPT");
  const int64_t only_attempt = a && *a ? parse_number("TANDEM_FAULT_ATTEMPT", a) : 0;
  const char* restarts = std::getenv("TANDEM_RESTART_COUNT");
  const int64_t attempt = restarts && *restarts ? parse_number("TANDEM_RESTART_COUNT", restarts) : 0;
  if (plan.rank != rank || only_attempt != attempt) return std::nullopt;
  return plan;
}

std::string FaultPlan::describe() const {
  static const char* names[] = {"stop-before", "stop-inside", "kill-inside", "hang-at-step"};
  return std::string(names[static_cast<int>(kind)]) + ":" + std::to_string(at) + " on rank " + std::to_string(rank);
}

}  // namespace tandem
