// The elastic rendezvous's records (see header).
#include "launcher/elastic_records.h"

#include <climits>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "collectives/untrusted_text.h"

namespace tandem::launcher {

namespace {

using nlohmann::json;

// Field `key` of `j`, an integer in [0, max]. A float is refused before any conversion: one
// beyond the integer's range (a 75-digit id parses as a float) has no defined conversion.
int64_t count_field(const json& j, const char* key, int64_t max) {
  const json& v = j.at(key);
  if (!v.is_number_integer()) throw RecordError(std::string("\"") + key + "\" is not an integer");
  const bool fits = v.is_number_unsigned() ? v.get<uint64_t>() <= static_cast<uint64_t>(max)
                                           : v.get<int64_t>() >= 0 && v.get<int64_t>() <= max;
  if (!fits) throw RecordError(std::string("\"") + key + "\" is negative or out of range: " + v.dump());
  return v.get<int64_t>();
}

ElasticMember member_from(const json& j) {
  if (!j.is_object()) throw RecordError("a member is not an object");
  return {count_field(j, "id", INT64_MAX), j.at("addr").get<std::string>(), j.at("host").get<std::string>()};
}

json member_json(const ElasticMember& m) { return {{"id", m.id}, {"addr", m.addr}, {"host", m.host}}; }

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

std::string arrival_record(const ElasticMember& m) { return dump(member_json(m)); }

ElasticMember parse_arrival(std::string_view text) {
  try {
    return member_from(json::parse(text));
  } catch (const json::exception& e) {
    throw RecordError("malformed arrival record: " + escape_untrusted(e.what(), kUntrustedMessageBytes));
  }
}

std::string go_record(const std::vector<ElasticMember>& members, int failure_restarts, int membership_changes,
                      const std::string& change) {
  json d = {{"decision", "go"}, {"failure_restarts", failure_restarts},
            {"membership_changes", membership_changes}, {"change", change}, {"members", json::array()}};
  for (const auto& m : members) d["members"].push_back(member_json(m));
  return dump(d);
}

std::string end_record(const std::string& kind, const std::string& why) {
  return dump(json{{"decision", kind}, {"why", why}});
}

Decision parse_decision(std::string_view text, int g, int64_t my_id, int max_members) {
  Decision d;
  try {
    const json j = json::parse(text);
    if (!j.is_object()) throw RecordError("the decision is not an object");
    d.kind = j.at("decision").get<std::string>();
    if (d.kind != "go") {
      if (d.kind != "timeout" && d.kind != "stopped" && d.kind != "exhausted") {
        throw RecordError("unknown decision " + quote_untrusted(d.kind));
      }
      d.why = j.at("why").get<std::string>();
      return d;
    }
    Generation& gen = d.generation;
    gen.number = g;
    const json& ms = j.at("members");
    if (!ms.is_array() || ms.empty() || ms.size() > static_cast<size_t>(max_members)) {
      throw RecordError("the member list is empty, not a list, or longer than --nnodes allows");
    }
    for (const auto& m : ms) {
      gen.members.push_back(member_from(m));
      if (gen.members.size() > 1 && gen.members[gen.members.size() - 2].id >= gen.members.back().id) {
        throw RecordError("the members are not in ascending order of node id");
      }
      if (gen.members.back().id == my_id) gen.node_rank = static_cast<int>(gen.members.size() - 1);
    }
    gen.failure_restarts = static_cast<int>(count_field(j, "failure_restarts", INT_MAX));
    gen.membership_changes = static_cast<int>(count_field(j, "membership_changes", INT_MAX));
    gen.change = j.at("change").get<std::string>();
  } catch (const json::exception& e) {
    throw RecordError("malformed decision of generation " + std::to_string(g) + ": " +
                      escape_untrusted(e.what(), kUntrustedMessageBytes));
  }
  return d;
}

}  // namespace tandem::launcher
