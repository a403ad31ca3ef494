// Raw sockets for the store tests: a connection that speaks the protocol badly (or
// replays recorded bytes) on purpose. Reads are bounded (SO_RCVTIMEO), so a test fails
// rather than hangs.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <initializer_list>
#include <string>

#include <gtest/gtest.h>

#include "collectives/store_protocol.h"

namespace tandem {

// A raw connection, for speaking the protocol badly on purpose; from `from` (an address of
// 127.0.0.0/8: loopback has them all) when given, so one test can be several peers.
inline int raw_connect(int port, const char* from = nullptr) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (from) {
    sockaddr_in local{};
    local.sin_family = AF_INET;
    inet_pton(AF_INET, from, &local.sin_addr);
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)), 0);
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  timeval tv{20, 0};  // a bounded read: the test fails rather than hangs
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

inline void raw_send(int fd, const std::string& bytes) {
  ASSERT_EQ(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
}

inline std::string le32(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// Concatenates pieces with append (GCC 12 warns falsely on long operator+ chains).
inline std::string cat(std::initializer_list<std::string> parts) {
  std::string s;
  for (const auto& p : parts) s.append(p);
  return s;
}

// True once the server has closed this connection (recv sees EOF or a reset).
inline bool closed_by_server(int fd) {
  char buf[256];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n == 0) return true;
    if (n < 0) return errno == ECONNRESET;
  }
}

// A hello of this protocol version (or `version`); the nonce defaults to 32 fixed bytes.
inline std::string hello_frame(const std::string& job, const std::string& nonce = std::string(32, 'n'),
                               uint32_t version = store_wire::kVersion) {
  store_wire::Writer w;
  w.u32(store_wire::kMagic).u32(version).str(job).str(nonce);
  return w.frame();
}

// A listening socket on 127.0.0.1 at a port the kernel picks, for a test's fake store.
inline int raw_listen(int& port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(listen(fd, 16), 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  port = ntohs(addr.sin_port);
  return fd;
}

// One whole reply frame's body (status byte first); empty if the connection ended.
inline std::string read_reply(int fd) {
  char header[4];
  if (recv(fd, header, 4, MSG_WAITALL) != 4) return {};
  std::string body(store_wire::read_frame_length(header), '\0');
  if (body.empty() || recv(fd, body.data(), body.size(), MSG_WAITALL) != static_cast<ssize_t>(body.size())) return {};
  return body;
}

}  // namespace tandem
