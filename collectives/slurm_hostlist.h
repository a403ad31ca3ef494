// Slurm's compressed host lists ("gpu[01-04,07],login-a[1-2]x[3-4]"), expanded the way
// `scontrol show hostnames` does, without Slurm's library: a Tandem program started by
// srun reads SLURM_STEP_NODELIST to find the node that hosts the rendezvous store.
//
// Grammar: comma-separated entries (commas inside brackets do not separate); an entry is
// literal text and bracket groups, each group a comma list of numbers or lo-hi ranges;
// several groups are a cross product, the first varying slowest. A number keeps the width
// of its lower bound as written ("n[08-10]": n08 n09 n10). Order and duplicates are kept.
// Bad input (unbalanced or nested brackets, an empty entry or group, a reversed range, a
// number of more than 9 digits, more than kMaxHosts hosts) throws std::invalid_argument
// naming the problem and where it is; nothing is expanded before the count is known.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::slurm {

// Slurm refuses one range of more than 64K hosts; the total is capped the same way.
inline constexpr size_t kMaxHosts = 65536;

std::vector<std::string> expand_hostlist(std::string_view expr);

// The first host of the list, without expanding the rest (throws as above).
std::string first_host(std::string_view expr);

}  // namespace tandem::slurm
