// ThreadedProcessGroup (see threaded_process_group.h).
#include "collectives/threaded_process_group.h"

namespace tandem {

ThreadedProcessGroup::ThreadedProcessGroup(Setup setup)
    : ProcessGroup(setup), comm_(setup.backend + " rank " + std::to_string(setup.rank)) {}

std::shared_ptr<Work> ThreadedProcessGroup::submit(const Collective& c, std::function<void()> engine_call) {
  // The handles and the queued task may outlive the group: they hold it weakly, and its
  // reports strongly. The comm thread never holds the group (see FailureReports); a
  // timeout is seen by a waiting caller, which may.
  std::weak_ptr<ProcessGroup> weak = weak_from_this();
  auto on_timeout = [weak, reports = reports()](const Collective& op, std::chrono::milliseconds waited) {
    std::string report = reports->timeout(op, waited);
    if (auto group = std::static_pointer_cast<ThreadedProcessGroup>(weak.lock()))
      group->comm_.break_group(op.describe() + " timed out");
    return report;
  };
  auto work = std::make_shared<CompletionWork>(c, timeout(), on_timeout);
  // Nothing to move: skip the engine, but still go through the queue so handles keep
  // completing in issue order.
  if (c.op != OpType::barrier && c.bytes() == 0)
    engine_call = check_only_ ? std::function<void()>([check = check_only_, c] { check(c); }) : [] {};
  if (gather_) {
    engine_call = [gather = gather_, c, size = size(), call = std::move(engine_call)] {
      require_ranks_agree(c, size, gather);
      call();
    };
  }
  comm_.submit(work, [reports = reports(), c, call = std::move(engine_call)] {
    reports->recorder().started(c.seq);
    try {
      call();
      reports->recorder().ended(c.seq, true);
      reports->health().completed(c.seq);
    } catch (const CollectiveError&) {
      reports->recorder().ended(c.seq, false);
      throw;
    } catch (const std::exception& e) {
      reports->recorder().ended(c.seq, false);
      const std::string what = e.what();
      const std::string report = reports->failure(c, what);
      // Engines report their own timeouts as plain errors; keep the distinction.
      if (what.find("Timed out") != std::string::npos || what.find("timed out") != std::string::npos) {
        throw CollectiveTimeout(report);
      }
      throw CollectiveError(report);
    }
  });
  return work;
}

bool ThreadedProcessGroup::stop_comm_thread() { return comm_.shutdown(timeout()); }

}  // namespace tandem
