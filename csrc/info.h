#pragma once
#include <map>
#include <string>

namespace cudnn_explorer {
// Versions the extension was compiled against (torch, cuDNN, CUDA runtime).
std::map<std::string, std::string> build_info();
// Versions loaded in this process; never initialises a CUDA context.
std::map<std::string, std::string> runtime_info();
}  // namespace cudnn_explorer
