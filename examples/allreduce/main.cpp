// allreduce: the smallest program on Tandem's collectives alone (Tandem::collectives).
// Every rank fills N floats with (rank + 1) * (i + 1) and all-reduces them (sum); element i
// must then be (i + 1) * W(W+1)/2 on every rank, exactly: float sums of integers are exact
// below 2^24, so the check is ==, not a tolerance (nccl-tests' trick).
//   tandemrun --nproc-per-node 2 -- ./allreduce [N]     mpirun -np 2 ./allreduce [N]
// Started without either, init_process_group() throws and says how to start it (exit 1).
#include <tandem/collectives.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  long long n = 65536;  // floats per rank
  char* end = nullptr;
  if (argc > 2 || (argc == 2 && ((n = std::strtoll(argv[1], &end, 10)) <= 0 || *end != '\0'))) {
    std::fprintf(stderr, "usage: allreduce [N]   (N > 0 floats per rank, default 65536)\n");
    return 2;
  }
  try {
    // Rank, world and rendezvous from the environment tandemrun or mpirun set.
    std::shared_ptr<tandem::ProcessGroup> pg = tandem::init_process_group();
    const int rank = pg->rank(), world = pg->size();
    const double ranks_sum = world * (world + 1) / 2.0;  // 1 + 2 + ... + W
    if (static_cast<double>(n) * ranks_sum > 16777216.0) {
      std::fprintf(stderr, "allreduce: N * W(W+1)/2 must stay below 2^24 for an exact check\n");
      return 2;
    }

    std::vector<float> x(n);
    for (long long i = 0; i < n; ++i) x[i] = static_cast<float>((rank + 1) * (i + 1));
    // In place: x is the input and receives the sum. The Work completes asynchronously;
    // wait() blocks (up to the group's timeout) and rethrows the op's error, if any.
    pg->allreduce(tandem::cpu_buffer(x.data(), n), tandem::ReduceOp::sum)->wait();

    long long wrong = 0;
    for (long long i = 0; i < n; ++i) {
      const float expected = static_cast<float>((i + 1) * ranks_sum);
      if (x[i] != expected && wrong++ < 5)
        std::fprintf(stderr, "rank %d: x[%lld] = %.1f, expected %.1f\n", rank, i, x[i], expected);
    }
    if (wrong > 0) {
      std::fprintf(stderr, "rank %d of %d: allreduce of %lld floats FAILED: %lld wrong\n", rank, world, n, wrong);
      return 1;
    }
    std::printf("rank %d of %d: allreduce of %lld floats ok, x[0] = %.0f, x[%lld] = %.0f\n", rank, world, n,
                x[0], n - 1, x[n - 1]);
    return 0;
  } catch (const std::exception& e) {  // CollectiveError, CollectiveTimeout, bad environment
    std::fprintf(stderr, "allreduce: %s\n", e.what());
    return 1;
  }
}
