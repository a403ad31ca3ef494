// Job secrets and handshake proofs over OpenSSL (see store_auth.h). No crypto is
// written here: HMAC, SHA-256, the random source and the comparison are OpenSSL's.
#include "collectives/store_auth.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "collectives/store_protocol.h"

namespace tandem::store_auth {

std::string random_bytes(size_t n) {
  std::string out(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) != 1) {
    throw std::runtime_error("OpenSSL RAND_bytes failed: no random bytes for the job secret or a nonce");
  }
  return out;
}

std::string generate_secret() {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : random_bytes(32)) {
    hex += kHex[c >> 4];
    hex += kHex[c & 15];
  }
  return hex;
}

namespace {

// The smallest p such that secret[i] == secret[i + p] for every i (the prefix function).
size_t smallest_period(std::string_view s) {
  std::vector<size_t> border(s.size(), 0);
  for (size_t i = 1, k = 0; i < s.size(); ++i) {
    while (k > 0 && s[i] != s[k]) k = border[k - 1];
    if (s[i] == s[k]) ++k;
    border[i] = k;
  }
  return s.size() - border.back();
}

// Bits of randomness a character of `s` can hold at most, judged by the smallest of these
// alphabets all of `s` is drawn from (store_auth.h).
int bits_per_character(std::string_view s) {
  const auto all = [&](auto in) { return std::all_of(s.begin(), s.end(), [&](char c) { return in(static_cast<unsigned char>(c)); }); };
  if (all([](unsigned char c) { return std::isxdigit(c) != 0; })) return 4;
  if (all([](unsigned char c) { return std::isalpha(c) || std::strchr(" -_.,'", c); })) return 2;  // words
  if (all([](unsigned char c) { return std::isalnum(c) || std::strchr("+/=-_", c); })) return 6;  // base64
  if (all([](unsigned char c) { return c >= 0x20 && c < 0x7f; })) return 6;                       // printable
  return 8;
}

}  // namespace

std::string secret_problem(std::string_view secret) {
  if (secret.empty()) return "it is empty";
  if (secret.size() < kMinSecretBytes) {
    return "it is " + std::to_string(secret.size()) + " bytes long, shorter than the " +
           std::to_string(kMinSecretBytes) + " bytes a secret needs (make one with `openssl rand -hex 32`)";
  }
  if (secret.size() > kMaxSecretBytes) {
    return "it is " + std::to_string(secret.size()) + " bytes long, longer than " + std::to_string(kMaxSecretBytes);
  }
  if (secret.find_first_of(std::string_view("\0\r\n", 3)) != std::string_view::npos) {
    return "it contains a NUL, CR or LF byte (one secret on one line)";
  }
  // Never the secret itself in a message: only what is wrong with it.
  const size_t period = smallest_period(secret);
  if (period == 1) return "it is one byte repeated " + std::to_string(secret.size()) + " times";
  if (period <= secret.size() / 2) {
    return "it repeats a pattern of " + std::to_string(period) + " bytes (make one with `openssl rand -hex 32`)";
  }
  const size_t bits = secret.size() * static_cast<size_t>(bits_per_character(secret));
  if (bits < kMinSecretBits) {
    return "it can hold at most " + std::to_string(bits) + " bits of randomness judged by its characters, fewer than the " +
           std::to_string(kMinSecretBits) + " a secret needs (hex digits count 4 bits each, words 2, base64 and other "
           "printable text 6, other bytes 8; make one with `openssl rand -hex 32`)";
  }
  return {};
}

namespace {

std::string checked(std::string text, const std::string& what) {
  if (text.size() >= 2 && text.compare(text.size() - 2, 2, "\r\n") == 0) {
    text.resize(text.size() - 2);
  } else if (!text.empty() && text.back() == '\n') {
    text.pop_back();
  }
  if (const std::string why = secret_problem(text); !why.empty()) {
    throw std::invalid_argument(what + ": not a usable job secret: " + why);
  }
  return text;
}

// Reads at most kMaxSecretBytes + 3 bytes from offset 0: enough to tell a too-long secret.
std::string read_prefix(int fd, const std::string& what) {
  std::string text(kMaxSecretBytes + 3, '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = pread(fd, text.data() + got, text.size() - got, static_cast<off_t>(got));
    if (n == 0) break;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::invalid_argument(what + ": cannot read the job secret: " + std::strerror(errno));
    got += static_cast<size_t>(n);
  }
  text.resize(got);
  return text;
}

}  // namespace

std::string read_secret_file(const std::string& path, const std::string& what) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::invalid_argument(what + ": cannot open the job secret file: " + std::strerror(errno));
  try {
    std::string text = read_prefix(fd, what);
    close(fd);
    return checked(std::move(text), what);
  } catch (...) {
    close(fd);
    throw;
  }
}

std::string read_secret_fd(int fd, const std::string& what) { return checked(read_prefix(fd, what), what); }

std::string proof(std::string_view secret, Role role, std::string_view job_id, std::string_view client_nonce,
                  std::string_view server_nonce) {
  store_wire::Writer message;
  message.str(role == Role::client ? "tandem-store-client" : "tandem-store-server")
      .str(job_id)
      .str(client_nonce)
      .str(server_nonce);
  const std::string m = message.frame();
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
            reinterpret_cast<const unsigned char*>(m.data()), m.size(), mac, &len) ||
      len != kProofBytes) {
    throw std::runtime_error("OpenSSL HMAC-SHA256 failed");
  }
  return std::string(reinterpret_cast<const char*>(mac), len);
}

bool proofs_equal(std::string_view a, std::string_view b) {
  return a.size() == kProofBytes && b.size() == kProofBytes && CRYPTO_memcmp(a.data(), b.data(), kProofBytes) == 0;
}

}  // namespace tandem::store_auth
