#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cudnn_explorer {
// The names of the kernels a captured CUDA graph launches (its kernel nodes, child graphs
// included), demangled as the profiler shows them, in node order, repeats kept; nullopt
// when the driver cannot say (an older driver without cuFuncGetName, a node it cannot
// read). ``graph`` is a cudaGraph_t (e.g. torch.cuda.CUDAGraph.raw_cuda_graph()).
// Note [kernels from a graph] in graph_kernels.cpp.
std::optional<std::vector<std::string>> graph_kernel_names(std::uintptr_t graph);
}  // namespace cudnn_explorer
