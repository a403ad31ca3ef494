// The elastic rendezvous's records (see header).
#include "launcher/elastic_records.h"

#include <nlohmann/json.hpp>

namespace tandem::launcher {

namespace {

using nlohmann::json;

ElasticMember member_from(const json& j) {
  if (!j.is_object()) throw RecordError("a member is not an object");
  ElasticMember m{j.at("id").get<int64_t>(), j.at("addr").get<std::string>(), j.at("host").get<std::string>()};
  if (m.id < 0) throw RecordError("a member's id is negative");
  return m;
}

json member_json(const ElasticMember& m) { return {{"id", m.id}, {"addr", m.addr}, {"host", m.host}}; }

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

std::string arrival_record(const ElasticMember& m) { return dump(member_json(m)); }

ElasticMember parse_arrival(std::string_view text) {
  try {
    return member_from(json::parse(text));
  } catch (const json::exception& e) {
    throw RecordError(std::string("malformed arrival record: ") + e.what());
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
        throw RecordError("unknown decision '" + d.kind + "'");
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
    gen.failure_restarts = j.at("failure_restarts").get<int>();
    gen.membership_changes = j.at("membership_changes").get<int>();
    gen.change = j.at("change").get<std::string>();
    if (gen.failure_restarts < 0 || gen.membership_changes < 0) throw RecordError("a negative count");
  } catch (const json::exception& e) {
    throw RecordError(std::string("malformed decision of generation ") + std::to_string(g) + ": " + e.what());
  }
  return d;
}

}  // namespace tandem::launcher
