// tandem-bench-rendezvous: what the store's job-secret handshake costs the rendezvous
// (docs/security.md, "What it costs"). For each world size and with the handshake off
// and on, it starts a real StoreServer on loopback, then W threads each connect a
// TcpStore and run the real rendezvous (init.h: compare_set of arrived/<rank>, then a
// wait for every rank); it times from the start of the threads until the last returns.
// Threads, not processes: the handshake and the store are what is measured, not exec.
// The "flood" rows run the authenticated rendezvous while --flooders threads open
// connections to the store as fast as they can, each sending the job's hello and leaving
// its handshake pending (at most 512 open per thread, the oldest closed), from the same
// address as the ranks: the worst case for the store's fair eviction (docs/security.md).
// They print the connections per second the flooders made.
//
//   tandem-bench-rendezvous [--repeats N] [--worlds 2,4] [--flooders K]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "collectives/init.h"
#include "collectives/store.h"
#include "collectives/store_auth.h"
#include "collectives/store_protocol.h"

namespace {

using Clock = std::chrono::steady_clock;

// Connections as fast as one thread can open them until `stop`, each with the job's hello.
void flood(int port, const std::atomic<bool>& stop, std::atomic<long>& made) {
  tandem::store_wire::Writer w;
  w.u32(tandem::store_wire::kMagic).u32(tandem::store_wire::kVersion).str("bench").str(std::string(32, 'f'));
  const std::string hello = w.frame();
  std::deque<int> open;
  while (!stop) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0) break;
    timeval tv{0, 50'000};  // bounds connect() on a full backlog, so `stop` is seen soon
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      close(fd);
      continue;
    }
    send(fd, hello.data(), hello.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    made++;
    open.push_back(fd);
    if (open.size() > 512) {
      close(open.front());
      open.pop_front();
    }
  }
  for (int fd : open) close(fd);
}

struct Result {
  double ms = 0;
  double connections_per_s = 0;
};

Result rendezvous_ms(int world, const std::string& secret, int flooders) {
  tandem::StoreServer server({"127.0.0.1", 0, "bench", secret});
  std::atomic<bool> stop{false};
  std::atomic<long> made{0};
  std::vector<std::thread> floods;
  for (int f = 0; f < flooders; ++f) floods.emplace_back(flood, server.port(), std::cref(stop), std::ref(made));
  while (flooders > 0 && made < 256) std::this_thread::yield();  // the pending slots are full before the ranks come
  const long made_before = made;
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
  Result result;
  result.ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  result.connections_per_s = static_cast<double>(made - made_before) / (result.ms / 1000.0);
  stop = true;
  for (auto& t : floods) t.join();
  return result;
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 200;
  std::vector<int> worlds = {2, 4};
  int flooders = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--repeats") == 0) {
      repeats = std::atoi(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--worlds") == 0) {
      worlds.clear();
      for (const char* p = argv[i + 1]; *p;) {
        worlds.push_back(std::atoi(p));
        p = std::strchr(p, ',') ? std::strchr(p, ',') + 1 : p + std::strlen(p);
      }
    } else if (std::strcmp(argv[i], "--flooders") == 0) {
      flooders = std::atoi(argv[i + 1]);
    } else {
      std::fprintf(stderr, "usage: tandem-bench-rendezvous [--repeats N] [--worlds 2,4] [--flooders K]\n");
      return 2;
    }
  }
  if (repeats < 1 || worlds.empty() || *std::min_element(worlds.begin(), worlds.end()) < 1 || flooders < 0) {
    std::fprintf(stderr, "tandem-bench-rendezvous: --repeats and every world size must be >= 1, --flooders >= 0\n");
    return 2;
  }
  const std::string secret = tandem::store_auth::generate_secret();
  spdlog::set_level(spdlog::level::err);  // the flood's refusals would drown the table
  std::printf("%-6s %-12s %8s %10s %10s %10s %14s\n", "ranks", "handshake", "repeats", "median_ms", "p90_ms", "min_ms",
              "flood_conn/s");
  struct Row {
    const char* name;
    bool authenticated;
    int flooders;
  };
  std::vector<Row> rows = {{"none", false, 0}, {"secret", true, 0}};
  if (flooders > 0) rows.push_back({"secret+flood", true, flooders});
  for (int world : worlds) {
    for (const Row& row : rows) {
      std::vector<double> ms, rate;
      rendezvous_ms(world, row.authenticated ? secret : "", row.flooders);  // warm-up
      for (int i = 0; i < repeats; ++i) {
        const Result r = rendezvous_ms(world, row.authenticated ? secret : "", row.flooders);
        ms.push_back(r.ms);
        rate.push_back(r.connections_per_s);
      }
      std::printf("%-6d %-12s %8d %10.3f %10.3f %10.3f %14.0f\n", world, row.name, repeats, percentile(ms, 0.5),
                  percentile(ms, 0.9), percentile(ms, 0.0), row.flooders > 0 ? percentile(rate, 0.5) : 0.0);
    }
  }
  return 0;
}
