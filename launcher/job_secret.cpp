// The job secret's source and its sealed memfd for the workers (see header).
#include "launcher/job_secret.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "collectives/store_auth.h"

namespace tandem::launcher {

namespace {

// A read-only (sealed) in-memory file holding the secret, close-on-exec in tandemrun
// itself; spawn_worker lets each worker inherit it.
int sealed_memfd(const std::string& secret) {
  const int fd = memfd_create("tandem-job-secret", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) throw std::runtime_error(std::string("memfd_create for the job secret failed: ") + strerror(errno));
  size_t done = 0;
  while (done < secret.size()) {
    const ssize_t n = write(fd, secret.data() + done, secret.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      close(fd);
      throw std::runtime_error(std::string("writing the job secret's memfd failed: ") + strerror(e));
    }
    done += static_cast<size_t>(n);
  }
  fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  return fd;
}

}  // namespace

void prepare_job_secret(LaunchOptions& o) {
  if (!o.job_secret_file.empty()) {
    try {
      o.job_secret = store_auth::read_secret_file(o.job_secret_file, o.job_secret_file_source);
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
  } else if (o.nnodes == 1) {
    o.job_secret = store_auth::generate_secret();
  } else {
    spdlog::warn("no job secret (--job-secret-file or TANDEM_JOB_SECRET_FILE): the store at {} lets in any "
                 "process that can reach it and knows the job id '{}', and such a process can read and rewrite "
                 "where the ranks connect; give every node the same secret file (docs/security.md)",
                 o.external_store() ? o.store_host + ":" + std::to_string(o.store_port)
                                    : o.master_addr + ":" + std::to_string(o.master_port),
                 o.job_id);
    return;
  }
  o.job_secret_fd = sealed_memfd(o.job_secret);
}

}  // namespace tandem::launcher
