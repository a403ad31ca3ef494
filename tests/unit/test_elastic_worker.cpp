// tandem-train's end of tandemrun's elastic control socket (train/elastic_worker.h),
// against a socket pair standing in for tandemrun: who attaches, the hello, a pause, an
// assignment, and what ends the wait.
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "train/elastic_worker.h"

namespace tandem {
namespace {

class ElasticWorker : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, pair_), 0);
    dir_ = (std::filesystem::temp_directory_path() / ("tandem-test-commit-" + std::to_string(getpid()))).string();
    ::setenv("TANDEM_CONTROL_FD", std::to_string(pair_[1]).c_str(), 1);
    ::setenv("TANDEM_COMMIT_DIR", dir_.c_str(), 1);
    config_.mode = Mode::ddp;
    config_.commit_every = 10;
  }
  void TearDown() override {
    ::unsetenv("TANDEM_CONTROL_FD");
    ::unsetenv("TANDEM_COMMIT_DIR");
    ::unsetenv("TANDEM_TEST_ASSIGNED");
    if (pair_[0] >= 0) close(pair_[0]);
    std::filesystem::remove_all(dir_);
  }
  // What tandemrun's end has received so far (the worker's lines).
  std::string received() {
    char buf[256];
    const ssize_t n = recv(pair_[0], buf, sizeof buf, MSG_DONTWAIT);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
  }
  void send_text(const std::string& text) { ASSERT_EQ(write(pair_[0], text.data(), text.size()), static_cast<ssize_t>(text.size())); }

  int pair_[2] = {-1, -1};
  std::string dir_;
  TrainConfig config_;
};

TEST_F(ElasticWorker, AttachesOnlyWhereItCanRecoverInMemory) {
  for (auto change : {+[](TrainConfig& c) { c.mode = Mode::single; }, +[](TrainConfig& c) { c.commit_every = 0; },
                      +[](TrainConfig& c) { c.backend = Backend::mpi; }, +[](TrainConfig& c) { c.zero = 1; }}) {
    TrainConfig c = config_;
    change(c);
    EXPECT_EQ(ElasticControl::attach(c), nullptr);
  }
  EXPECT_EQ(received(), "");  // no hello from any of them
  ::unsetenv("TANDEM_COMMIT_DIR");
  EXPECT_EQ(ElasticControl::attach(config_), nullptr);
  close(pair_[1]);
}

TEST_F(ElasticWorker, SaysHelloAndMakesItsCommitDirectory) {
  const auto control = ElasticControl::attach(config_);
  ASSERT_NE(control, nullptr);
  EXPECT_EQ(received(), "hello\n");
  EXPECT_EQ(control->commit_dir(), dir_);
  EXPECT_TRUE(std::filesystem::is_directory(dir_));
  control->report("lost peer\nrank 2 gone");  // one line, whatever the reason holds
  EXPECT_EQ(received(), "lost peer rank 2 gone\n");
}

TEST_F(ElasticWorker, APauseIsSeenOnceAndNeverWaitedFor) {
  const auto control = ElasticControl::attach(config_);
  ASSERT_NE(control, nullptr);
  EXPECT_FALSE(control->pause_requested());
  send_text("pa");  // half a line: not yet
  EXPECT_FALSE(control->pause_requested());
  send_text("use\n");
  EXPECT_TRUE(control->pause_requested());
  EXPECT_FALSE(control->pause_requested());
}

TEST_F(ElasticWorker, AnAssignmentSetsTheVariablesUpToGo) {
  const auto control = ElasticControl::attach(config_);
  ASSERT_NE(control, nullptr);
  send_text("pause\nenv TANDEM_TEST_ASSIGNED=rank=3 of 4\ngo\nenv LEFT_FOR_LATER=1\n");
  control->await_assignment();
  ASSERT_NE(std::getenv("TANDEM_TEST_ASSIGNED"), nullptr);
  EXPECT_STREQ(std::getenv("TANDEM_TEST_ASSIGNED"), "rank=3 of 4");  // split at the first '='
  EXPECT_EQ(std::getenv("LEFT_FOR_LATER"), nullptr);
}

TEST_F(ElasticWorker, TheWaitEndsWithAnErrorNamingWhatCameInstead) {
  const auto control = ElasticControl::attach(config_);
  ASSERT_NE(control, nullptr);
  send_text("go\n");
  try {
    control->await_assignment();
    FAIL() << "an empty assignment was taken";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("empty assignment"), std::string::npos) << e.what();
  }
  send_text("rank 3\n");
  try {
    control->await_assignment();
    FAIL() << "a malformed line was taken";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("'rank 3'"), std::string::npos) << e.what();
  }
  close(pair_[0]);
  pair_[0] = -1;
  try {
    control->await_assignment();
    FAIL() << "the end of the socket was not noticed";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("closed the elastic control socket"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem
