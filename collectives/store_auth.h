// The job secret and the store's challenge-response handshake (docs/security.md).
//
// Every connection to a store that has a secret proves, in both directions, that its
// end knows the secret, without sending it (protocol version 4):
//
//   client -> server   hello     magic, version, job id, client nonce Nc (32 random bytes)
//   server -> client   challenge server nonce Ns (32 random bytes, fresh per connection)
//   client -> server   proof     client proof = HMAC-SHA256(secret, "client" | job | Nc | Ns)
//   server -> client   ok + server proof = HMAC-SHA256(secret, "server" | job | Nc | Ns),
//                      or auth_failed
//
// The client proves first: a stranger who connects to the store gets a fresh nonce and
// nothing computed from the secret, so it has no HMAC output to guess the secret against
// offline. The store's proof, sent only to a client whose proof checked out, shows the
// client it reached the job's store and not a program squatting on its port (such a
// program does get the client's proof over its own nonce, which is why secrets must hold
// 256 random bits: secret_problem). The server's nonce makes a recorded handshake
// worthless on a new connection; the two labels keep one side's proof from serving as
// the other's. Proofs are compared in constant time (CRYPTO_memcmp).
// Invariant: a secret that reaches a store or a proof has passed secret_problem.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tandem::store_auth {

constexpr size_t kNonceBytes = 32;
constexpr size_t kProofBytes = 32;  // SHA-256
constexpr size_t kMinSecretBytes = 32;
constexpr size_t kMinSecretBits = 256;  // what 32 random bytes hold
constexpr size_t kMaxSecretBytes = 4096;

enum class Role { client, server };

// `n` bytes from OpenSSL's RAND_bytes; throws std::runtime_error if it fails.
std::string random_bytes(size_t n);
// A new secret: 32 random bytes as 64 hex digits.
std::string generate_secret();
// Empty if `secret` is usable, else what is wrong with it (never the secret itself): 32 to
// 4096 bytes, no NUL, CR or LF, not one byte or a short pattern repeated, and room for at
// least 256 random bits judged by its alphabet: a hex digit holds 4 bits, a character of
// text made only of letters, spaces and ' - _ . , counts 2 (words, whose letters are far
// from random), base64 and other printable ASCII 6, any other byte 8. So `openssl rand
// -hex 32` (64 hex digits) passes, and so do 43 base64 characters or 128 of a passphrase.
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
