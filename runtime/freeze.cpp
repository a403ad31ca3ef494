// Freezing parameters by name or glob (freeze.h). Validates every pattern before it
// changes any flag, so a typo leaves the model as it was.
#include "runtime/freeze.h"

#include <fnmatch.h>

#include <stdexcept>

namespace tandem {

bool glob_match(const std::string& pattern, const std::string& name) {
  return fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

bool matches_any(const std::vector<std::string>& patterns, const std::string& name) {
  for (const std::string& p : patterns)
    if (glob_match(p, name)) return true;
  return false;
}

std::string list_names(const std::vector<std::string>& names, size_t limit) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < limit; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > limit) s += ", ...";
  s += " (" + std::to_string(names.size()) + " in all)";
  return s;
}

int set_requires_grad(Model& model, const std::vector<std::string>& patterns, bool value) {
  std::vector<std::string> all;
  for (const Parameter* p : model.parameters()) all.push_back(p->name);
  for (const std::string& pattern : patterns) {
    bool hit = false;
    for (const std::string& name : all) hit = hit || glob_match(pattern, name);
    if (!hit)
      throw std::invalid_argument(std::string(value ? "unfreeze" : "freeze") + ": pattern '" + pattern +
                                  "' matches no parameter; the model's parameters are " + list_names(all));
  }
  int matched = 0;
  for (Parameter* p : model.parameters())
    if (matches_any(patterns, p->name)) {
      p->requires_grad = value;
      ++matched;
    }
  return matched;
}

std::vector<std::string> frozen_parameter_names(const Model& model) {
  std::vector<std::string> out;
  for (const Parameter* p : model.parameters())
    if (!p->requires_grad) out.push_back(p->name);
  return out;
}

int64_t trainable_parameter_count(const Model& model) {
  int64_t n = 0;
  for (const Parameter* p : model.parameters())
    if (p->requires_grad) n += p->value.numel();
  return n;
}

}  // namespace tandem
