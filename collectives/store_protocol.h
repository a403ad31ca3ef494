// Wire format of the TCP store, shared by server and client (internal header).
//
//   frame   = u32 body_length (little endian) + body; body_length <= kMaxFrameBytes
//   hello   = u32 kMagic, u32 kVersion, str job_id, str client_nonce  (first frame of a client)
//   then, if the store has a job secret (store_auth.h):
//     reply challenge = str server_nonce;  client: str client_proof
//     reply ok = str server_proof, or auth_failed (and the server closes)
//   request = u8 Command + fields       reply = u8 Status + fields
//   str     = u32 length + bytes        i64 = 8 bytes little endian
//
// Invariant: a Reader never reads past its span; a short or inconsistent body makes
// it fail (ok() == false) instead of reading garbage, and the server then drops that
// client.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::store_wire {

constexpr uint32_t kMagic = 0x54444d53;  // "TDMS"
constexpr uint32_t kVersion = 4;  // 2: read_aged; 3: nonces and the job-secret handshake; 4: the client proves first

enum class Command : uint8_t {
  set = 1,
  get = 2,       // str key, i64 timeout_ms
  wait = 3,      // u32 n, n x str key, i64 timeout_ms
  add = 4,       // str key, i64 delta
  compare_set = 5,  // str key, str expected, str desired
  delete_key = 6,   // str key
  check = 7,        // u32 n, n x str key
  num_keys = 8,
  read_aged = 9,    // u32 n, n x str key -> u32 n, n x (u8 present [, str value, i64 age_ms])
};

enum class Status : uint8_t {
  ok = 0,
  timeout = 1,    // u32 n, n x str missing key
  error = 2,      // str message (request was well-formed but not applicable)
  wrong_job = 3,  // no fields: a stranger is not told which job the store serves
  bad_version = 4,  // u32 server version (kept as it was in version 2, so old clients can say it)
  auth_failed = 5,  // the client's proof of the job secret was absent or wrong
  challenge = 6,    // str server_nonce: prove the job secret over it (the store's proof follows an ok)
};

class Writer {
 public:
  Writer() { out_.resize(4); }  // room for the length prefix
  Writer& u8(uint8_t v) { out_.push_back(static_cast<char>(v)); return *this; }
  Writer& u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    return *this;
  }
  Writer& i64(int64_t v) {
    const uint64_t u = static_cast<uint64_t>(v);
    for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
    return *this;
  }
  Writer& str(std::string_view s) {
    u32(static_cast<uint32_t>(s.size()));
    out_.append(s.data(), s.size());
    return *this;
  }
  // The finished frame, length prefix filled in.
  std::string frame() {
    const uint32_t n = static_cast<uint32_t>(out_.size() - 4);
    for (int i = 0; i < 4; ++i) out_[i] = static_cast<char>((n >> (8 * i)) & 0xff);
    return std::move(out_);
  }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view body) : in_(body) {}
  bool ok() const { return ok_; }
  bool done() const { return pos_ == in_.size(); }

  uint8_t u8() {
    if (!need(1)) return 0;
    return static_cast<uint8_t>(in_[pos_++]);
  }
  uint32_t u32() {
    if (!need(4)) return 0;
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(in_[pos_++])) << (8 * i);
    return v;
  }
  int64_t i64() {
    if (!need(8)) return 0;
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(in_[pos_++])) << (8 * i);
    return static_cast<int64_t>(v);
  }
  // A string of at most `max_len` bytes.
  std::string str(size_t max_len) {
    const uint32_t n = u32();
    if (!ok_ || n > max_len || !need(n)) {
      ok_ = false;
      return {};
    }
    std::string s(in_.substr(pos_, n));
    pos_ += n;
    return s;
  }

 private:
  bool need(size_t n) {
    if (!ok_ || in_.size() - pos_ < n) ok_ = false;
    return ok_;
  }
  std::string_view in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

inline uint32_t read_frame_length(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

}  // namespace tandem::store_wire
