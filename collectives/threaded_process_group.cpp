// ThreadedProcessGroup (see threaded_process_group.h).
#include "collectives/threaded_process_group.h"

namespace tandem {

ThreadedProcessGroup::ThreadedProcessGroup(Setup setup)
    : ProcessGroup(setup), comm_(setup.backend + " rank " + std::to_string(setup.rank)) {}

std::shared_ptr<Work> ThreadedProcessGroup::submit(const Collective& c, std::function<void()> engine_call) {
  // The handles and the queued task may outlive the group: they hold it weakly.
  std::weak_ptr<ProcessGroup> weak = weak_from_this();
  auto on_timeout = [weak](const Collective& op, std::chrono::milliseconds waited) {
    auto group = std::static_pointer_cast<ThreadedProcessGroup>(weak.lock());
    if (!group) return op.describe() + " timed out after " + std::to_string(waited.count()) + " ms";
    std::string report = group->timeout_report(op, waited);
    group->comm_.break_group(op.describe() + " timed out");
    return report;
  };
  auto work = std::make_shared<CompletionWork>(c, timeout(), on_timeout);
  // Nothing to move: skip the engine, but still go through the queue so handles keep
  // completing in issue order.
  if (c.op != OpType::barrier && c.bytes() == 0) engine_call = [] {};
  CommThread::Task prepare;
  if (start_) {
    auto check = std::make_shared<PendingCheck>(c, size());
    prepare = [check, start = start_] { check->start(start); };
    engine_call = [check, start = start_, call = std::move(engine_call)] {
      check->finish(start);
      call();
    };
  } else if (gather_) {
    engine_call = [gather = gather_, c, size = size(), call = std::move(engine_call)] {
      require_ranks_agree(c, size, gather);
      call();
    };
  }
  comm_.submit(work, [weak, c, call = std::move(engine_call)] {
    try {
      call();
    } catch (const CollectiveError&) {
      throw;
    } catch (const std::exception& e) {
      auto group = std::static_pointer_cast<ThreadedProcessGroup>(weak.lock());
      const std::string what = e.what();
      const std::string report =
          group ? group->failure_report(c, what) : c.describe() + " failed: " + what;
      // Engines report their own timeouts as plain errors; keep the distinction.
      if (what.find("Timed out") != std::string::npos || what.find("timed out") != std::string::npos) {
        throw CollectiveTimeout(report);
      }
      throw CollectiveError(report);
    }
  }, std::move(prepare));
  return work;
}

bool ThreadedProcessGroup::stop_comm_thread() { return comm_.shutdown(timeout()); }

}  // namespace tandem
