// tandem-bench-rendezvous: what the store's job-secret handshake costs the rendezvous
// (docs/security.md, "What it costs"). For each world size and with the handshake off
// and on, it starts a real StoreServer on loopback, then W threads each connect a
// TcpStore and run the real rendezvous (init.h: compare_set of arrived/<rank>, then a
// wait for every rank); it times from the start of the threads until the last returns.
// Threads, not processes: the handshake and the store are what is measured, not exec.
//
//   tandem-bench-rendezvous [--repeats N] [--worlds 2,4]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "collectives/init.h"
#include "collectives/store.h"
#include "collectives/store_auth.h"

namespace {

using Clock = std::chrono::steady_clock;

double rendezvous_ms(int world, const std::string& secret) {
  tandem::StoreServer server({"127.0.0.1", 0, "bench", secret});
  std::vector<std::thread> ranks;
  const auto start = Clock::now();
  for (int r = 0; r < world; ++r) {
    ranks.emplace_back([&, r] {
      tandem::TcpStoreOptions o;
      o.port = server.port();
      o.job_id = "bench";
      o.secret = secret;
      tandem::TcpStore store(o);
      tandem::rendezvous(store, r, world, std::chrono::seconds(60));
    });
  }
  for (auto& t : ranks) t.join();
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 200;
  std::vector<int> worlds = {2, 4};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--repeats") == 0) {
      repeats = std::atoi(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--worlds") == 0) {
      worlds.clear();
      for (const char* p = argv[i + 1]; *p;) {
        worlds.push_back(std::atoi(p));
        p = std::strchr(p, ',') ? std::strchr(p, ',') + 1 : p + std::strlen(p);
      }
    } else {
      std::fprintf(stderr, "usage: tandem-bench-rendezvous [--repeats N] [--worlds 2,4]\n");
      return 2;
    }
  }
  if (repeats < 1 || worlds.empty() || *std::min_element(worlds.begin(), worlds.end()) < 1) {
    std::fprintf(stderr, "tandem-bench-rendezvous: --repeats and every world size must be >= 1\n");
    return 2;
  }
  const std::string secret = tandem::store_auth::generate_secret();
  std::printf("%-6s %-10s %8s %10s %10s %10s\n", "ranks", "handshake", "repeats", "median_ms", "p90_ms", "min_ms");
  for (int world : worlds) {
    for (bool authenticated : {false, true}) {
      std::vector<double> ms;
      rendezvous_ms(world, authenticated ? secret : "");  // warm-up
      for (int i = 0; i < repeats; ++i) ms.push_back(rendezvous_ms(world, authenticated ? secret : ""));
      std::printf("%-6d %-10s %8d %10.3f %10.3f %10.3f\n", world, authenticated ? "secret" : "none", repeats,
                  percentile(ms, 0.5), percentile(ms, 0.9), percentile(ms, 0.0));
    }
  }
  return 0;
}
