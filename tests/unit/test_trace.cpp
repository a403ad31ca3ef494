// Tracer's file: the events chrome://tracing reads, and the wall-clock anchor in
// "otherData" that tandem-trace merge aligns ranks by. A span's origin_unix_us + ts must be
// the wall-clock time it began, so it lies between system_clock readings taken around it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "runtime/trace.h"

using namespace tandem;
using json = nlohmann::json;

namespace {

int64_t wall_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

json write_and_read(const Tracer& tracer, const std::string& name) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            (name + "-" + std::to_string(::getpid()) + ".json")).string();
  tracer.write(path);
  std::ifstream in(path);
  json doc = json::parse(in);
  std::remove(path.c_str());
  return doc;
}

}  // namespace

TEST(Tracer, OtherDataAnchorsTheSpansOnTheWallClock) {
  ::unsetenv("NODE_RANK");
  Tracer tracer(3);
  const int64_t before = wall_us();
  const auto begin = Tracer::Clock::now();
  const auto end = Tracer::Clock::now();
  const int64_t after = wall_us();
  tracer.add("phase", Tracer::comm, begin, end);
  json doc = write_and_read(tracer, "tandem-test-trace-anchor");

  const json& other = doc.at("otherData");
  EXPECT_EQ(other.at("rank"), 3);
  ASSERT_TRUE(other.at("origin_unix_us").is_number_integer());
  EXPECT_EQ(other.at("pid"), static_cast<long long>(::getpid()));
  EXPECT_FALSE(other.at("host").get<std::string>().empty());
  EXPECT_FALSE(other.contains("node"));  // only under tandemrun

  const json* span = nullptr;
  for (const json& e : doc.at("traceEvents"))
    if (e.at("ph") == "X") span = &e;
  ASSERT_NE(span, nullptr);
  EXPECT_EQ(span->at("pid"), 3);
  EXPECT_EQ(span->at("tid"), 1);
  // origin_unix_us is truncated to whole microseconds (1 us of slack below) and off by at
  // most origin_uncertainty_us either way, the half gap of the wall-clock pair it was read
  // between (under qemu that gap alone was more than the span).
  ASSERT_TRUE(other.at("origin_uncertainty_us").is_number_integer());
  const int64_t uncertainty = other.at("origin_uncertainty_us").get<int64_t>();
  EXPECT_GE(uncertainty, 0);
  const double began = other.at("origin_unix_us").get<int64_t>() + span->at("ts").get<double>();
  EXPECT_GE(began, static_cast<double>(before - uncertainty) - 1.0);
  EXPECT_LE(began, static_cast<double>(after + uncertainty) + 1.0);
}

TEST(Tracer, KeepsTheTrackAndProcessNamesAndRecordsTheNode) {
  ::setenv("NODE_RANK", "2", 1);
  Tracer tracer(1);
  json doc = write_and_read(tracer, "tandem-test-trace-names");
  ::unsetenv("NODE_RANK");
  EXPECT_EQ(doc.at("otherData").at("node"), 2);
  EXPECT_EQ(doc.at("displayTimeUnit"), "ms");
  std::map<std::string, std::string> names;
  for (const json& e : doc.at("traceEvents"))
    if (e.at("ph") == "M") names[e.at("name").get<std::string>() + std::to_string(e.at("tid").get<int>())] =
        e.at("args").at("name");
  EXPECT_EQ(names["thread_name0"], "compute");
  EXPECT_EQ(names["thread_name1"], "comm");
  EXPECT_EQ(names["process_name0"], "rank 1");
}

TEST(Tracer, PathPerRank) {
  EXPECT_EQ(trace_path_for_rank("run.json", 0, 1), "run.json");
  EXPECT_EQ(trace_path_for_rank("run.json", 3, 4), "run.rank3.json");
  EXPECT_EQ(trace_path_for_rank("dir.d/run", 1, 2), "dir.d/run.rank1");
}
