// The job secret and the store's challenge-response handshake (docs/security.md).
//
// Every connection to a store that has a secret proves, in both directions, that its
// end knows the secret, without sending it:
//
//   client -> server   hello     magic, version, job id, client nonce (32 random bytes)
//   server -> client   challenge server nonce (32 random bytes, fresh per connection),
//                                server proof = HMAC-SHA256(secret, "server" | job | Nc | Ns)
//   client -> server   proof     client proof = HMAC-SHA256(secret, "client" | job | Nc | Ns)
//   server -> client   ok | auth_failed
//
// The client checks the server's proof first, so a process squatting on the store's
// port learns nothing it can use; the server's nonce makes a recorded handshake
// worthless on a new connection; the two labels keep one side's proof from serving as
// the other's. Proofs are compared in constant time (CRYPTO_memcmp).
// Invariant: a secret that reaches a store or a proof has passed check_secret.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tandem::store_auth {

constexpr size_t kNonceBytes = 32;
constexpr size_t kProofBytes = 32;  // SHA-256
constexpr size_t kMinSecretBytes = 16;
constexpr size_t kMaxSecretBytes = 4096;

enum class Role { client, server };

// `n` bytes from OpenSSL's RAND_bytes; throws std::runtime_error if it fails.
std::string random_bytes(size_t n);
// A new secret: 32 random bytes as 64 hex digits.
std::string generate_secret();
// Empty if `secret` is usable (16..4096 bytes, no NUL, CR or LF), else what is wrong.
std::string secret_problem(std::string_view secret);
// The secret in a file (one trailing newline ignored). Throws std::invalid_argument
// naming `what` (e.g. "--job-secret-file /x") when the file is missing, unreadable,
// empty or not a usable secret.
std::string read_secret_file(const std::string& path, const std::string& what);
// The same from an inherited descriptor, read from offset 0 (it may be read again).
std::string read_secret_fd(int fd, const std::string& what);

// HMAC-SHA256(secret, label(role) | job_id | client_nonce | server_nonce), each field
// length-prefixed so no two different inputs give the same message.
std::string proof(std::string_view secret, Role role, std::string_view job_id, std::string_view client_nonce,
                  std::string_view server_nonce);
// Constant-time equality of two proofs (false if either has the wrong length).
bool proofs_equal(std::string_view a, std::string_view b);

}  // namespace tandem::store_auth
