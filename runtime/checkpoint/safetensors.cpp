// Streaming safetensors writer and validating reader (see safetensors.h for the layout).
#include "runtime/checkpoint/safetensors.h"

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "runtime/allocator.h"

namespace tandem {
namespace {

using json = nlohmann::json;

// The reference implementation refuses headers over 100 MB; so do we, before allocating.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// Staging chunk: bounds the extra host memory of a save or load whatever the model size.
constexpr size_t kChunkBytes = size_t{4} << 20;
// No real dimension comes close; the bound keeps numel * itemsize far from overflow checks'
// edge and every dimension representable as int64_t.
constexpr uint64_t kMaxDim = uint64_t{1} << 48;

// Names come from the file: keep messages readable whatever their length.
std::string quoted(const std::string& name) {
  if (name.size() <= 80) return "'" + name + "'";
  return "'" + name.substr(0, 77) + "...'";
}

uint32_t crc_update(uint32_t crc, const void* data, size_t bytes) {
  return static_cast<uint32_t>(crc32_z(crc, static_cast<const Bytef*>(data), bytes));
}

uint32_t crc_combine(uint32_t first, uint32_t second, uint64_t second_bytes) {
  return static_cast<uint32_t>(crc32_combine(first, second, static_cast<z_off_t>(second_bytes)));
}

SafetensorsEntry parse_entry(const std::string& path, const std::string& name, const json& value,
                             uint64_t data_bytes) {
  const std::string where = path + ": tensor " + quoted(name) + ": ";
  if (!value.is_object()) throw CheckpointError(where + "header entry is not an object");
  SafetensorsEntry e;
  e.name = name;

  auto dtype_it = value.find("dtype");
  if (dtype_it == value.end() || !dtype_it->is_string()) throw CheckpointError(where + "no \"dtype\" string");
  std::optional<DType> dtype = parse_safetensors_dtype(dtype_it->get_ref<const std::string&>());
  if (!dtype) throw CheckpointError(where + "unsupported dtype " + quoted(dtype_it->get<std::string>()));
  e.dtype = *dtype;

  auto shape_it = value.find("shape");
  if (shape_it == value.end() || !shape_it->is_array()) throw CheckpointError(where + "no \"shape\" array");
  uint64_t numel = 1;
  for (const json& d : *shape_it) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > kMaxDim)
      throw CheckpointError(where + "shape has an invalid dimension " + d.dump());
    const uint64_t dim = d.get<uint64_t>();
    // Every partial product fits in int64_t, so shape_numel() of the shape is defined even
    // when a later dimension is 0.
    if (__builtin_mul_overflow(numel, dim, &numel) || numel > static_cast<uint64_t>(INT64_MAX))
      throw CheckpointError(where + "shape's element count overflows");
    e.shape.push_back(static_cast<int64_t>(dim));
  }
  uint64_t nbytes = 0;
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(e.dtype)), &nbytes))
    throw CheckpointError(where + "byte count overflows");

  auto off_it = value.find("data_offsets");
  if (off_it == value.end() || !off_it->is_array() || off_it->size() != 2 || !(*off_it)[0].is_number_unsigned() ||
      !(*off_it)[1].is_number_unsigned())
    throw CheckpointError(where + "\"data_offsets\" is not a pair of non-negative integers");
  e.begin = (*off_it)[0].get<uint64_t>();
  e.end = (*off_it)[1].get<uint64_t>();
  if (e.begin > e.end) throw CheckpointError(where + "data_offsets begin after they end");
  if (e.end > data_bytes)
    throw CheckpointError(where + "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                          ") run past the data section's " + std::to_string(data_bytes) + " bytes (truncated?)");
  if (e.bytes() != nbytes)
    throw CheckpointError(where + "data_offsets span " + std::to_string(e.bytes()) + " bytes but " +
                          safetensors_dtype(e.dtype) + " " + shape_str(e.shape) + " needs " +
                          std::to_string(nbytes));
  return e;
}

}  // namespace

