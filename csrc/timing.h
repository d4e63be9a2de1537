// Steady-state re-timing of one legacy algorithm: descriptors and workspace set up once,
// outside the timed region; warm-up; then CUDA events around back-to-back launches
// (replayed from a CUDA graph when capture works), repeated until a time budget is spent;
// then, when asked, the host wall time per call of an eager loop of the same launches.
#pragma once

#include "problem.h"

#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace cudnn_explorer {

struct TimingOptions {
  double budget_ms = 100.0;       // GPU sampling time to spend on this row (after warm-up)
  double warmup_ms = 10.0;        // launches before sampling starts
  double sample_target_ms = 1.0;  // aim for samples of about this much GPU time
  bool flush_l2 = false;          // clear L2 (memset 2x its size) before every launch
  bool use_graph = true;          // try a CUDA graph of the launches of one sample
  double eager_budget_ms = 0.0;   // > 0: also sample the eager wall time per call (not
                                  // with flush_l2); Note [eager wall time] in timing.cpp
  int min_samples = 5;
  int max_samples = 2000;
  // > 0: Note [cut launches] in timing.cpp: when the first launch's GPU time is surely
  // slower than this (ms), or the first launch and the next, warm one both are, the timing
  // ends there (method "cut").
  double cutoff_ms = 0.0;
  // Note [one-launch cut] in timing.cpp: a first launch whose GPU time is surely over the
  // cutoff still gets the warm launch, which stays its sample (the rule is only checked).
  bool confirm_cut = false;
  bool kernels = false;  // read the names of the kernels launched (Note [kernels from a graph])
  // Note [batched rounds] in timing.cpp: estimate and warm up by graph replays, then a
  // sample count fixed from the estimate, queued back to back, one synchronisation (a
  // staged search's rounds, whose times only rank).
  bool batched = false;
  bool warmed = false;   // the caller launched once already: no first warm-up launch here
  double first_ms = -1;  // with warmed: that launch's time (time_launch), < 0 if not timed
  double first_host_ms = -1;  // with warmed: the host's time to issue it, < 0 if not timed
};

struct TimingResult {
  std::vector<double> per_launch_ms;  // one value per sample: sample time / launches
  int launches_per_sample = 1;
  int warmup_launches = 0;
  std::string method;  // "graph", "eager", "eager+flush" or "cut"
  std::string note;    // e.g. why graph capture was not used
  int64_t workspace_bytes = 0;
  double estimate_ms = 0.0;  // first estimate of one launch, from the warm-up
  // The first launch's time (ms): its module loading included where the kernel had not run
  // in this process yet; TimingOptions::first_ms where the caller launched it; < 0: none.
  double first_ms = -1;
  // The host's time (ms) to issue that first launch (module loading included), < 0: not
  // timed. first_ms less this is a lower bound of the launch's GPU time (Note [one-launch
  // cut] in timing.cpp).
  double first_host_ms = -1;
  // With TimingOptions::confirm_cut: whether the first launch alone would have cut the
  // timing (the warm launch then taken all the same).
  bool first_would_cut = false;
  std::vector<double> eager_per_call_ms;  // host wall time per call, one value per sample
  int eager_calls_per_sample = 0;
  // With TimingOptions::kernels: the kernels of one launch as the captured graph names
  // them, in launch order (kernels_read false when no graph could say).
  std::vector<std::string> kernels;
  bool kernels_read = false;
};

TimingResult time_algorithm(Direction d, Problem& p, int algo, const std::string& math_type,
                            const TimingOptions& opt);

// One launch of the thing being timed, on the handle's current stream.
using Launch = std::function<cudnnStatus_t()>;

// One launch between CUDA events, synchronised: its time in ms, or -1 when it failed
// (``status`` says how); ``host_ms``: the host's time to issue it (from before the first
// event's record to after the launch's return).
double time_launch(cudaStream_t stream, const Launch& run, cudnnStatus_t* status,
                   double* host_ms = nullptr);

// The timing method itself, for any launch (legacy algorithm or engine-config plan).
TimingResult time_launches(cudnnHandle_t h, cudaStream_t stream, c10::Device device,
                           const Launch& run, const TimingOptions& opt, const std::string& ctx);

}  // namespace cudnn_explorer
