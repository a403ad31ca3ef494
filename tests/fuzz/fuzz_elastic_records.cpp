// Fuzz target: the elastic rendezvous's records in the store (launcher/elastic_records.h),
// which any holder of the job secret can write. Byte 0 picks the record: even, a
// generation's decision read by node id (byte 1 % 4) with MAX (byte 2 % 8 + 1); odd, an
// arrival. The rest is the record's text. Contract checked: parsing throws RecordError or
// returns a record the launcher can use without another check: a known decision; for "go",
// 1..MAX members in ascending order of id, and this node's rank -1 or the index of its id.
#include <string_view>

#include "launcher/elastic_records.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem::launcher;
  if (size < 3) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 3, size - 3);
  try {
    if (data[0] % 2) {
      const ElasticMember m = parse_arrival(text);
      FUZZ_CHECK(m.id >= 0);
      // What a node writes, it reads back unchanged.
      const ElasticMember again = parse_arrival(arrival_record(m));
      FUZZ_CHECK(again.id == m.id && again.addr == m.addr && again.host == m.host);
      return 0;
    }
    const int64_t me = data[1] % 4;
    const int max = data[2] % 8 + 1;
    const Decision d = parse_decision(text, 7, me, max);
    if (d.kind != "go") {
      FUZZ_CHECK(d.kind == "timeout" || d.kind == "stopped" || d.kind == "exhausted");
      return 0;
    }
    const Generation& g = d.generation;
    FUZZ_CHECK(g.number == 7 && !g.members.empty() && g.members.size() <= static_cast<size_t>(max));
    for (size_t i = 1; i < g.members.size(); ++i) FUZZ_CHECK(g.members[i - 1].id < g.members[i].id);
    FUZZ_CHECK(g.node_rank >= -1 && g.node_rank < static_cast<int>(g.members.size()));
    if (g.node_rank >= 0) FUZZ_CHECK(g.members[static_cast<size_t>(g.node_rank)].id == me);
    FUZZ_CHECK(g.failure_restarts >= 0 && g.membership_changes >= 0);
  } catch (const RecordError&) {
  }
  return 0;
}