const char* safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32: return "F32";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
    case DType::u8: return "U8";
  }
  return "?";
}

std::optional<DType> parse_safetensors_dtype(std::string_view name) {
  for (DType d : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8})
    if (name == safetensors_dtype(d)) return d;
  return std::nullopt;
}

const SafetensorsEntry* SafetensorsHeader::find(const std::string& name) const {
  for (const SafetensorsEntry& e : tensors)
    if (e.name == name) return &e;
  return nullptr;
}

uint32_t crc32_of(std::string_view bytes) { return crc_update(0, bytes.data(), bytes.size()); }

std::string crc32_hex(uint32_t crc) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", crc);
  return buf;
}

SafetensorsChecksums write_safetensors(const std::string& path, const NamedTensors& tensors,
                                       const std::map<std::string, std::string>& metadata) {
  std::vector<const std::pair<std::string, Tensor>*> order;
  for (const auto& t : tensors) {
    if (t.first.empty() || t.first == "__metadata__")
      throw CheckpointError(path + ": invalid tensor name " + quoted(t.first));
    if (!t.second.defined()) throw CheckpointError(path + ": tensor " + quoted(t.first) + " is undefined");
    order.push_back(&t);
  }
  // Name order is also std::map's (and so the JSON header's) key order.
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->first < b->first; });
  for (size_t i = 1; i < order.size(); ++i)
    if (order[i]->first == order[i - 1]->first)
      throw CheckpointError(path + ": tensor name " + quoted(order[i]->first) + " appears twice");

  json header = json::object();
  uint64_t offset = 0;
  for (auto* t : order) {
    const Tensor& x = t->second;
    header[t->first] = {{"dtype", safetensors_dtype(x.dtype())},
                        {"shape", x.shape()},
                        {"data_offsets", {offset, offset + x.nbytes()}}};
    offset += x.nbytes();
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {  // a name or value that is not UTF-8
    throw CheckpointError(path + ": cannot encode the header: " + e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');

  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(static_cast<uint64_t>(text.size()) >> (8 * i));

  SafetensorsChecksums sums;
  File file(path, File::Mode::create);
  file.write_all(length, 8);
  file.write_all(text.data(), text.size());
  uint32_t crc = crc_update(crc_update(0, length, 8), text.data(), text.size());

  std::vector<unsigned char> staging;  // only for tensors off the CPU; one chunk, reused
  for (auto* t : order) {
    const Tensor& x = t->second;
    const char* src = static_cast<const char*>(x.raw());
    uint32_t tcrc = 0;
    for (size_t done = 0; done < x.nbytes();) {
      const size_t n = std::min(kChunkBytes, x.nbytes() - done);
      const void* bytes = src + done;
      if (!x.device().is_cpu()) {
        staging.resize(kChunkBytes);
        device_copy(staging.data(), Device::cpu(), src + done, x.device(), n);
        bytes = staging.data();
      }
      tcrc = crc_update(tcrc, bytes, n);
      file.write_all(bytes, n);
      done += n;
    }
    sums.tensor_crc32[t->first] = tcrc;
    crc = crc_combine(crc, tcrc, x.nbytes());
  }
  file.sync();
  file.close();
  sums.file_bytes = 8 + text.size() + offset;
  sums.file_crc32 = crc;
  return sums;
}

SafetensorsHeader read_safetensors_header(const std::string& path) {
  File file(path, File::Mode::read);
  SafetensorsHeader h;
  h.file_bytes = file.size();
  if (h.file_bytes < 8)
    throw CheckpointError(path + ": " + std::to_string(h.file_bytes) +
                          " bytes, too short for the 8-byte header length (truncated?)");
  unsigned char length[8];
  file.read_at(length, 8, 0);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(length[i]) << (8 * i);
  if (n > kMaxHeaderBytes)
    throw CheckpointError(path + ": header length " + std::to_string(n) +
                          " exceeds the 100 MB limit (corrupt length field?)");
  if (n > h.file_bytes - 8)
    throw CheckpointError(path + ": header length " + std::to_string(n) + " runs past the end of the " +
                          std::to_string(h.file_bytes) + "-byte file (truncated or corrupt length field)");
  h.header_bytes = n;
  std::string text(n, '\0');
  file.read_at(text.data(), n, 8);
  if (text.empty() || text[0] != '{') throw CheckpointError(path + ": header does not start with '{'");
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw CheckpointError(path + ": header is not a valid JSON object");

  const uint64_t data_bytes = h.file_bytes - 8 - n;
  try {
    for (const auto& [key, value] : j.items()) {
      if (key == "__metadata__") {
        if (!value.is_object()) throw CheckpointError(path + ": __metadata__ is not an object");
        for (const auto& [k, v] : value.items()) {
          if (!v.is_string())
            throw CheckpointError(path + ": __metadata__ value of " + quoted(k) + " is not a string");
          h.metadata[k] = v.get<std::string>();
        }
        continue;
      }
      h.tensors.push_back(parse_entry(path, key, value, data_bytes));
    }
  } catch (const json::exception& e) {  // defensive: every access above is type-checked
    throw CheckpointError(path + ": malformed header: " + e.what());
  }

  std::sort(h.tensors.begin(), h.tensors.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t pos = 0;
  const SafetensorsEntry* prev = nullptr;
  for (const SafetensorsEntry& e : h.tensors) {
    if (e.begin < pos)
      throw CheckpointError(path + ": tensors " + quoted(prev->name) + " and " + quoted(e.name) + " overlap");
    if (e.begin > pos)
      throw CheckpointError(path + ": " + std::to_string(e.begin - pos) + " unused bytes before tensor " +
                            quoted(e.name));
    pos = e.end;
    prev = &e;
  }
  if (pos != data_bytes)
    throw CheckpointError(path + ": the data section has " + std::to_string(data_bytes) +
                          " bytes but its tensors cover " + std::to_string(pos));
  return h;
}

SafetensorsChecksums read_safetensors_data(const std::string& path, const SafetensorsHeader& header,
                                           const std::map<std::string, Tensor>* into) {
  File file(path, File::Mode::read);
  const uint64_t size = file.size();
  if (size != header.file_bytes)
    throw CheckpointError(path + ": file size changed from " + std::to_string(header.file_bytes) + " to " +
                          std::to_string(size) + " bytes while reading");
  SafetensorsChecksums sums;
  sums.file_bytes = size;

  std::vector<unsigned char> staging(std::min<uint64_t>(kChunkBytes, std::max<uint64_t>(header.data_start(), 1)));
  uint32_t crc = 0;
  for (uint64_t done = 0; done < header.data_start();) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(staging.size(), header.data_start() - done));
    file.read_at(staging.data(), n, done);
    crc = crc_update(crc, staging.data(), n);
    done += n;
  }
  staging.resize(kChunkBytes);

  for (const SafetensorsEntry& e : header.tensors) {
    const Tensor* dst = nullptr;
    if (into) {
      auto it = into->find(e.name);
      if (it != into->end()) dst = &it->second;
    }
    if (dst && (dst->nbytes() != e.bytes() || dst->dtype() != e.dtype))
      throw CheckpointError(path + ": tensor " + quoted(e.name) + " does not fit its destination");
    char* direct = dst && dst->device().is_cpu() ? static_cast<char*>(dst->raw()) : nullptr;
    uint32_t tcrc = 0;
    for (uint64_t done = 0; done < e.bytes();) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunkBytes, e.bytes() - done));
      void* buf = direct ? static_cast<void*>(direct + done) : staging.data();
      file.read_at(buf, n, header.data_start() + e.begin + done);
      tcrc = crc_update(tcrc, buf, n);
      if (dst && !direct) device_copy(static_cast<char*>(dst->raw()) + done, dst->device(), buf, Device::cpu(), n);
      done += n;
    }
    sums.tensor_crc32[e.name] = tcrc;
    crc = crc_combine(crc, tcrc, e.bytes());
  }
  sums.file_crc32 = crc;
  return sums;
}

}  // namespace tandem
