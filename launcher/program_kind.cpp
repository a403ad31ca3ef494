// Reads an ELF file's section headers for Tandem's heartbeat marker (see header).
#include "launcher/program_kind.h"

#include <elf.h>

#include <cstring>
#include <fstream>
#include <vector>

namespace tandem::launcher {

namespace {

// The section names of an ELF file of one class (Ehdr/Shdr: Elf32_* or Elf64_*), in the
// host's byte order; empty when the headers do not hold together.
template <typename Ehdr, typename Shdr>
std::vector<std::string> section_names(std::ifstream& in) {
  Ehdr eh{};
  if (!in.seekg(0) || !in.read(reinterpret_cast<char*>(&eh), sizeof(eh))) return {};
  if (eh.e_shoff == 0 || eh.e_shentsize != sizeof(Shdr)) return {};
  auto read_header = [&](size_t i, Shdr& sh) {
    return static_cast<bool>(in.seekg(static_cast<std::streamoff>(eh.e_shoff + i * sizeof(Shdr))) &&
                             in.read(reinterpret_cast<char*>(&sh), sizeof(sh)));
  };
  // With 0xff00 sections or more, the count and the names' index live in section 0.
  Shdr first{};
  if (!read_header(0, first)) return {};
  const size_t count = eh.e_shnum != 0 ? eh.e_shnum : static_cast<size_t>(first.sh_size);
  const size_t names_index = eh.e_shstrndx != SHN_XINDEX ? eh.e_shstrndx : static_cast<size_t>(first.sh_link);
  if (count == 0 || count > 1000000 || names_index >= count) return {};
  Shdr names{};
  if (!read_header(names_index, names) || names.sh_size > (64u << 20)) return {};
  std::string table(static_cast<size_t>(names.sh_size), '\0');
  if (!in.seekg(static_cast<std::streamoff>(names.sh_offset)) || !in.read(table.data(), table.size())) return {};
  std::vector<std::string> out;
  for (size_t i = 0; i < count; ++i) {
    Shdr sh{};
    if (!read_header(i, sh)) return {};
    if (sh.sh_name < table.size()) out.emplace_back(table.c_str() + sh.sh_name);
  }
  return out;
}

}  // namespace

ProgramKind program_kind(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char ident[EI_NIDENT] = {};
  if (!in || !in.read(reinterpret_cast<char*>(ident), EI_NIDENT) || std::memcmp(ident, ELFMAG, SELFMAG) != 0) {
    return {false, "not an ELF program (a script, or a file tandemrun cannot read)"};
  }
  const bool host_order = ident[EI_DATA] == (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? ELFDATA2LSB : ELFDATA2MSB);
  std::vector<std::string> names;
  if (host_order && ident[EI_CLASS] == ELFCLASS64) names = section_names<Elf64_Ehdr, Elf64_Shdr>(in);
  if (host_order && ident[EI_CLASS] == ELFCLASS32) names = section_names<Elf32_Ehdr, Elf32_Shdr>(in);
  for (const auto& n : names) {
    if (n == kHeartbeatSection) return {true, {}};
  }
  return {false, names.empty() ? "an ELF program whose section headers tandemrun cannot read"
                               : "an ELF program without Tandem's collectives (no section " +
                                     std::string(kHeartbeatSection) + ")"};
}

}  // namespace tandem::launcher
