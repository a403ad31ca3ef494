// analyse_hang (see header).
#include "launcher/hang_analysis.h"

#include <cstdio>
#include <optional>

#include <nlohmann/json.hpp>

namespace tandem::launcher {

namespace {
using std::chrono::milliseconds;

std::string secs(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", ms / 1000.0);
  return buf;
}

struct OpRecord {
  std::string op, dtype, state;
  int64_t bytes = 0;
  std::optional<int64_t> started_unix_us;
};

// rank -> seq -> record; dumps that do not parse are left out.
std::map<int, std::map<uint64_t, OpRecord>> parse_dumps(const std::map<int, std::string>& dumps) {
  std::map<int, std::map<uint64_t, OpRecord>> out;
  for (const auto& [rank, text] : dumps) {
    const auto j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.contains("entries") || !j["entries"].is_array()) continue;
    auto& ops = out[rank];
    // A dump is a file a rank wrote, perhaps cut short or damaged: an entry whose fields
    // have the wrong types is left out, and integers are read only as integers (a float out
    // of range has no defined conversion).
    const auto integer = [](const nlohmann::json& e, const char* key) {
      return e.contains(key) && e[key].is_number_integer();
    };
    const auto text_or = [](const nlohmann::json& e, const char* key) {
      return e.contains(key) && e[key].is_string() ? e[key].get<std::string>() : std::string("?");
    };
    for (const auto& e : j["entries"]) {
      if (!e.is_object() || !integer(e, "seq") || !e["seq"].is_number_unsigned()) continue;
      OpRecord r;
      r.op = text_or(e, "op");
      r.dtype = text_or(e, "dtype");
      r.state = text_or(e, "state");
      if (integer(e, "bytes")) r.bytes = e["bytes"].get<int64_t>();
      if (integer(e, "started_unix_us")) r.started_unix_us = e["started_unix_us"].get<int64_t>();
      ops[e["seq"].get<uint64_t>()] = r;
    }
  }
  return out;
}

std::string ranks_phrase(const std::vector<int>& ranks) {
  return std::string(ranks.size() == 1 ? "rank " : "ranks ") + rank_list(ranks);
}
}  // namespace

std::string first_divergence(const std::map<int, std::string>& dumps) {
  const auto parsed = parse_dumps(dumps);
  std::map<uint64_t, std::vector<std::pair<int, const OpRecord*>>> by_seq;
  for (const auto& [rank, ops] : parsed) {
    for (const auto& [seq, r] : ops) by_seq[seq].emplace_back(rank, &r);
  }
  for (const auto& [seq, recs] : by_seq) {
    const OpRecord& a = *recs.front().second;
    bool differ = false;
    for (const auto& [rank, r] : recs) differ |= r->op != a.op || r->dtype != a.dtype || r->bytes != a.bytes;
    if (!differ) continue;
    std::string s = "#";  // built by appends: gcc 12 warns (-Wrestrict) on "#" + to_string
    s += std::to_string(seq);
    s += " (";
    for (size_t i = 0; i < recs.size(); ++i) {
      const OpRecord& r = *recs[i].second;
      s += (i ? "; rank " : "rank ") + std::to_string(recs[i].first) + ": " + r.op + " " + r.dtype + " " +
           std::to_string(r.bytes) + " B";
    }
    return s + ")";
  }
  return "none";
}

std::string analyse_hang(const HangInput& in) {
  const auto ops = parse_dumps(in.dumps);
  // The newest op any rank is in (or has entered, when it is in none): ops complete in
  // issue order, so a rank with several in flight is in its first uncompleted one.
  uint64_t front = 0;
  for (const auto& p : in.peers) {
    if (p.known) front = std::max(front, p.entered > p.completed ? p.completed + 1 : p.entered);
  }
  const auto op_name = [&](uint64_t seq) {
    for (const auto& [rank, recs] : ops) {
      if (auto it = recs.find(seq); it != recs.end()) return it->second.op + " #" + std::to_string(seq);
    }
    return "op #" + std::to_string(seq);
  };
  // How long `rank` has been in `seq`, from its dump; else the time without progress.
  const auto in_op_for = [&](int rank, uint64_t seq) {
    if (auto r = ops.find(rank); r != ops.end()) {
      if (auto it = r->second.find(seq); it != r->second.end() && it->second.started_unix_us && in.now_unix_us > 0) {
        return secs(static_cast<double>(in.now_unix_us - *it->second.started_unix_us) / 1000.0);
      }
    }
    return secs(static_cast<double>(in.no_progress_for.count()));
  };

  std::vector<std::string> parts;
  std::map<uint64_t, std::vector<int>> waiting;  // seq -> ranks waiting in it
  std::vector<int> idle, silent;
  for (const auto& p : in.peers) {
    if (!p.known) {
      silent.push_back(p.rank);
      continue;
    }
    const bool in_op = p.entered > p.completed;
    // Ops complete in issue order, so the one a rank waits in is the first not completed
    // (it may have issued later ones already: DDP keeps several buckets in flight).
    const uint64_t current = p.completed + 1;
    if (p.age > in.stale_after) {
      parts.push_back("rank " + std::to_string(p.rank) +
                      (in_op ? " stuck in " + op_name(current) + " for " + in_op_for(p.rank, current)
                             : " stopped outside any collective after " + op_name(p.entered)) +
                      " (no heartbeat for " + secs(static_cast<double>(p.age.count())) + ": stopped or frozen)");
    } else if (in_op) {
      waiting[current].push_back(p.rank);
    } else if (p.entered < front) {
      parts.push_back("rank " + std::to_string(p.rank) + " is alive but not in a collective: it stopped after step " +
                      std::to_string(p.step) + " and " + op_name(p.entered) + " while others entered " +
                      op_name(front));
    } else {
      idle.push_back(p.rank);
    }
  }
  for (const auto& [seq, ranks] : waiting) {
    parts.push_back(ranks_phrase(ranks) + " wait in " + op_name(seq) + " for " + in_op_for(ranks.front(), seq));
  }
  if (!idle.empty()) {
    parts.push_back(ranks_phrase(idle) + (idle.size() == 1 ? " is" : " are") +
                    " alive and outside any collective (busy, or waiting on something else)");
  }
  if (!silent.empty()) parts.push_back(ranks_phrase(silent) + " published no heartbeat");
  char limit[32];
  std::snprintf(limit, sizeof(limit), "%g", static_cast<double>(in.hang_timeout.count()) / 1000.0);
  std::string s = "no rank completed a training step for " + secs(static_cast<double>(in.no_progress_for.count())) +
                  " (--hang-timeout-s " + limit + "): ";
  for (size_t i = 0; i < parts.size(); ++i) s += (i ? "; " : "") + parts[i];
  std::vector<int> dumped;
  for (const auto& [rank, text] : in.dumps) dumped.push_back(rank);
  s += "; first divergence: " + first_divergence(in.dumps);
  s += dumped.empty() ? " (no flight recorder came back)"
                      : " (flight recorders of " + ranks_phrase(dumped) + ")";
  return s;
}

}  // namespace tandem::launcher
