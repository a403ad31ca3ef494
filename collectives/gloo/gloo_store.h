// Adapts Tandem's Store to gloo::rendezvous::Store, so Gloo's full-mesh connection
// set-up exchanges its addresses through our TCP store (no mpirun, no Redis).
// Invariant: every blocking call is bounded by a timeout (Gloo's own overload without
// one gets the group's).
#pragma once

#include <chrono>
#include <memory>

#include <gloo/rendezvous/store.h>

#include "collectives/store.h"

namespace tandem {

class GlooStore : public gloo::rendezvous::Store {
 public:
  GlooStore(std::shared_ptr<tandem::Store> store, std::chrono::milliseconds timeout)
      : store_(std::move(store)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  std::shared_ptr<tandem::Store> store_;
  std::chrono::milliseconds timeout_;
};

}  // namespace tandem
