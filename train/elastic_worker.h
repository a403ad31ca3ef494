// tandem-train's side of in-memory elastic recovery (docs/elastic.md, "Recovery in
// memory"): an elastic tandemrun (--nnodes MIN:MAX, --elastic-recovery memory) keeps a
// worker process alive across a change of membership and tells it its new place.
//
// The worker's end of the control socket tandemrun hands down (TANDEM_CONTROL_FD), one
// text line per message:
//   worker -> tandemrun  "hello"          this program recovers in memory (sent once, at start)
//                        "lost REASON"    the process group failed; the worker keeps its last
//                                         commit and waits for its next assignment
//                        "paused STEP"    stopped at commit STEP, as every rank agreed, so
//                                         joining nodes can be admitted; waits likewise
//   tandemrun -> worker  "pause"          pause at the next commit step (a node asks to join)
//                        "env KEY=VALUE"  a variable of the next generation (RANK, WORLD_SIZE,
//                                         LOCAL_RANK, NODE_RANK, TANDEM_RESTART_COUNT, ...)
//                        "go"             the assignment is complete: form the new group
// A worker that never says hello (a PyTorch script, tandem-train under --backend mpi or
// --zero 1) is restarted instead, and resumes from a checkpoint.
//
// The commit: every --commit-every steps each rank writes its state (parameters, buffers,
// optimizer state, step, data position: a checkpoint, through the same code) into its own
// directory in RAM (TANDEM_COMMIT_DIR, on tmpfs, which tandemrun owns and removes), keeping
// only the newest. Outliving the process, it also serves a worker that had to be restarted.
// In a new generation the oldest member (rank 0) sends its newest commit to every rank over
// a group of that generation, and every rank resumes from it exactly as from a checkpoint,
// so the two recovery paths train identically from the same step.
#pragma once

#include <memory>
#include <string>

#include "train/train_config.h"

namespace tandem {

class ElasticControl {
 public:
  // Null unless tandemrun asked for in-memory recovery (both variables set) and this run
  // can take part: --mode ddp, --commit-every > 0, neither --backend mpi (Open MPI cannot
  // re-form its world in process) nor --zero 1 (its optimizer state is sharded). Says why
  // not, on rank 0, when the variables are set but it cannot; otherwise says hello.
  static std::unique_ptr<ElasticControl> attach(const TrainConfig& c);
  ~ElasticControl();
  ElasticControl(const ElasticControl&) = delete;
  ElasticControl& operator=(const ElasticControl&) = delete;

  const std::string& commit_dir() const { return dir_; }
  // Whether tandemrun asked for a pause since the last call that returned true. Never blocks.
  bool pause_requested();
  // Sends one line ("lost ...", "paused ..."); newlines in it become spaces.
  void report(const std::string& line);
  // Blocks until tandemrun sends the next assignment and applies it (setenv). Throws
  // std::runtime_error when tandemrun closes the socket instead (the job is over).
  void await_assignment();

 private:
  ElasticControl(int fd, std::string dir) : fd_(fd), dir_(std::move(dir)) {}
  // The next complete line; with `block` false, nullopt when none is there yet.
  std::optional<std::string> next_line(bool block);

  int fd_;
  std::string dir_;
  std::string buffer_;
  bool pause_ = false;
};

// In a generation after the first: rank 0's newest commit, sent to every rank over a group
// of this generation ("commit"), written into each rank's commit directory. Returns the
// directory to resume from, or `c.resume` when rank 0 has no commit (then every rank
// resumes as configured, from a checkpoint or from scratch). Throws CollectiveError when
// a member is lost meanwhile.
std::string share_commit(const TrainConfig& c, const ElasticControl& control);

}  // namespace tandem
