#include "executor/cuda_probe.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <vector>

#include "executor/cuda_plugin_abi.h"
#include "models/error.h"

namespace shardplan {
namespace {

// The plugin sits in lib/shardplan beside the executable's folder once installed
// (prefix/bin, prefix/lib/shardplan: cmake/install.cmake), in lib/ in the build tree
// (build/cli, build/lib), or in the executable's own folder.
std::vector<std::filesystem::path> plugin_candidates() {
  std::error_code error;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return {kCudaPluginFile};
  const auto dir = exe.parent_path();
  return {dir / ".." / SHARDPLAN_PLUGIN_INSTALL_DIR / kCudaPluginFile,
          dir / ".." / "lib" / kCudaPluginFile, dir / kCudaPluginFile};
}

}  // namespace

void* load_cuda_plugin(std::string& error) {
#ifndef SHARDPLAN_WITH_CUDA
  error = "shardplan was built without the CUDA backend (SHARDPLAN_CUDA=OFF)";
  return nullptr;
#else
  static void* handle = nullptr;  // stays open for the process: the backend lives as long
  if (handle != nullptr) return handle;
  std::string load_errors;
  for (const auto& candidate : plugin_candidates()) {
    if (!std::filesystem::exists(candidate)) continue;
    void* h = ::dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      load_errors += fmt::format(" {}: {};", candidate.string(), ::dlerror());
      continue;
    }
    handle = h;
    return handle;
  }
  error =
      load_errors.empty()
          ? fmt::format("the CUDA plugin {} was not found beside the executable", kCudaPluginFile)
          : "the CUDA plugin did not load:" + load_errors;
  return nullptr;
#endif
}

CudaProbe probe_cuda() {
  CudaProbe probe;
#ifndef SHARDPLAN_WITH_CUDA
  probe.device_error = "shardplan was built without the CUDA backend (SHARDPLAN_CUDA=OFF)";
  return probe;
#else
  std::string load_errors;
  for (const auto& candidate : plugin_candidates()) {
    if (!std::filesystem::exists(candidate)) continue;
    // The handle stays open for the process: the backend lives as long as the run.
    void* handle = ::dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      load_errors += fmt::format(" {}: {};", candidate.string(), ::dlerror());
      continue;
    }
    auto* probe_fn =
        reinterpret_cast<int (*)(ShardplanCudaProbeResult*)>(::dlsym(handle, kCudaProbeSymbol));
    if (probe_fn == nullptr) {
      load_errors += fmt::format(" {}: no symbol {};", candidate.string(), kCudaProbeSymbol);
      continue;
    }
    ShardplanCudaProbeResult result{};
    probe_fn(&result);
    probe.compiled = true;
    probe.plugin_path = std::filesystem::weakly_canonical(candidate).string();
    probe.runtime_version = result.runtime_version;
    probe.nccl_version = result.nccl_version;
    probe.cublas_version = result.cublas_version;
    probe.device_count = result.device_count;
    probe.device_error = result.device_error;
    return probe;
  }
  probe.device_error =
      load_errors.empty()
          ? fmt::format("the CUDA plugin {} was not found beside the executable", kCudaPluginFile)
          : "the CUDA plugin did not load:" + load_errors;
  return probe;
#endif
}

void require_cuda_device() {
  const CudaProbe probe = probe_cuda();
  if (probe.device_count == 0) {
    throw InputError("", "--backend cuda", "no CUDA device: " + probe.device_error);
  }
}

}  // namespace shardplan
