// A fake process environment for read_launch_env's tests: the variables of a map, and no
// others, so a test never depends on what the shell running it has set.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "collectives/init.h"

namespace tandem {

inline EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
}

}  // namespace tandem
