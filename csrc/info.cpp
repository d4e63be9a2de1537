// Build-time and run-time versions: what the extension was compiled against and
// what is loaded now (they can differ: the wheel's cuDNN vs the one torch loaded).
#include "info.h"

#include "common.h"

#include <cuda_runtime_api.h>
#ifdef CE_HAVE_FRONTEND
#include <cudnn_frontend_version.h>
#endif

#ifndef CE_BUILD_TORCH_VERSION
#define CE_BUILD_TORCH_VERSION "unknown"
#endif

namespace cudnn_explorer {

std::map<std::string, std::string> build_info() {
  return {
      {"torch", CE_BUILD_TORCH_VERSION},
      {"cudnn", std::to_string(CUDNN_VERSION)},
      {"cuda_runtime", std::to_string(CUDART_VERSION)},
#ifdef CE_HAVE_FRONTEND
      {"cudnn_frontend", std::to_string(CUDNN_FRONTEND_VERSION)},
#else
      {"cudnn_frontend", ""},  // built without it: no engine configs
#endif
  };
}

std::map<std::string, std::string> runtime_info() {
  std::map<std::string, std::string> out;
  out["cudnn"] = std::to_string(cudnnGetVersion());
  out["cudnn_cudart"] = std::to_string(cudnnGetCudartVersion());
  int v = 0;
  out["cuda_runtime"] = cudaRuntimeGetVersion(&v) == cudaSuccess ? std::to_string(v) : "unknown";
  v = 0;
  out["cuda_driver"] = (cudaDriverGetVersion(&v) == cudaSuccess && v > 0) ? std::to_string(v) : "none";
  return out;
}

}  // namespace cudnn_explorer
