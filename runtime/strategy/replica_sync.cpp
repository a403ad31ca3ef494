// Cross-replica sums and buffer synchronisation (replica_sync.h).
#include "runtime/strategy/replica_sync.h"

#include <cstring>
#include <stdexcept>

#include "runtime/allocator.h"
#include "runtime/layers/batchnorm.h"
#include "runtime/host_collectives.h"

namespace tandem {

void GroupCrossReplicaSum::sum(Tensor& values, const std::string& what) {
  (void)what;  // the group's own error names the op and its sequence number
  if (group_->takes(values.device())) {
    group_->allreduce(buffer_of(values), ReduceOp::sum)->wait(timeout_);
    return;
  }
  Tensor host = values.to(Device::cpu());
  group_->allreduce(buffer_of(host), ReduceOp::sum)->wait(timeout_);
  values.copy_from(host);
}

class ThreadCrossReplicaSum::Participant final : public CrossReplicaSum {
 public:
  Participant(std::shared_ptr<ThreadCrossReplicaSum> all, int index) : all_(std::move(all)), index_(index) {}
  void sum(Tensor& values, const std::string& what) override { all_->sum(index_, values, what); }
  int replicas() const override { return all_->replicas_; }

 private:
  std::shared_ptr<ThreadCrossReplicaSum> all_;
  int index_;
};

ThreadCrossReplicaSum::ThreadCrossReplicaSum(int replicas, std::chrono::milliseconds timeout)
    : replicas_(replicas), timeout_(timeout), slots_(static_cast<size_t>(replicas)) {
  if (replicas < 1) throw std::invalid_argument("ThreadCrossReplicaSum needs at least one replica");
}

std::shared_ptr<CrossReplicaSum> ThreadCrossReplicaSum::participant(int index) {
  if (index < 0 || index >= replicas_)
    throw std::invalid_argument("ThreadCrossReplicaSum: no replica " + std::to_string(index));
  return std::make_shared<Participant>(shared_from_this(), index);
}

void ThreadCrossReplicaSum::cancel(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (cancelled_.empty()) cancelled_ = reason;
  cv_.notify_all();
}

void ThreadCrossReplicaSum::sum(int index, Tensor& values, const std::string& what) {
  if (values.dtype() != DType::f32) throw std::invalid_argument(what + ": cross-replica sums take f32 tensors");
  const Tensor host = values.device().is_cpu() ? values : values.to(Device::cpu());
  const auto n = static_cast<size_t>(host.numel());
  std::unique_lock<std::mutex> lock(mutex_);
  if (!cancelled_.empty()) throw std::runtime_error(what + ": " + cancelled_);
  slots_[index].assign(host.f32(), host.f32() + n);
  const uint64_t generation = generation_;
  if (++arrived_ == replicas_) {
    for (int r = 0; r < replicas_; ++r)
      if (slots_[r].size() != n) {
        cancelled_ = what + ": replica " + std::to_string(r) + " summed " + std::to_string(slots_[r].size()) +
                     " values, replica " + std::to_string(index) + " " + std::to_string(n);
        cv_.notify_all();
        throw std::invalid_argument(cancelled_);
      }
    result_.assign(n, 0.f);
    for (int r = 0; r < replicas_; ++r)  // replica order, whatever the arrival order
      for (size_t i = 0; i < n; ++i) result_[i] += slots_[r][i];
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
  } else if (!cv_.wait_for(lock, timeout_, [&] { return generation_ != generation || !cancelled_.empty(); })) {
    cancelled_ = "DataParallel: replica " + std::to_string(index) + " waited " +
                 std::to_string(timeout_.count()) + " ms for the other replicas' " + what;
    cv_.notify_all();
    throw std::runtime_error(cancelled_);
  }
  if (generation_ == generation) throw std::runtime_error(what + ": " + cancelled_);
  // The next round cannot overwrite result_ before this replica has joined it.
  if (values.device().is_cpu()) {
    std::memcpy(values.f32(), result_.data(), n * sizeof(float));
  } else {
    values.copy_from(Tensor::from_vector(result_, values.shape()));
  }
}

int set_batchnorm_sync(Model& model, const std::shared_ptr<CrossReplicaSum>& sum) {
  int found = 0;
  for (size_t i = 0; i < model.layer_count(); ++i)
    model.layer(i).visit([&](Module& m) {
      if (auto* bn = dynamic_cast<BatchNorm*>(&m)) {
        bn->set_sync(sum);
        ++found;
      }
    });
  return found;
}

namespace {

size_t buffer_bytes(const Model& model) {
  size_t total = 0;
  for (const ModuleBuffer* b : model.buffers()) total += b->value.nbytes();
  return total;
}

}  // namespace

void broadcast_buffers(ProcessGroup& group, Model& model, int root, std::chrono::milliseconds timeout) {
  const size_t total = buffer_bytes(model);
  if (total == 0) return;
  const Device device = model.buffers().front()->value.device();
  Tensor flat = Tensor::empty({static_cast<int64_t>(total)}, DType::u8, device);
  auto* bytes = static_cast<unsigned char*>(flat.raw());
  size_t at = 0;
  for (const ModuleBuffer* b : model.buffers()) {
    device_copy(bytes + at, device, b->value.raw(), b->value.device(), b->value.nbytes());
    at += b->value.nbytes();
  }
  tensor_broadcast(group, flat, root, timeout);
  if (group.rank() == root) return;
  at = 0;
  for (ModuleBuffer* b : model.buffers()) {
    device_copy(b->value.raw(), b->value.device(), bytes + at, device, b->value.nbytes());
    at += b->value.nbytes();
  }
}

void copy_buffers(Model& dst, const Model& src) {
  const auto& from = src.buffers();
  const auto& to = dst.buffers();
  if (from.size() != to.size())
    throw std::invalid_argument("copy_buffers: the models hold " + std::to_string(from.size()) + " and " +
                                std::to_string(to.size()) + " buffers");
  for (size_t i = 0; i < to.size(); ++i) to[i]->value.copy_from(from[i]->value);
}

}  // namespace tandem
