// Expands Slurm host lists (see slurm_hostlist.h): parse every entry into literal text
// and bracket groups, count the product, and only then write out the names.
#include "collectives/slurm_hostlist.h"

#include <cctype>
#include <stdexcept>

namespace tandem::slurm {
namespace {

struct Range {
  long lo = 0, hi = 0;
  size_t width = 0;  // digits of the lower bound as written
};

// Literal text followed by an optional bracket group (empty ranges: none).
struct Part {
  std::string text;
  std::vector<Range> ranges;
};

using Entry = std::vector<Part>;

[[noreturn]] void fail(std::string_view expr, size_t at, const std::string& what) {
  throw std::invalid_argument("Slurm host list '" + std::string(expr.substr(0, 200)) +
                              (expr.size() > 200 ? "..." : "") + "': " + what + " at offset " + std::to_string(at));
}

bool name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
}

size_t count_of(const std::vector<Range>& ranges) {
  size_t n = 0;
  for (const Range& r : ranges) n += static_cast<size_t>(r.hi - r.lo + 1);
  return n;
}

long parse_number(std::string_view expr, size_t& i, size_t& width) {
  const size_t start = i;
  while (i < expr.size() && std::isdigit(static_cast<unsigned char>(expr[i]))) ++i;
  width = i - start;
  if (width == 0) fail(expr, start, "a number was expected");
  if (width > 9) fail(expr, start, "a number of more than 9 digits");
  return std::stol(std::string(expr.substr(start, width)));
}

// expr[i] is '['; on return i is past the matching ']'.
std::vector<Range> parse_group(std::string_view expr, size_t& i) {
  const size_t open = i++;
  std::vector<Range> ranges;
  size_t total = 0;
  for (;;) {
    if (i >= expr.size()) fail(expr, open, "unbalanced '[' (no closing ']')");
    if (expr[i] == ']' || expr[i] == ',') fail(expr, i, "an empty part inside brackets");
    if (expr[i] == '[') fail(expr, i, "nested '['");
    Range r;
    const size_t at = i;
    r.lo = r.hi = parse_number(expr, i, r.width);
    if (i < expr.size() && expr[i] == '-') {
      ++i;
      size_t hi_width = 0;
      r.hi = parse_number(expr, i, hi_width);
      if (r.hi < r.lo) fail(expr, at, "a reversed range " + std::to_string(r.lo) + "-" + std::to_string(r.hi));
    }
    total += static_cast<size_t>(r.hi - r.lo + 1);
    if (total > kMaxHosts) fail(expr, at, "more than " + std::to_string(kMaxHosts) + " hosts");
    ranges.push_back(r);
    if (i >= expr.size()) fail(expr, open, "unbalanced '[' (no closing ']')");
    if (expr[i] == ']') return ++i, ranges;
    if (expr[i] == ',') {
      ++i;
      continue;
    }
    if (expr[i] == '[') fail(expr, i, "nested '['");
    fail(expr, i, std::string("unexpected character '") + expr[i] + "' inside brackets");
  }
}

std::vector<Entry> parse(std::string_view expr) {
  if (expr.empty()) fail(expr, 0, "an empty host list");
  std::vector<Entry> entries;
  size_t i = 0, total = 0;
  while (true) {
    const size_t start = i;
    Entry entry;
    Part part;
    size_t product = 1;
    while (i < expr.size() && expr[i] != ',') {
      const char c = expr[i];
      if (c == '[') {
        part.ranges = parse_group(expr, i);
        product *= count_of(part.ranges);  // each factor <= kMaxHosts: checked before it can overflow
        if (product > kMaxHosts) fail(expr, start, "more than " + std::to_string(kMaxHosts) + " hosts");
        entry.push_back(std::move(part));
        part = Part{};
      } else if (c == ']') {
        fail(expr, i, "unbalanced ']'");
      } else if (!name_char(c)) {
        fail(expr, i, std::string("character '") + (std::isprint(static_cast<unsigned char>(c)) ? std::string(1, c)
                                                      : "\\x" + std::to_string(static_cast<unsigned char>(c))) +
                          "' is not allowed in a host name");
      } else {
        part.text += c;
        ++i;
      }
    }
    if (!part.text.empty()) entry.push_back(std::move(part));
    if (entry.empty()) fail(expr, start, "an empty entry");
    total += product;
    if (total > kMaxHosts) fail(expr, start, "more than " + std::to_string(kMaxHosts) + " hosts");
    entries.push_back(std::move(entry));
    if (i == expr.size()) return entries;
    ++i;  // the comma
    if (i == expr.size()) fail(expr, i, "an empty entry");
  }
}

std::string number(long v, size_t width) {
  std::string s = std::to_string(v);
  if (s.size() < width) s.insert(0, width - s.size(), '0');
  return s;
}

// Appends every name of `entry`. Slurm's order (scontrol show hostnames): the last group
// varies fastest, then the first, the second, ... ("a[1-2]b[1-2]c[1-2]": a1b1c1 a1b1c2
// a2b1c1 a2b1c2 a1b2c1 ...); with two groups that is the plain cross product.
void expand(const Entry& entry, std::vector<std::string>& out) {
  std::vector<size_t> groups;  // the parts that have one
  for (size_t k = 0; k < entry.size(); ++k) {
    if (!entry[k].ranges.empty()) groups.push_back(k);
  }
  std::vector<std::vector<std::string>> values(entry.size());
  for (size_t k : groups) {
    for (const Range& r : entry[k].ranges) {
      for (long v = r.lo; v <= r.hi; ++v) values[k].push_back(number(v, r.width));
    }
  }
  std::vector<size_t> order;  // the groups from fastest to slowest
  if (!groups.empty()) order.push_back(groups.back());
  for (size_t g = 0; g + 1 < groups.size(); ++g) order.push_back(groups[g]);
  std::vector<size_t> at(entry.size(), 0);
  for (;;) {
    std::string name;
    for (size_t k = 0; k < entry.size(); ++k) {
      name += entry[k].text;
      if (!values[k].empty()) name += values[k][at[k]];
    }
    out.push_back(std::move(name));
    size_t d = 0;
    for (; d < order.size(); ++d) {
      if (++at[order[d]] < values[order[d]].size()) break;
      at[order[d]] = 0;
    }
    if (d == order.size()) return;
  }
}

}  // namespace

std::vector<std::string> expand_hostlist(std::string_view expr) {
  std::vector<std::string> hosts;
  for (const Entry& entry : parse(expr)) expand(entry, hosts);
  return hosts;
}

std::string first_host(std::string_view expr) {
  const std::vector<Entry> entries = parse(expr);
  std::string name;
  for (const Part& part : entries.front()) {
    name += part.text;
    if (!part.ranges.empty()) name += number(part.ranges.front().lo, part.ranges.front().width);
  }
  return name;
}

}  // namespace tandem::slurm
