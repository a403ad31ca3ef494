// init_process_group: builds this process's group from its environment in one call.
//
// Rank and world come from RANK / WORLD_SIZE / LOCAL_RANK (tandemrun) or, under
// mpirun, OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK, or, under srun with neither set,
// SLURM_PROCID / SLURM_NTASKS / ... (collectives/slurm_env.h: there, without a store named
// below, rank 0 hosts it on the step's first node, on a port derived from the job and
// step ids, job id slurm-JOB.STEP). The store is at TANDEM_STORE_ADDR:
// TANDEM_STORE_PORT (tandemrun, which leaves MASTER_PORT to the job's own processes),
// else at MASTER_ADDR:MASTER_PORT; rank 0 hosts it unless TANDEM_STORE_HOSTED=1 (the
// launcher does), TANDEM_JOB_ID names the job (a store of another job is refused), and
// the job secret (TANDEM_JOB_SECRET_FD or TANDEM_JOB_SECRET_FILE) is proved to the store
// and by it. Under torchrun (TORCHELASTIC_USE_AGENT_STORE=True) MASTER_PORT is the agent's
// PyTorch store, so without TANDEM_STORE_* the environment is refused, by name. Under mpirun
// without MASTER_ADDR the mpi backend starts its own store (rank 0, a free port,
// address shared with MPI_Bcast), so timeouts can still name the missing ranks.
//
// Rendezvous: every rank sets "arrived/<rank>" and waits for all the others; after
// `rendezvous_timeout` the error lists the ranks whose keys are absent.
//
// The mpi, gloo, shm and hier backends check before every op that all ranks issued the same one
// (collectives/op_check.h); InitOptions::check_ops = false or TANDEM_COLLECTIVE_CHECKS=0
// turns that off (either one suffices).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/collectives/process_group.h"

namespace tandem {

enum class Backend : uint8_t { automatic, mpi, gloo, nccl, shm, hier };
const char* backend_str(Backend backend);  // "auto", "mpi", "gloo", "nccl", "shm", "hier"
// Throws std::invalid_argument listing the accepted names.
Backend parse_backend(std::string_view name);
// Whether this build includes the backend (CMake options TANDEM_WITH_*).
bool backend_built(Backend backend);

struct InitOptions {
  // auto: nccl for CUDA; else mpi under mpirun; else shm when every rank is on this node
  // (LOCAL_WORLD_SIZE == WORLD_SIZE, as tandemrun sets it); else, under srun across
  // nodes, hier (shm within each node, gloo between nodes); else gloo. Outside srun, hier
  // is only chosen when asked for.
  Backend backend = Backend::automatic;
  DeviceKind device = DeviceKind::cpu;   // cuda: the device index is LOCAL_RANK
  // Every collective wait, and each engine's own timeout.
  std::chrono::milliseconds timeout = std::chrono::minutes(10);
  // How long ranks wait for each other at start-up.
  std::chrono::milliseconds rendezvous_timeout = std::chrono::minutes(10);
  // Keys of different groups sharing one store never collide.
  std::string group_name = "default";
  // Before each op, check that every rank passed the same op kind, dtype, counts, root
  // and reduce op, and fail it on every rank if not (mpi, gloo, shm; one small extra
  // gather per op). TANDEM_COLLECTIVE_CHECKS=0 also turns it off.
  bool check_ops = true;
};

// The exit code of a process that stopped on request to be resumed later (EX_TEMPFAIL):
// tandem-train after SIGUSR1 with a checkpoint written. tandemrun exits with it too when
// every worker did, without a restart (docs/reference.md, "Stopping to be resumed").
inline constexpr int kExitStoppedToResume = 75;

// What the launcher (or mpirun) told this process.
struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = -1;  // LOCAL_WORLD_SIZE (tandemrun); -1: not given
  int node_rank = -1;         // NODE_RANK (tandemrun); -1: not given
  int node_count = -1;        // nodes of the job (under srun); -1: not known
  bool under_mpirun = false;
  bool under_slurm = false;   // started by srun, read from SLURM_* (collectives/slurm_env.h)
  std::string master_addr;  // the store's: TANDEM_STORE_ADDR, else MASTER_ADDR; empty: none given
  int master_port = -1;
  // Under srun without a named port: the ports rank 0 tries in turn, and the other ranks
  // with it (master_port is the first). Empty: master_port alone.
  std::vector<int> port_candidates;
  std::string job_id = "tandem";
  bool store_hosted = false;  // TANDEM_STORE_HOSTED=1: the launcher hosts the store
  int restart_count = 0;      // TANDEM_RESTART_COUNT: keeps restarts' keys apart
  bool collective_checks = true;  // TANDEM_COLLECTIVE_CHECKS=0 turns the op check off
  // The job secret (collectives/store_auth.h): from the descriptor TANDEM_JOB_SECRET_FD
  // (tandemrun's workers) or the file TANDEM_JOB_SECRET_FILE; empty: none.
  std::string job_secret;
};

using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
// The lookup of this process's environment (getenv).
EnvLookup process_environment();
// Parses the variables above; throws std::invalid_argument naming the variable that
// is missing or invalid. The lookup defaults to the process environment.
LaunchEnv read_launch_env(const EnvLookup& lookup = {});

// Picks the backend `auto` means for this environment and device.
Backend resolve_backend(Backend requested, DeviceKind device, const LaunchEnv& env);
// Why resolve_backend picked what it did, for the log: "auto: 2 ranks, all on this node,
// CPU tensors", "requested", ...
std::string backend_reason(Backend requested, DeviceKind device, const LaunchEnv& env);

std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& options = {});
std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& options, const LaunchEnv& env);

// Sets "arrived/<rank>" and waits for every rank's key; throws CollectiveTimeout
// naming the ranks that did not arrive.
void rendezvous(Store& store, int rank, int world_size, std::chrono::milliseconds timeout);

}  // namespace tandem
