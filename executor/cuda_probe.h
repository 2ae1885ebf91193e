#pragma once

#include <dlfcn.h>

#include <stdexcept>
#include <string>

namespace shardplan {

// What the CUDA backend was built against and what this machine offers. The backend is
// a plugin (libshardplan_cuda.so) loaded only when asked for, so commands that never
// touch a GPU do not pay for mapping cuBLAS and NCCL.
struct CudaProbe {
  bool compiled = false;     // the plugin was built and loads
  std::string plugin_path;   // where it was found
  int runtime_version = 0;   // CUDA runtime, e.g. 13000
  int nccl_version = 0;      // e.g. 22805
  int cublas_version = 0;    // major*10000 + minor*100 + patch
  int device_count = 0;      // 0 when no device or no driver
  std::string device_error;  // why there is no device, when there is none
};

CudaProbe probe_cuda();

// The loaded plugin's handle (dlopen), or nullptr with `error` saying why.
void* load_cuda_plugin(std::string& error);

// A function of the loaded plugin; throws when it lacks one (a plugin from another build).
template <typename F>
F cuda_plugin_symbol(void* handle, const char* name) {
  auto* f = reinterpret_cast<F>(::dlsym(handle, name));
  if (f == nullptr) throw std::runtime_error(std::string("the CUDA plugin has no ") + name);
  return f;
}

// Throws InputError("no CUDA device: ...") unless a CUDA device is usable; the CUDA
// executor calls this before anything else.
void require_cuda_device();

}  // namespace shardplan
