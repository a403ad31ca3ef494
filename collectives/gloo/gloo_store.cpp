// GlooStore: gloo::rendezvous::Store over tandem::Store.
#include "collectives/gloo/gloo_store.h"

namespace tandem {

void GlooStore::set(const std::string& key, const std::vector<char>& data) {
  store_->set(key, std::string_view(data.data(), data.size()));
}

std::vector<char> GlooStore::get(const std::string& key) {
  // Gloo calls get() for keys other ranks may not have written yet: block for them.
  const std::string value = store_->get(key, timeout_);
  return std::vector<char>(value.begin(), value.end());
}

void GlooStore::wait(const std::vector<std::string>& keys) { store_->wait(keys, timeout_); }

void GlooStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  store_->wait(keys, timeout);
}

}  // namespace tandem
