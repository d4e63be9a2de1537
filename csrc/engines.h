// cuDNN 9 engine configs for one direction of a problem, through the header-only
// cudnn-frontend graph API (the same engines PyTorch's Conv_v8 path searches).
// Only this file's .cpp includes cudnn-frontend: its headers are heavy.
#pragma once

#include "problem.h"
#include "timing.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace cudnn_explorer {

struct KnobSpec {
  int64_t type = 0;  // cudnnBackendKnobType_t (the "k2" in a tag is TILE_SIZE = 2)
  int64_t min_value = 0;
  int64_t max_value = 0;
  int64_t stride = 1;
};

struct EngineInfo {
  int64_t engine = -1;
  std::string status;  // "OK", or why its knobs could not be queried
  std::vector<KnobSpec> knobs;
};

using Knobs = std::vector<std::pair<int64_t, int64_t>>;  // (cudnnBackendKnobType_t, value)

struct ConfigResult {
  int64_t engine = -1;
  Knobs knobs;
  std::string name;
  int64_t plan_index = -1;  // for execute()
  std::string status;   // "OK", "built" (by build()), or the stage and error that stopped it
  std::string message;
  std::vector<std::string> numeric_notes;
  std::vector<std::string> behavior_notes;
  int64_t workspace_bytes = -1;
  double build_ms = 0.0;    // building the execution plan (run-time compilation included)
  bool timed = false;
  TimingResult timing;
};

class EngineSearch {
 public:
  // Builds the operation graph of direction d on the problem's tensors (x, w, y: the
  // direction decides which is the output), on PyTorch's cuDNN handle.
  EngineSearch(Direction d, Problem& p);
  ~EngineSearch();
  int64_t engine_count() const;
  EngineInfo engine_info(int64_t engine);
  // The configs a heuristic mode ("A", "B" or "FALLBACK") lists, in its order, by
  // cudnn-frontend's plan name ("eng46_k2=4_k5=2_k14=3": backend knob types).
  std::vector<std::string> heuristics(const std::string& mode);
  // Build one config's plan (status "built", or the stage that stopped it). Run-time
  // compiled engines compile here.
  ConfigResult build(int64_t engine, const Knobs& knobs);
  // Execute a built config once and time it (when time is true) with the same method as
  // the legacy algorithms (status "OK" or why not); the direction's output tensor holds
  // its result afterwards. Separate from build() so a caller can tell which one hangs.
  ConfigResult measure(ConfigResult built, bool time, const TimingOptions& opt);
  // build() then measure().
  ConfigResult run(int64_t engine, const Knobs& knobs, bool time, const TimingOptions& opt);
  // Execute a plan that run() built, once (e.g. under torch.profiler).
  void execute(int64_t plan_index);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

bool frontend_available();  // false when built without cudnn-frontend's headers

// Note [deviceless heuristics]: cuDNN (>= 9.8) ranks engine configs for a device described
// by a serialized device-properties descriptor (cudnn-frontend DeviceProperties), with no
// GPU, driver or handle: only building a plan needs the device. One direction of a
// convolution given by its tensors' dims and strides.
struct TargetProblem {
  std::string direction;  // fwd | bwd-data | bwd-filter
  std::string dtype;      // float32 | float16 | bfloat16 | float64
  std::vector<int64_t> x_dims, x_strides, w_dims, w_strides, y_dims, y_strides;
  std::vector<int64_t> padding, stride, dilation;
  // x, w, y pointer alignment in bytes (empty: the 16 cudnn-frontend assumes)
  std::vector<int64_t> alignment;
};

struct TargetPlan {
  std::string name;  // cudnn-frontend's plan name, e.g. "eng70_k2=4_k18=0"
  std::vector<std::string> numeric_notes;
  std::vector<std::string> behavior_notes;
};

// The configs heuristic mode ``mode`` (A, B or FALLBACK) lists for the device whose
// serialized properties are ``device_json``, in its order.
std::vector<TargetPlan> deviceless_heuristics(const TargetProblem& problem,
                                              const std::string& device_json,
                                              const std::string& mode);

// The serialized device-properties descriptor of CUDA device ``device`` (needs the GPU).
std::string device_properties_json(int device);

}  // namespace cudnn_explorer
