// The store server's handshake (see store_server_impl.h, store_auth.h): the hello, the
// job-secret challenge and the client's proof, and the limits on connections that have
// not finished it (a deadline, and at most kMaxPendingHandshakes at once, pending_handshakes.h).
// Invariant: a client is `greeted` (its requests are served) only after a hello of this
// job and protocol version and, where the store has a secret, a proof that matches this
// connection's nonces; every other outcome closes the connection and counts as refused.
#include "collectives/store_auth.h"
#include "collectives/store_server_impl.h"
#include "collectives/untrusted_text.h"

namespace tandem {

using namespace store_wire;
using Clock = std::chrono::steady_clock;

// A stranger the store no longer keeps waiting: dropped and counted, unless it was already
// refused and is only waiting for its refusal to be sent.
void StoreServer::Impl::close_stranger(Client& c, const std::string& why) {
  if (c.dead) return;
  if (c.close_after_flush) {
    c.dead = true;
    close(c.fd);
    return;
  }
  drop(c, why);
}

void StoreServer::Impl::evict_pending(uint64_t id) {
  Client& c = clients.at(id);
  close_stranger(c, "more than " + std::to_string(kMaxPendingHandshakes) +
                        " connections are in their handshake; dropped the oldest of those from the address with "
                        "the most (" + c.address + ")");
}

void StoreServer::Impl::expire_handshakes() {
  for (const uint64_t id : pending.expired(Clock::now())) {
    close_stranger(clients.at(id), "it did not finish the handshake within " +
                                       std::to_string(options.handshake_timeout.count()) + " ms");
  }
}

// The handshake is over: the client is one of the job's own.
void StoreServer::Impl::greet(Client& c) {
  c.greeted = true;
  pending.remove(c.id);
}

// A refusal with a reply (why not) sent before the connection closes.
void StoreServer::Impl::refuse_after_reply(Client& c, const std::string& why, Writer& w) {
  refused++;
  dropped++;
  refusal_log.refused(c.peer, why);
  c.close_after_flush = true;
  reply(c, w);
}

// The client's first frame. Returns false for a malformed one (the caller drops it).
bool StoreServer::Impl::hello(Client& c, Reader& r) {
  Writer w;
  const uint32_t magic = r.u32();
  const uint32_t version = r.u32();
  if (!r.ok() || magic != kMagic) return false;
  if (version != kVersion) {  // before parsing the rest, whose layout is this version's
    w.u8(static_cast<uint8_t>(Status::bad_version)).u32(kVersion);
    refuse_after_reply(c, "it speaks store protocol version " + std::to_string(version) + ", this store " +
                              std::to_string(kVersion) + " (Tandem versions mixed in one job?)", w);
    return true;
  }
  const std::string job = r.str(StoreLimits::kMaxKeyBytes);
  c.client_nonce = r.str(store_auth::kNonceBytes);
  if (!r.ok() || !r.done() || c.client_nonce.size() != store_auth::kNonceBytes) return false;
  if (job != options.job_id) {
    w.u8(static_cast<uint8_t>(Status::wrong_job));  // not which job: for a job without a secret, its id is the barrier
    refuse_after_reply(c, "it belongs to job " + quote_untrusted(job) + ", this store serves job '" + options.job_id + "'", w);
    return true;
  }
  if (options.secret.empty()) {
    greet(c);
    w.u8(static_cast<uint8_t>(Status::ok));
  } else {
    c.server_nonce = store_auth::random_bytes(store_auth::kNonceBytes);
    c.challenged = true;
    w.u8(static_cast<uint8_t>(Status::challenge)).str(c.server_nonce);  // nothing made from the secret yet
  }
  reply(c, w);
  return true;
}

// The client's proof of the job secret, against this connection's nonces.
bool StoreServer::Impl::check_proof(Client& c, Reader& r) {
  const std::string theirs = r.str(store_auth::kProofBytes);
  if (!r.ok() || !r.done()) {
    drop(c, "malformed proof of the job secret");
    return true;
  }
  const std::string expected = store_auth::proof(options.secret, store_auth::Role::client, options.job_id,
                                                 c.client_nonce, c.server_nonce);
  Writer w;
  if (!store_auth::proofs_equal(expected, theirs)) {
    w.u8(static_cast<uint8_t>(Status::auth_failed));
    refuse_after_reply(c, theirs.empty() ? "it has no job secret" : "wrong proof of the job secret", w);
    return true;
  }
  // Only now, to a client that proved the secret, the store's own proof.
  greet(c);
  w.u8(static_cast<uint8_t>(Status::ok))
      .str(store_auth::proof(options.secret, store_auth::Role::server, options.job_id, c.client_nonce,
                             c.server_nonce));
  reply(c, w);
  return true;
}

}  // namespace tandem
