// Finding, loading and checking the CUDA plugin (see cuda_plugin.h). Where it looks, in
// order (docs/reference.md, "The CUDA plugin"):
//   1. $TANDEM_CUDA_PLUGIN, a path: only there, so a test or a user can pin one exactly;
//   2. next to the running program: <bin>/../lib/ (the build tree, and an installed prefix)
//      and <bin>/../<libdir>/ (an installed prefix whose libdir is not lib);
//   3. the dynamic loader's search by name: the program's RUNPATH (a program built against
//      an installed Tandem::core carries that prefix's libdir), LD_LIBRARY_PATH, the
//      system's directories.
// A candidate file that exists settles it: if it fails to load, that is the error, rather
// than a later candidate of possibly another build.
#include "core/cuda_plugin.h"

#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include <tandem/version.h>

namespace tandem {

namespace {

constexpr const char* kPluginFile = "libtandem_cuda.so";

struct Loaded {
  const CudaPlugin* table = nullptr;
  std::string error;     // why table is null
  std::string dl_error;  // the dynamic loader's own words, when dlopen failed
};

std::string program_dir() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  std::string exe(buf, static_cast<size_t>(n));
  const size_t slash = exe.rfind('/');
  return slash == std::string::npos ? "" : exe.substr(0, slash);
}

std::vector<std::string> candidates_next_to_program() {
  std::vector<std::string> out;
  const std::string bin = program_dir();
  if (bin.empty()) return out;
  out.push_back(bin + "/../lib/" + kPluginFile);
  const std::string libdir = TANDEM_INSTALL_LIBDIR;
  if (libdir != "lib" && !libdir.empty() && libdir[0] != '/') out.push_back(bin + "/../" + libdir + "/" + kPluginFile);
  return out;
}

std::string dl_error() {
  const char* e = dlerror();
  return e ? e : "unknown dlopen error";
}

// dlopen + entry point + version check of one path (or bare name).
Loaded open_plugin(const std::string& path) {
  // RTLD_NOW: a missing symbol or library is reported here, by name, rather than as a
  // crash at the first call. RTLD_LOCAL: nothing of the plugin but what we ask for is
  // visible to the program or to other libraries.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const std::string why = dl_error();
    return {nullptr,
            "cannot load the CUDA plugin " + path + ": " + why +
                " (a CUDA build needs the CUDA runtime, cuBLAS and NCCL only for --device cuda and --backend nccl)",
            why};
  }
  auto entry = reinterpret_cast<CudaPluginEntry>(dlsym(handle, kCudaPluginEntry));
  if (!entry) {
    const std::string why = dl_error();
    dlclose(handle);
    return {nullptr, path + " is not a Tandem CUDA plugin (" + why + ")", ""};
  }
  const CudaPlugin* table = entry();
  const std::string theirs = table && table->version ? table->version : "?";
  if (!table || table->abi != kCudaPluginAbi || table->size != sizeof(CudaPlugin) ||
      theirs != TANDEM_VERSION_STRING) {
    // Not dlclose'd: its entry point ran, and a refused plugin costs only its mapping.
    return {nullptr, "refusing the CUDA plugin " + path + ": it is Tandem " + theirs + "'s (plugin ABI " +
                         std::to_string(table ? table->abi : 0) + "), this program is Tandem " +
                         TANDEM_VERSION_STRING + "'s (plugin ABI " + std::to_string(kCudaPluginAbi) +
                         "); use the plugin built or installed with this program (TANDEM_CUDA_PLUGIN=path)",
            ""};
  }
  return {table, "", ""};
}

Loaded load() {
  if (const char* env = std::getenv("TANDEM_CUDA_PLUGIN"); env && *env) {
    if (access(env, F_OK) != 0) return {nullptr, std::string("TANDEM_CUDA_PLUGIN=") + env + ": no such file", ""};
    return open_plugin(env);
  }
  const std::vector<std::string> next_to_program = candidates_next_to_program();
  for (const std::string& path : next_to_program) {
    if (access(path.c_str(), F_OK) == 0) return open_plugin(path);
  }
  Loaded by_name = open_plugin(kPluginFile);
  // Found by name but failing (a library it needs is missing) keeps open_plugin's message;
  // not found at all says where it looked.
  if (!by_name.table && by_name.dl_error.rfind(std::string(kPluginFile) + ":", 0) == 0) {
    std::string looked;
    for (const std::string& path : next_to_program) looked += path + ", ";
    by_name.error = "the CUDA plugin " + std::string(kPluginFile) + " was not found (looked for " + looked +
                    "then by name: " + by_name.dl_error + "); set TANDEM_CUDA_PLUGIN to its path";
  }
  return by_name;
}

}  // namespace

const CudaPlugin* try_cuda_plugin(std::string* why) {
  // Process-wide by nature, like the mapping it stands for: loaded once, thread-safely
  // (a function-local static), and kept to exit.
  static const Loaded loaded = load();
  if (!loaded.table && why) *why = loaded.error;
  return loaded.table;
}

const CudaPlugin& cuda_plugin() {
  std::string why;
  const CudaPlugin* table = try_cuda_plugin(&why);
  if (!table) throw std::runtime_error(why);
  return *table;
}

}  // namespace tandem
