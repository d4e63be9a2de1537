// Pinned convolutions: the plan file's engine configs, loaded into the process, and the
// one entry point the convolution op (conv_op.cpp) calls for each direction it runs.
//
// Note [plan keys]: a convolution direction is keyed as PyTorch's own plan cache keys it
// (aten/src/ATen/native/cudnn/Conv_v8.cpp), in cuDNN's view of the problem (a 1-D
// convolution as the 2-D one with H = 1, a transposed one as the convolution it is the
// adjoint of). The key is a list of integers, written by native_key in
// cudnn_explorer/core/plans.py from a plan file and here from a call, in this order:
//   [kKeyVersion, direction (0 fwd, 1 bwd-data, 2 bwd-filter),
//    dtype (0 float32, 1 float16, 2 bfloat16, 3 float64), TF32 allowed (1 for non-float32),
//    groups, channels_last, nd (4 or 5), x dims (nd), w dims (nd), y dims (nd),
//    padding, stride, dilation (nd - 2 each)]
// The deterministic flag is not in it: deterministic mode takes a plan only when cuDNN
// gives its engine config no NONDETERMINISTIC note (checked when the plan is built).
#pragma once

#include "problem.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace cudnn_explorer {

constexpr int64_t kKeyVersion = 1;

// One plan file entry, as Python hands it over.
struct PlanSpec {
  std::vector<int64_t> key;  // Note [plan keys]
  int64_t engine = -1;
  std::vector<std::pair<int64_t, int64_t>> knobs;  // (cudnnBackendKnobType_t, value), tag order
  std::string tag;                                 // e.g. "eng70_k2=4_k18=0"
  std::string description;                         // the problem and direction, in words
};

// What the process did with one convolution direction since the counts were reset:
// covered by the plan file or not, the plan it ran, its calls by outcome.
struct PinStat {
  std::vector<int64_t> key;  // empty for calls that never reached a key (e.g. CPU tensors)
  std::string description;
  bool covered = false;
  std::string tag;   // the file's engine config
  std::string ran;   // the plan cudnn-frontend built for it ("" until built)
  int64_t pinned_calls = 0;
  int64_t fallback_calls = 0;
  std::string reason;  // why the last fallback fell back
  int64_t builds = 0;      // plans built from the engine config
  int64_t restored = 0;    // plans restored from their kept form (Note [kept plans])
  double build_ms = 0.0;   // building and restoring, on whichever thread did it
  double waited_ms = 0.0;  // first calls waiting for a plan built ahead (Note [plans built ahead])
  std::string kept_error;  // why the last kept form was not used ("" when none was refused)
  bool runtime_compiled = false;  // its plan's engine is compiled at run time (RUNTIME_COMPILATION)
};

// A plan in the form cudnn-frontend serializes it (Graph::serialize), to keep between
// processes (Note [kept plans]).
struct KeptPlan {
  std::vector<int64_t> key;  // the file's key (Note [plan keys])
  std::string tag;           // the file's engine config
  std::string blob;          // bytes (UBJSON)
  bool runtime_compiled = false;
};

// The plans of the process: replaces the loaded ones (every thread's built plans are
// dropped on its next call) and resets the counts.
void load_plans(const std::vector<PlanSpec>& specs);
int64_t loaded_plan_count();
// Plans this thread keeps because a CUDA graph captured them (Note [captured plans]).
int64_t retired_plan_count();
// Strict pinning (Note [strict pinning]): a call that would fall back raises instead.
void set_strict(bool on);
bool strict();
std::vector<PinStat> pin_stats();
// Note [plans built ahead]: builds every plan of the loaded file on `threads` threads of
// its own, for `device` and the deterministic setting now, at 16-byte alignment, and
// returns at once. A plan in `kept` (by key) is restored from it instead, when it passes
// the checks of Note [kept plans]. A call whose plan is being built waits for that plan
// only.
void build_ahead(int64_t device, int64_t threads, const std::vector<KeptPlan>& kept);
// Waits for the builds started by build_ahead; their count.
int64_t wait_ahead();
// The plans built or restored ahead, serialized, for the file of kept plans.
std::vector<KeptPlan> kept_plans();
void reset_pin_counts();
// A plan key (Note [plan keys]) in words, as ConvProblem.describe words its problem,
// after the direction: "fwd of 2-D convolution: input ...".
std::string describe_plan_key(const std::vector<int64_t>& key);

// One direction of a call in cuDNN's view, but its tensors.
struct CallGeometry {
  Direction direction;
  at::IntArrayRef padding, stride, dilation;  // the caller's, alive for the call
  int64_t groups = 1;
  bool channels_last = false;
};

// One direction of a call in cuDNN's view: x (N, C, spatial), w, y as cuDNN gets them
// (the direction's output among them, already allocated), contiguous in the layout.
struct PinnedCall : CallGeometry {
  const at::Tensor* x;
  const at::Tensor* w;
  const at::Tensor* y;
};

// The key of a call (Note [plan keys]), with the current TF32 setting.
std::vector<int64_t> call_key(const PinnedCall& call);

// Runs the call with its pinned plan: true when it ran; false when not (the call was not
// run and the caller falls back to PyTorch's own convolution; why is in the call's
// PinStat). Counts the outcome and warns once per problem-direction and reason.
bool run_pinned(const PinnedCall& call);

// True when this thread has found, since the plans were loaded, that the file does not
// cover this direction (cuDNN's x, w, y sizes, the tensors' dtype); the call is then
// counted as its fallback (strict pinning raises) and the caller runs PyTorch's own
// convolution, nothing made for a plan. False: run_pinned must tell (Note [known misses]).
bool counted_known_miss(const CallGeometry& call, at::ScalarType dtype, at::IntArrayRef x,
                        at::IntArrayRef w, at::IntArrayRef y);

// The keys of a call's three cuDNN directions (in the order forward, bwd-data,
// bwd-filter of cuDNN's view), as the op computes them; for tests and tools.
std::vector<std::vector<int64_t>> conv_keys(const at::Tensor& input, const at::Tensor& weight,
                                            at::IntArrayRef stride, at::IntArrayRef padding,
                                            at::IntArrayRef dilation, bool transposed,
                                            at::IntArrayRef output_padding, int64_t groups);

// cudnn_explorer::conv called through the dispatcher from C++: the same op, its autograd,
// autocast and dispatch modes included, for Python's eager calls without the boxed
// torch.ops entry (about 5 us of host time per call).
at::Tensor call_conv(const at::Tensor& input, const at::Tensor& weight,
                     const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                     at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
                     at::IntArrayRef output_padding, int64_t groups);

// Counts (and warns once about) a call that falls back before it has a key.
void note_unpinned(const std::string& why);

}  // namespace cudnn_explorer
