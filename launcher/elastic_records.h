// The elastic rendezvous's records in the store (launcher/rendezvous.h): a node's arrival
// and a generation's decision, as JSON. Any process that holds the job secret can write
// them, so parsing checks everything the launcher relies on afterwards (a member list that
// is non-empty, at most MAX long, ids distinct and ascending; counts that are not negative)
// and a malformed record is a RecordError, never a crash or a wrong rank.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::launcher {

class RecordError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ElasticMember {
  int64_t id = 0;      // seniority: lower joined the job earlier
  std::string addr;    // its address as the store sees it (its workers' MASTER_ADDR when node 0)
  std::string host;    // its host name, for messages
};

// One elastic generation as its rendezvous closed it.
struct Generation {
  int number = 0;
  std::vector<ElasticMember> members;  // oldest first: the index is the node rank
  int node_rank = -1;                  // this node's; -1: not a member
  int failure_restarts = 0;            // generations so far that failed with no node leaving
  int membership_changes = 0;          // generations so far that began with other nodes
  std::string change;                  // "node id 2 (host b) left; ...": empty when none
};

// A decision: "go" with `generation`, or "timeout" | "stopped" | "exhausted" with `why`.
struct Decision {
  std::string kind;
  std::string why;
  Generation generation;
};

std::string arrival_record(const ElasticMember& m);
ElasticMember parse_arrival(std::string_view text);

// "go": `members` oldest first, with the job's counts; the others end the job with `why`.
std::string go_record(const std::vector<ElasticMember>& members, int failure_restarts, int membership_changes,
                      const std::string& change);
std::string end_record(const std::string& kind, const std::string& why);
// Generation `g`'s decision as node `my_id` reads it; at most `max_members` members.
Decision parse_decision(std::string_view text, int g, int64_t my_id, int max_members);

}  // namespace tandem::launcher
