// IDX reader through zlib's gz* API, which reads gzip and plain files alike.
// Invariant: every failure throws std::runtime_error("IDX file '<path>': <what is wrong>"), and a
// header promising more data than the file holds is caught before any caller sees a short array.
#include "runtime/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "runtime/tensor.h"

namespace tandem {
namespace {

constexpr size_t kChunkBytes = size_t{1} << 26;        // one gzread call at most (fits in int)
constexpr uint64_t kMaxDataBytes = uint64_t{1} << 36;  // 64 GiB: anything larger is a bad header

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error("IDX file '" + path + "': " + what);
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", v);
  return buf;
}

std::string hex8(uint8_t v) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02X", v);
  return buf;
}

const char* idx_type_name(uint8_t type) {
  switch (type) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    default: return nullptr;
  }
}

// Owns one gzFile; reads report short counts at end of file and throw on real errors.
class GzReader {
 public:
  explicit GzReader(const std::string& path) : path_(path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::file_status st = fs::status(path, ec);
    if (!fs::exists(st)) fail(path, "no such file");
    if (fs::is_directory(st)) fail(path, "is a directory, not a file");
    errno = 0;
    file_ = gzopen(path.c_str(), "rb");
    if (!file_)
      fail(path, std::string("cannot open: ") + (errno ? std::strerror(errno) : "out of memory"));
    gzbuffer(file_, 1 << 20);
  }
  ~GzReader() {
    if (file_) gzclose_r(file_);
  }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // Reads up to `bytes` into dst; returns how many were read (fewer only at end of data).
  size_t read(void* dst, size_t bytes) {
    auto* out = static_cast<unsigned char*>(dst);
    size_t done = 0;
    while (done < bytes && !at_end_) {
      unsigned len = static_cast<unsigned>(std::min(bytes - done, kChunkBytes));
      int got = gzread(file_, out + done, len);
      if (got < 0) raise_error();
      if (got == 0) {
        at_end_ = true;
        // A gzip stream cut mid-member ends with Z_BUF_ERROR: data is short, which the caller
        // reports with the byte counts; note it so the message can say why.
        int errnum = Z_OK;
        gzerror(file_, &errnum);
        if (errnum == Z_BUF_ERROR) gzip_cut_ = true;
        else if (errnum != Z_OK) raise_error();
      }
      done += static_cast<size_t>(std::max(got, 0));
    }
    return done;
  }

  // Counts the bytes left until end of file (used to report trailing garbage).
  uint64_t count_rest() {
    std::vector<unsigned char> buf(1 << 16);
    uint64_t total = 0;
    size_t got;
    while ((got = read(buf.data(), buf.size())) > 0) total += got;
    return total;
  }

  std::string cut_note() const {
    return gzip_cut_ ? " (the gzip stream itself ends early: the file was cut during download "
                       "or copy)"
                     : "";
  }

 private:
  [[noreturn]] void raise_error() {
    int errnum = Z_OK;
    const char* msg = gzerror(file_, &errnum);
    if (errnum == Z_ERRNO) fail(path_, std::string("read error: ") + std::strerror(errno));
    std::string text = msg ? msg : "unknown zlib error";
    // zlib's message starts with the path, which ours already names.
    if (text.rfind(path_ + ": ", 0) == 0) text.erase(0, path_.size() + 2);
    fail(path_, "corrupt gzip data: " + text);
  }

  std::string path_;
  gzFile file_ = nullptr;
  bool at_end_ = false;
  bool gzip_cut_ = false;
};

uint32_t big_endian32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

}  // namespace

IdxArray read_idx(const std::string& path) {
  GzReader in(path);

  unsigned char magic_bytes[4];
  size_t got = in.read(magic_bytes, 4);
  if (got < 4)
    fail(path, "truncated header: the file holds " + std::to_string(got) +
                   " bytes, an IDX header needs at least 4 (the magic number)" + in.cut_note());
  uint32_t magic = big_endian32(magic_bytes);
  if (magic_bytes[0] != 0 || magic_bytes[1] != 0) {
    std::string hint = (magic_bytes[0] == 0x1F && magic_bytes[1] == 0x8B)
                           ? " (this is gzip data inside gzip: the file was compressed twice)"
                           : " (not an IDX file)";
    fail(path, "wrong magic number " + hex32(magic) +
                   ", expected 0x000008NN (two zero bytes, type 0x08 = unsigned byte, "
                   "then the number of dimensions)" + hint);
  }
  const uint8_t type = magic_bytes[2];
  if (type != static_cast<uint8_t>(IdxType::u8)) {
    const char* name = idx_type_name(type);
    fail(path, "magic number " + hex32(magic) + " has data type " + hex8(type) +
                   (name ? std::string(" (") + name + ")" : std::string(" (not an IDX type)")) +
                   ", only type 0x08 (unsigned byte) is supported");
  }
  const int ndims = magic_bytes[3];
  if (ndims == 0) fail(path, "magic number " + hex32(magic) + " declares 0 dimensions");

  std::vector<unsigned char> dim_bytes(4 * static_cast<size_t>(ndims));
  got = in.read(dim_bytes.data(), dim_bytes.size());
  if (got < dim_bytes.size())
    fail(path, "truncated header: " + std::to_string(ndims) + " dimensions need " +
                   std::to_string(4 + dim_bytes.size()) + " header bytes, the file ends after " +
                   std::to_string(4 + got) + in.cut_note());

  IdxArray out;
  out.path = path;
  out.type = IdxType::u8;
  for (int i = 0; i < ndims; ++i) out.dims.push_back(big_endian32(dim_bytes.data() + 4 * i));
  uint64_t expected = 1;
  for (int64_t d : out.dims) {
    if (d != 0 && expected > kMaxDataBytes / static_cast<uint64_t>(d))
      fail(path, "header dimensions " + shape_str(out.dims) + " describe more than " +
                     std::to_string(kMaxDataBytes) + " bytes of data: the header is damaged");
    expected *= static_cast<uint64_t>(d);
  }

  // Grow as data arrives, doubling from 1 MiB, so a damaged header cannot make us allocate
  // much more than the file really holds.
  uint64_t have = 0;
  while (have < expected) {
    const uint64_t step = std::clamp<uint64_t>(have, uint64_t{1} << 20, kChunkBytes);
    size_t want = static_cast<size_t>(std::min<uint64_t>(expected - have, step));
    out.data.resize(static_cast<size_t>(have) + want);
    size_t n = in.read(out.data.data() + have, want);
    have += n;
    if (n < want) break;
  }
  if (have < expected)
    fail(path, "truncated data: dimensions " + shape_str(out.dims) + " need " +
                   std::to_string(expected) + " bytes of data, got " + std::to_string(have) +
                   in.cut_note());

  uint64_t trailing = in.count_rest();
  if (trailing > 0)
    fail(path, std::to_string(trailing) + " trailing bytes after the " + std::to_string(expected) +
                   " bytes of data that dimensions " + shape_str(out.dims) +
                   " describe (the header does not match the data)");
  return out;
}

}  // namespace tandem
