#include "graph_kernels.h"

#include <cuda.h>
#include <cxxabi.h>
#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

namespace cudnn_explorer {

// Note [kernels from a graph]: which kernels a call launches was read with the profiler,
// whose first session costs seconds in every process (6.2 s on an H200 host). A call
// captured into a CUDA graph holds the same launches as kernel nodes, and the driver
// names each node's function: the same names, for a capture's cost (host
// milliseconds). The driver's entry points are looked up at run time (the extension
// does not link libcuda, so it builds and imports on a machine without a GPU); a driver
// without them makes this return nullopt and the caller use the profiler.
namespace {

using GetNodes = CUresult (*)(CUgraph, CUgraphNode*, size_t*);
using NodeType = CUresult (*)(CUgraphNode, CUgraphNodeType*);
using KernelParams = CUresult (*)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS_v2*);
using ChildGraph = CUresult (*)(CUgraphNode, CUgraph*);
using FuncName = CUresult (*)(const char**, CUfunction);
using KernelName = CUresult (*)(const char**, CUkernel);

struct Driver {
  GetNodes get_nodes = nullptr;
  NodeType node_type = nullptr;
  KernelParams kernel_params = nullptr;
  ChildGraph child_graph = nullptr;
  FuncName func_name = nullptr;
  KernelName kernel_name = nullptr;
  bool ok() const {
    return get_nodes && node_type && kernel_params && child_graph && func_name;
  }
};

const Driver& driver() {
  static Driver d;
  static std::once_flag once;
  std::call_once(once, [] {
    // The process's CUDA runtime has loaded the driver already: take that copy.
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (lib == nullptr) lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (lib == nullptr) return;
    auto sym = [lib](const char* name) { return dlsym(lib, name); };
    d.get_nodes = reinterpret_cast<GetNodes>(sym("cuGraphGetNodes"));
    d.node_type = reinterpret_cast<NodeType>(sym("cuGraphNodeGetType"));
    d.kernel_params = reinterpret_cast<KernelParams>(sym("cuGraphKernelNodeGetParams_v2"));
    d.child_graph = reinterpret_cast<ChildGraph>(sym("cuGraphChildGraphNodeGetGraph"));
    d.func_name = reinterpret_cast<FuncName>(sym("cuFuncGetName"));
    d.kernel_name = reinterpret_cast<KernelName>(sym("cuKernelGetName"));
  });
  return d;
}

// As the profiler (kineto) shows a kernel: demangled where the name demangles.
std::string demangled(const char* name) {
  int status = 0;
  char* out = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  if (status != 0 || out == nullptr) return name;
  std::string s(out);
  std::free(out);
  return s;
}

bool collect(const Driver& d, CUgraph g, std::vector<std::string>& names, int depth) {
  if (depth > 8) return false;
  size_t n = 0;
  if (d.get_nodes(g, nullptr, &n) != CUDA_SUCCESS) return false;
  std::vector<CUgraphNode> nodes(n);
  if (n > 0 && d.get_nodes(g, nodes.data(), &n) != CUDA_SUCCESS) return false;
  for (CUgraphNode node : nodes) {
    CUgraphNodeType type;
    if (d.node_type(node, &type) != CUDA_SUCCESS) return false;
    if (type == CU_GRAPH_NODE_TYPE_GRAPH) {
      CUgraph child = nullptr;
      if (d.child_graph(node, &child) != CUDA_SUCCESS || !collect(d, child, names, depth + 1))
        return false;
    } else if (type == CU_GRAPH_NODE_TYPE_KERNEL) {
      CUDA_KERNEL_NODE_PARAMS_v2 p{};
      if (d.kernel_params(node, &p) != CUDA_SUCCESS) return false;
      const char* name = nullptr;
      CUresult r = CUDA_ERROR_INVALID_VALUE;
      if (p.func != nullptr) r = d.func_name(&name, p.func);
      if ((r != CUDA_SUCCESS || name == nullptr) && p.kern != nullptr && d.kernel_name)
        r = d.kernel_name(&name, p.kern);
      if (r != CUDA_SUCCESS || name == nullptr) return false;
      names.push_back(demangled(name));
    }
  }
  return true;
}

}  // namespace

std::optional<std::vector<std::string>> graph_kernel_names(std::uintptr_t graph) {
  const Driver& d = driver();
  if (!d.ok() || graph == 0) return std::nullopt;
  std::vector<std::string> names;
  if (!collect(d, reinterpret_cast<CUgraph>(graph), names, 0)) return std::nullopt;
  return names;
}

}  // namespace cudnn_explorer
