// The loaded plans, the plans built from them (per thread, as PyTorch's own Conv_v8 plan
// cache is), and running one convolution direction with its plan.
#include "pinned.h"

#include "frontend_graph.h"

#include <ATen/Context.h>
#include <ATen/cudnn/Handle.h>
#include <ATen/record_function.h>
#include <c10/core/ScalarType.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <unordered_set>

namespace cudnn_explorer {

namespace {

struct KeyHash {
  size_t operator()(const std::vector<int64_t>& k) const noexcept {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the integers
    for (int64_t v : k) {
      h ^= static_cast<uint64_t>(v);
      h *= 1099511628211ull;
    }
    return static_cast<size_t>(h);
  }
};

// One problem-direction the process has seen or the file covers, shared by all threads.
struct Slot {
  PlanSpec spec;       // covered: the file's entry; otherwise only key and description
  bool covered = false;
  std::atomic<int64_t> pinned{0}, fallback{0}, builds{0}, restored{0};
  mutable std::mutex m;  // guards the strings and the times
  std::string reason, ran, kept_error;
  double build_ms = 0.0, waited_ms = 0.0;
  bool runtime_compiled = false;  // the plan made last: its engine compiles at run time
};

struct Registry {
  std::mutex m;
  std::atomic<bool> strict{false};  // Note [strict pinning]
  std::atomic<int64_t> generation{0};
  std::atomic<int64_t> count{0};
  std::unordered_map<std::vector<int64_t>, std::shared_ptr<Slot>, KeyHash> slots;
  std::unordered_map<std::string, std::shared_ptr<Slot>> unkeyed;  // by reason
  std::unordered_set<std::string> warned;
};

Registry& registry() {
  static auto* r = new Registry;  // never destroyed: threads may run at exit
  return *r;
}

void warn_once(const std::string& what, const std::string& why) {
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.m);
    if (!r.warned.insert(what + "\n" + why).second) return;
  }
  TORCH_WARN("cudnn_explorer: ", what, " runs PyTorch's own convolution, not a pinned plan: ",
             why);
}

std::string key_text(const std::vector<int64_t>& k) {
  std::string out = "[";
  for (size_t i = 0; i < k.size(); ++i) out += (i ? ", " : "") + std::to_string(k[i]);
  return out + "]";
}

// Note [strict pinning]: with strict on (pin(..., strict=True)), a call that would fall
// back raises instead, naming the problem-direction, its key and why; the call is counted
// as a fallback and does not run.
// `warn` false: the caller knows this (slot, why) was warned about since the plans were
// loaded (Note [no allocation per pinned call]: warn_once joins and hashes two strings).
void note_fallback(Slot& s, const std::string& why, bool warn = true) {
  s.fallback.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(s.m);
    if (s.reason != why) s.reason = why;
  }
  TORCH_CHECK(!registry().strict.load(), "cudnn_explorer strict pinning: ", s.spec.description,
              " (key ", key_text(s.spec.key), ") is not pinned: ", why);
  if (warn) warn_once(s.spec.description, why);
}

const char* kDirections[] = {"fwd", "bwd-data", "bwd-filter"};
const char* kDtypes[] = {"float32", "float16", "bfloat16", "float64"};

int64_t dtype_code(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return 0;
    case at::kHalf: return 1;
    case at::kBFloat16: return 2;
    case at::kDouble: return 3;
    default: return -1;
  }
}

std::string joined(const std::vector<int64_t>& k, size_t at, size_t n, const char* sep) {
  std::string out;
  for (size_t i = 0; i < n && at + i < k.size(); ++i) {
    if (i) out += sep;
    out += std::to_string(k[at + i]);
  }
  return out;
}

// The key in words, for a convolution the file does not name: the words of
// ConvProblem.describe (cudnn_explorer/core/problem.py), so that the file's convolutions
// and the others read alike, in cuDNN's view of the problem (Note [plan keys]: a 1-D
// convolution reads as the 2-D one with H = 1).
std::string describe_key(const std::vector<int64_t>& k) {
  if (k.size() < 7 || k[6] < 3) return "a convolution";
  const size_t nd = static_cast<size_t>(k[6]), sp = nd - 2;
  const size_t x = 7, w = x + nd, y = w + nd, pad = y + nd, st = pad + sp, dil = st + sp;
  if (k.size() != dil + sp || k[1] < 0 || k[1] > 2 || k[2] < 0 || k[2] > 3) {
    return "a convolution";
  }
  std::string math = kDtypes[k[2]];
  if (k[2] == 0) {
    math += k[3] ? ", TF32 allowed (DEFAULT_MATH)" : ", TF32 off, strict FP32 (FMA_MATH)";
  } else {
    math += k[2] == 1 ? " (TENSOR_OP_MATH)" : " (DEFAULT_MATH)";
  }
  const char* layout = !k[5] ? "NCHW (contiguous)"
                       : nd == 4 ? "NHWC (channels_last)" : "NDHWC (channels_last_3d)";
  const bool depthwise = k[4] > 1 && k[4] == k[x + 1];
  return cat(kDirections[k[1]], " of ", sp, "-D convolution: input ", joined(k, x, nd, "x"),
             ", weight ", joined(k, w, nd, "x"), ", output ", joined(k, y, nd, "x"),
             "; padding ", joined(k, pad, sp, "x"), ", stride ", joined(k, st, sp, "x"),
             ", dilation ", joined(k, dil, sp, "x"), ", groups ", k[4],
             depthwise ? " (depthwise)" : "", "; ", math, "; layout ", layout);
}

std::vector<int64_t> dims_of(const at::Tensor& t) {
  return std::vector<int64_t>(t.sizes().begin(), t.sizes().end());
}
std::vector<int64_t> strides_of(const at::Tensor& t) {
  return std::vector<int64_t>(t.strides().begin(), t.strides().end());
}

// The largest power of two, at most 16, that divides the tensor's address (what
// Conv_v8's cache key calls the alignment).
int64_t alignment_of(const at::Tensor& t) {
  const auto p = reinterpret_cast<uintptr_t>(t.data_ptr());
  int64_t a = 1;
  while (a < 16 && p % static_cast<uintptr_t>(a * 2) == 0) a *= 2;
  return a;
}

// The strides of `dims` dense in the layout (NCHW, or NHWC with `nhwc`). With `given`,
// those strides kept but for the size-1 dims'. Note [size-1 strides]: the stride of a
// size-1 dim is arbitrary (a depthwise 64x1x3x3 weight may come as (9, 9, 3, 1) or (9, 1,
// 3, 1)), and cuDNN reads the layout from the strides. As ATen's fixSizeOneDimStride does,
// give such a dim the stride it has in a dense tensor of the layout, so that the plan is
// built for the layout the sweep measured.
std::vector<int64_t> layout_strides(const std::vector<int64_t>& dims, bool nhwc,
                                    const std::vector<int64_t>* given = nullptr) {
  const int64_t dim = static_cast<int64_t>(dims.size());
  std::vector<int64_t> order, st = given ? *given : std::vector<int64_t>(dims.size(), 1);
  if (nhwc) order.push_back(1);
  for (int64_t d = dim - 1; d > 1; --d) order.push_back(d);
  if (!nhwc) order.push_back(1);
  order.push_back(0);
  int64_t z = 1;
  for (int64_t d : order) {
    const auto i = static_cast<size_t>(d);
    if (given == nullptr || dims[i] == 1) st[i] = z;
    z *= std::max<int64_t>(dims[i], 1);
  }
  return st;
}

std::vector<int64_t> fixed_strides(const at::Tensor& t, bool nhwc) {
  const std::vector<int64_t> given = strides_of(t);
  return layout_strides(dims_of(t), nhwc, &given);
}

bool deterministic_now() {
  auto& ctx = at::globalContext();
  return ctx.deterministicCuDNN() || ctx.deterministicAlgorithms();
}

}  // namespace

std::string describe_plan_key(const std::vector<int64_t>& key) { return describe_key(key); }

namespace {

// The file's key of a call into ``k`` (cleared first; its capacity kept, so a thread that
// reuses one vector allocates nothing per call: Note [no allocation per pinned call]).
void fill_key(const CallGeometry& c, at::ScalarType type, at::IntArrayRef x, at::IntArrayRef w,
              at::IntArrayRef y, std::vector<int64_t>& k) {
  const int64_t dtype = dtype_code(type);
  const bool tf32 = dtype != 0 || at::globalContext().allowTF32CuDNN(at::Float32Op::CONV);
  const auto nd = static_cast<int64_t>(x.size());
  k.clear();
  k.reserve(static_cast<size_t>(12 + 6 * nd));  // run_pinned appends 5 more
  k.insert(k.end(), {kKeyVersion, static_cast<int64_t>(c.direction), dtype, tf32 ? 1 : 0,
                     c.groups, c.channels_last ? 1 : 0, nd});
  for (const at::IntArrayRef v : {x, w, y, c.padding, c.stride, c.dilation}) {
    k.insert(k.end(), v.begin(), v.end());
  }
}

void fill_call_key(const PinnedCall& c, std::vector<int64_t>& k) {
  fill_key(c, c.x->scalar_type(), c.x->sizes(), c.w->sizes(), c.y->sizes(), k);
}

}  // namespace

std::vector<int64_t> call_key(const PinnedCall& c) {
  std::vector<int64_t> k;
  fill_call_key(c, k);
  return k;
}

void drop_ahead();  // below: the plans built ahead for the file loaded before

void load_plans(const std::vector<PlanSpec>& specs) {
  // Note [atomic load]: the new table is built and checked first, then swapped in; a bad
  // entry leaves the loaded plans, their counts and the warnings as they were.
  std::unordered_map<std::vector<int64_t>, std::shared_ptr<Slot>, KeyHash> slots;
  for (const auto& spec : specs) {
    CE_CHECK_ARG(spec.key.size() > 7 && spec.key[0] == kKeyVersion,
                 "plan key of ", spec.description, ": not a version-", kKeyVersion, " key");
    CE_CHECK_ARG(!slots.count(spec.key), "two plans for ", spec.description);
    auto s = std::make_shared<Slot>();
    s->spec = spec;
    s->covered = true;
    slots.emplace(spec.key, std::move(s));
  }
  drop_ahead();
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.m);
  r.slots.swap(slots);
  r.unkeyed.clear();
  r.warned.clear();
  r.count.store(static_cast<int64_t>(r.slots.size()));
  r.generation.fetch_add(1);
}

int64_t loaded_plan_count() { return registry().count.load(); }

void set_strict(bool on) { registry().strict.store(on); }
bool strict() { return registry().strict.load(); }

std::vector<PinStat> pin_stats() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.m);
  std::vector<PinStat> out;
  auto add = [&out](const Slot& s) {
    PinStat p;
    p.key = s.spec.key;
    p.description = s.spec.description;
    p.covered = s.covered;
    p.tag = s.spec.tag;
    p.pinned_calls = s.pinned.load();
    p.fallback_calls = s.fallback.load();
    p.builds = s.builds.load();
    p.restored = s.restored.load();
    std::lock_guard<std::mutex> slock(s.m);
    p.ran = s.ran;
    p.reason = s.reason;
    p.build_ms = s.build_ms;
    p.waited_ms = s.waited_ms;
    p.kept_error = s.kept_error;
    p.runtime_compiled = s.runtime_compiled;
    out.push_back(std::move(p));
  };
  for (const auto& kv : r.slots) add(*kv.second);
  for (const auto& kv : r.unkeyed) add(*kv.second);
  return out;
}

void reset_pin_counts() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.m);
  for (auto& kv : r.slots) {
    kv.second->pinned = 0;
    kv.second->fallback = 0;
  }
  r.unkeyed.clear();
}

void note_unpinned(const std::string& why) {
  Registry& r = registry();
  std::shared_ptr<Slot> s;
  {
    std::lock_guard<std::mutex> lock(r.m);
    auto& slot = r.unkeyed[why];
    if (!slot) {
      slot = std::make_shared<Slot>();
      slot->spec.description = "a convolution";
    }
    s = slot;
  }
  note_fallback(*s, why);
}

#ifdef CE_HAVE_FRONTEND

namespace {

// A plan built for one call key on this thread, or why it cannot be.
struct Built {
  std::shared_ptr<Slot> slot;
  std::unique_ptr<Graph> graph;  // null: the call falls back
  int64_t workspace = 0;
  std::string why;
  bool captured = false;  // it ran inside a CUDA-graph capture (Note [captured plans])
  bool warned = false;    // its fallback (why) was noted once, warning included
  bool runtime_compiled = false;  // its engine compiles at run time (RUNTIME_COMPILATION)
};

// Note [captured plans]: a CUDA graph captured while a plan ran replays that plan's
// kernels (for a run-time compiled engine, a module the plan owns) long after the call.
// A plan that ran inside a capture is therefore never destroyed: when another plan file
// is loaded, or the plan fails, it moves to `retired` and stays for the process's life.
struct ThreadPlans {
  int64_t generation = -1;
  std::unordered_map<std::vector<int64_t>, std::unique_ptr<Built>, KeyHash> plans;
  std::vector<std::unique_ptr<Graph>> retired;

  void retire(Built& b) {
    if (b.captured && b.graph) retired.push_back(std::move(b.graph));
    b.graph.reset();
  }
  // The problem-directions this thread found the file does not cover, by the file's key,
  // each with its Built (in `plans`, no graph): Note [known misses].
  std::unordered_map<std::vector<int64_t>, Built*, KeyHash> misses;

  void clear() {
    for (auto& kv : plans) retire(*kv.second);
    misses.clear();
    plans.clear();
  }
};

// A call of a plan that cannot run (b.why): counted, warned about once.
void note_built_fallback(Built& b) {
  note_fallback(*b.slot, b.why, !b.warned);
  b.warned = true;
}

ThreadPlans& thread_plans() {
  // Never destroyed (as ATen's cuDNN handle pool is not): destroying cuDNN descriptors
  // after the CUDA context has gone at exit crashes.
  thread_local auto* t = new ThreadPlans;
  return *t;
}

// What a plan is built for: a call's problem, or a key's (Note [plans built ahead]).
struct Target {
  TargetProblem tp;
  Direction direction = Direction::Forward;
  cudnnDataType_t dtype = CUDNN_DATA_FLOAT;
  bool tf32 = true;  // TF32 allowed (float32 only)
  bool det = false;  // deterministic algorithms on
};

Target target_of_call(const PinnedCall& c, bool det) {
  Target t;
  t.tp.x_dims = dims_of(*c.x);
  t.tp.x_strides = fixed_strides(*c.x, c.channels_last);
  t.tp.w_dims = dims_of(*c.w);
  t.tp.w_strides = fixed_strides(*c.w, c.channels_last);
  t.tp.y_dims = dims_of(*c.y);
  t.tp.y_strides = fixed_strides(*c.y, c.channels_last);
  t.tp.padding = c.padding.vec();
  t.tp.stride = c.stride.vec();
  t.tp.dilation = c.dilation.vec();
  t.tp.alignment = {alignment_of(*c.x), alignment_of(*c.w), alignment_of(*c.y)};
  t.direction = c.direction;
  t.dtype = data_type_of(*c.x);
  t.tf32 = c.x->scalar_type() != at::kFloat ||
           at::globalContext().allowTF32CuDNN(at::Float32Op::CONV);
  t.det = det;
  return t;
}

// The problem a file's key names (Note [plan keys]), its tensors dense in its layout and
// 16-byte aligned, as the op's calls give them; false for a key that names none.
bool target_of_key(const std::vector<int64_t>& k, bool det, Target& t) {
  if (k.size() < 7 || k[6] < 3) return false;
  const size_t nd = static_cast<size_t>(k[6]), sp = nd - 2;
  const size_t x = 7, w = x + nd, y = w + nd, pad = y + nd, st = pad + sp, dil = st + sp;
  if (k.size() != dil + sp || k[1] < 0 || k[1] > 2 || k[2] < 0 || k[2] > 3) return false;
  auto part = [&k](size_t at, size_t n) {
    return std::vector<int64_t>(k.begin() + static_cast<long>(at),
                                k.begin() + static_cast<long>(at + n));
  };
  const bool nhwc = k[5] != 0;
  t.tp.x_dims = part(x, nd);
  t.tp.w_dims = part(w, nd);
  t.tp.y_dims = part(y, nd);
  t.tp.x_strides = layout_strides(t.tp.x_dims, nhwc);
  t.tp.w_strides = layout_strides(t.tp.w_dims, nhwc);
  t.tp.y_strides = layout_strides(t.tp.y_dims, nhwc);
  t.tp.padding = part(pad, sp);
  t.tp.stride = part(st, sp);
  t.tp.dilation = part(dil, sp);
  t.tp.alignment = {16, 16, 16};
  t.direction = static_cast<Direction>(k[1]);
  const cudnnDataType_t types[] = {CUDNN_DATA_FLOAT, CUDNN_DATA_HALF, CUDNN_DATA_BFLOAT16,
                                   CUDNN_DATA_DOUBLE};
  t.dtype = types[k[2]];
  t.tf32 = k[3] != 0;
  t.det = det;
  return true;
}

// Note [plan validators]: the file names an engine config; cuDNN says what the config is.
// A plan is refused (and the call falls back) when cuDNN's numerical notes say PyTorch's
// rules would not run it here: DOWN_CONVERT_INPUTS always, TENSOR_CORE for float32 with
// TF32 off, NONDETERMINISTIC in deterministic mode; or when the built plan is not the
// file's (another name from cudnn-frontend).
std::string refusal(const std::vector<fe::NumericalNote_t>& notes, const Target& t,
                    const std::string& tag, const std::string& built_name) {
  for (auto n : notes) {
    if (n == fe::NumericalNote_t::DOWN_CONVERT_INPUTS) {
      return "its engine config " + tag + " converts its inputs down (DOWN_CONVERT_INPUTS), "
             "which PyTorch never runs";
    }
    if (n == fe::NumericalNote_t::TENSOR_CORE && !t.tf32 && t.dtype == CUDNN_DATA_FLOAT) {
      return "TF32 is off here and its engine config " + tag + " uses tensor cores";
    }
    if (n == fe::NumericalNote_t::NONDETERMINISTIC && t.det) {
      return "deterministic algorithms are on and its engine config " + tag +
             " is NONDETERMINISTIC";
    }
  }
  // the tag without the operation's prefix ("ConvFwd_eng0_k2=1" and "eng0_k2=1" agree)
  auto bare = [](const std::string& s) {
    const auto at = s.find("eng");
    return at == std::string::npos ? s : s.substr(at);
  };
  if (!built_name.empty() && bare(built_name) != bare(tag)) {
    return "cudnn-frontend built " + built_name + ", not the file's " + tag;
  }
  return "";
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
      .count();
}

// Whether cuDNN compiles the built plan's kernel at run time (RUNTIME_COMPILATION).
bool runtime_compiled(const Graph& g) {
  std::vector<fe::BehaviorNote_t> notes;
  return g.get_behavior_notes_for_plan_at_index(0, notes).is_good() &&
         std::count(notes.begin(), notes.end(), fe::BehaviorNote_t::RUNTIME_COMPILATION) > 0;
}

// Builds the file's engine config for `t` with this thread's handle. With `kept`, the
// built plan is also serialized into it (Note [kept plans]).
std::unique_ptr<Built> build(const Target& t, std::shared_ptr<Slot> slot,
                             KeptPlan* kept = nullptr) {
  auto b = std::make_unique<Built>();
  b->slot = std::move(slot);
  Slot& s = *b->slot;
  if (!s.covered) {
    b->why = "the plan file does not cover it";
    return b;
  }
  const auto t0 = std::chrono::steady_clock::now();
  try {
    cudnnHandle_t h = at::native::getCudnnHandle();
    auto g = std::make_unique<Graph>();
    add_conv(*g, t.direction, fe_type(t.dtype), t.tp);
    const std::string what = s.spec.description;
    fe_check(g->validate(), "validating the graph of " + what);
    fe_check(g->build_operation_graph(h), "building the operation graph of " + what);
    g->add_config(s.spec.engine, s.spec.knobs, s.spec.tag + " of " + what);
    std::string name;
    if (!g->get_plan_name_at_index(0, name).is_good()) name.clear();
    b->why = refusal(g->plan_notes(), t, s.spec.tag, name);
    if (b->why.empty()) {
      fe_check(g->build_plan_at_index(h, 0), "building the plan " + s.spec.tag);
      fe_check(g->get_workspace_size_plan_at_index(0, b->workspace),
               "the workspace of " + s.spec.tag);
      const bool compiled = b->runtime_compiled = runtime_compiled(*g);
      if (kept != nullptr) {
        std::vector<uint8_t> bytes;
        if (g->serialize(bytes, false).is_good()) {
          kept->blob.assign(bytes.begin(), bytes.end());
          kept->runtime_compiled = compiled;
        }
      }
      b->graph = std::move(g);
      std::lock_guard<std::mutex> lock(s.m);
      s.ran = name;
      s.runtime_compiled = compiled;
    }
  } catch (const std::exception& e) {
    b->graph.reset();
    b->why = std::string("its plan did not build: ") + std::string(e.what()).substr(0, 300);
  }
  const double ms = ms_since(t0);
  s.builds.fetch_add(1);
  std::lock_guard<std::mutex> lock(s.m);
  s.build_ms += ms;
  return b;
}

// (engine, knobs) of a plan tag "...engN_kA=B_kC=D"; engine -1 when it names none.
std::pair<int64_t, std::map<int64_t, int64_t>> parse_tag(const std::string& tag) {
  std::map<int64_t, int64_t> knobs;
  const auto at = tag.find("eng");
  if (at == std::string::npos) return {-1, knobs};
  try {
    size_t i = at + 3, used = 0;
    const int64_t engine = std::stoll(tag.substr(i), &used);
    i += used;
    while (i < tag.size()) {
      if (tag.compare(i, 2, "_k") != 0) return {-1, knobs};
      i += 2;
      const int64_t type = std::stoll(tag.substr(i), &used);
      i += used;
      if (i >= tag.size() || tag[i] != '=') return {-1, knobs};
      ++i;
      knobs[type] = std::stoll(tag.substr(i), &used);
      i += used;
    }
    return {engine, knobs};
  } catch (const std::exception&) {
    return {-1, knobs};
  }
}

// Whether the restored plan's tag is the file's engine config: the same engine and the
// file's knob values; a knob the file does not set comes back as -1 (not chosen).
bool same_config(const PlanSpec& spec, const std::string& tag) {
  const auto parsed = parse_tag(tag);
  if (parsed.first < 0 || parsed.first != spec.engine) return false;
  std::map<int64_t, int64_t> want(spec.knobs.begin(), spec.knobs.end());
  for (const auto& kv : parsed.second) {
    const auto it = want.find(kv.first);
    if (it == want.end() ? kv.second != -1 : it->second != kv.second) return false;
  }
  for (const auto& kv : want) {
    if (!parsed.second.count(kv.first)) return false;
  }
  return true;
}

// Note [kept plans]: cuDNN serializes a built plan whole (cudnn-frontend's
// Graph::serialize: the execution plan's JSON with the operation graph, the GPU's profile,
// the engine, its knobs and, for a run-time compiled engine, its compiled kernel), and
// finalizes one from it in another process: on an H100 with cuDNN 9.19 a run-time compiled
// engine built in 323-1424 ms and restored in 0.8-4.7 ms. cuDNN refuses a form from
// another cuDNN version or SM count, but not one from another GPU name or SM version, and a
// restored plan computes whatever problem its form names. So the file of kept plans
// (pinning/kept.py) is keyed by the environment like the plan file and carries a checksum
// per plan, and here a restored plan must name the file's engine config and pass the plan
// validators; anything else is built from the engine config, counted (kept_error).
std::unique_ptr<Built> restore(const Target& t, std::shared_ptr<Slot> slot,
                               const KeptPlan& kept) {
  Slot& s = *slot;
  const auto t0 = std::chrono::steady_clock::now();
  std::string error, name;
  bool compiled = false;
  auto b = std::make_unique<Built>();
  b->slot = std::move(slot);
  try {
    cudnnHandle_t h = at::native::getCudnnHandle();
    auto g = std::make_unique<Graph>();
    const std::vector<uint8_t> bytes(kept.blob.begin(), kept.blob.end());
    fe_check(g->deserialize(h, bytes, false, /*run_warmup=*/false), "restoring its plan");
    name = g->plan_tag();
    if (!same_config(s.spec, name)) {
      error = "its kept plan is " + name + ", not the file's " + s.spec.tag;
    } else if (!(b->why = refusal(g->plan_notes(), t, s.spec.tag, "")).empty()) {
      error = "its kept plan is refused: " + b->why;
    } else {
      fe_check(g->get_workspace_size_plan_at_index(0, b->workspace), "its workspace");
      compiled = b->runtime_compiled = runtime_compiled(*g);
      b->graph = std::move(g);
    }
  } catch (const std::exception& e) {
    error = std::string(e.what()).substr(0, 300);
  }
  const double ms = ms_since(t0);
  std::lock_guard<std::mutex> lock(s.m);
  s.build_ms += ms;
  if (!error.empty()) {
    s.kept_error = error;
    return nullptr;
  }
  s.restored.fetch_add(1);
  s.ran = name;  // cudnn-frontend's name, as a built plan's (plans_ran agrees either way)
  s.runtime_compiled = compiled;
  return b;
}

// Note [plans built ahead]: a plan is built, and a run-time compiled engine compiled, on
// its first call unless built ahead. build_ahead builds every plan of the file on threads
// of its own while the process imports, loads data and warms up: cuDNN is thread-safe
// with one handle per thread, and a plan finalizes with its operation graph's handle, so
// each builder builds its graphs with its own (a plan built on one handle runs on
// another). A first call whose plan is in the table waits for that plan only, then takes
// it into its thread's plans (one owner per plan, as Conv_v8's thread-local cache has); a
// thread that finds it taken builds its own. Builders run in relaxed capture mode, so
// what building does is legal while another thread captures a CUDA graph, and a capture
// may take a plan built ahead (Note [no builds in a capture] is about this thread's own).
struct Ahead {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::unique_ptr<Built> built;  // until a call takes it
  KeptPlan kept;                 // its serialized form ("" blob: none)
};

struct AheadJob {
  std::shared_ptr<Ahead> ahead;
  std::shared_ptr<Slot> slot;
  Target target;
  bool valid = false;
  bool has_kept = false;
  KeptPlan kept;  // its kept form, where has_kept
};

struct AheadTable {
  std::mutex m;
  std::unordered_map<std::vector<int64_t>, std::shared_ptr<Ahead>, KeyHash> plans;
  std::vector<std::thread> threads;
  int64_t jobs = 0;
  std::mutex round;  // held through build_ahead and drop_ahead: one round at a time
};

AheadTable& ahead_table() {
  static auto* t = new AheadTable;  // never destroyed, as the registry
  return *t;
}

void run_ahead_job(AheadJob& j) {
  std::unique_ptr<Built> b;
  KeptPlan kept;
  kept.key = j.slot->spec.key;
  kept.tag = j.slot->spec.tag;
  if (!j.valid) {
    b = std::make_unique<Built>();
    b->slot = j.slot;
    b->why = "its key names no convolution";
  } else {
    if (j.has_kept) {
      b = restore(j.target, j.slot, j.kept);
      if (b) {
        kept = j.kept;
        kept.runtime_compiled = b->runtime_compiled;
      }
    }
    if (!b) b = build(j.target, j.slot, &kept);
  }
  if (!b->graph) kept.blob.clear();
  {
    std::lock_guard<std::mutex> lock(j.ahead->m);
    j.ahead->built = std::move(b);
    j.ahead->kept = std::move(kept);
    j.ahead->done = true;
  }
  j.ahead->cv.notify_all();
}

// The plan built ahead for this call's full key, once it is done (waiting for it alone),
// or null: none was built ahead, or another thread took it.
std::unique_ptr<Built> take_ahead(const std::vector<int64_t>& key, Slot& s) {
  std::shared_ptr<Ahead> a;
  {
    AheadTable& t = ahead_table();
    std::lock_guard<std::mutex> lock(t.m);
    auto it = t.plans.find(key);
    if (it == t.plans.end()) return nullptr;
    a = it->second;
  }
  std::unique_lock<std::mutex> lock(a->m);
  if (!a->done) {
    const auto t0 = std::chrono::steady_clock::now();
    a->cv.wait(lock, [&a] { return a->done; });
    const double ms = ms_since(t0);
    std::lock_guard<std::mutex> slock(s.m);
    s.waited_ms += ms;
  }
  // a plan built for the file loaded before (a round that raced a load) is not this one's
  if (!a->built || a->built->slot.get() != &s) return nullptr;
  return std::move(a->built);
}

std::vector<int64_t> full_key(std::vector<int64_t> key, bool det, int64_t device,
                              const std::vector<int64_t>& alignment) {
  key.push_back(det ? 1 : 0);
  key.push_back(device);
  key.insert(key.end(), alignment.begin(), alignment.end());
  return key;
}

}  // namespace

int64_t wait_ahead() {
  AheadTable& t = ahead_table();
  std::vector<std::thread> threads;
  int64_t jobs = 0;
  {
    std::lock_guard<std::mutex> lock(t.m);
    threads.swap(t.threads);
    jobs = t.jobs;
  }
  for (auto& th : threads) th.join();
  // another thread may have taken the threads to join: wait for every plan itself
  std::vector<std::shared_ptr<Ahead>> all;
  {
    std::lock_guard<std::mutex> lock(t.m);
    for (const auto& kv : t.plans) all.push_back(kv.second);
  }
  for (const auto& a : all) {
    std::unique_lock<std::mutex> lock(a->m);
    a->cv.wait(lock, [&a] { return a->done; });
  }
  return jobs;
}

void drop_ahead() {
  AheadTable& t = ahead_table();
  std::lock_guard<std::mutex> round(t.round);
  wait_ahead();
  std::lock_guard<std::mutex> lock(t.m);
  t.plans.clear();
  t.jobs = 0;
}

void build_ahead(int64_t device, int64_t threads, const std::vector<KeptPlan>& kept) {
  CE_CHECK_ARG(threads >= 1 && threads <= 256, "threads ", threads, ": valid: 1 to 256");
  const int64_t devices = c10::cuda::device_count();
  CE_CHECK_ARG(device >= 0 && device < devices, "device ", device, ": valid: 0 to ",
               devices - 1);
  AheadTable& t = ahead_table();
  std::lock_guard<std::mutex> round(t.round);  // one round at a time
  wait_ahead();
  const bool det = deterministic_now();
  std::vector<std::shared_ptr<Slot>> slots;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.m);
    for (const auto& kv : r.slots) {
      if (kv.second->covered) slots.push_back(kv.second);
    }
  }
  auto jobs = std::make_shared<std::vector<AheadJob>>();
  std::lock_guard<std::mutex> lock(t.m);
  std::unordered_map<std::vector<int64_t>, const KeptPlan*, KeyHash> by_key;
  for (const auto& k : kept) by_key[k.key] = &k;
  // forward directions first: a step's first calls are its forward's
  std::stable_sort(slots.begin(), slots.end(), [](const auto& a, const auto& b) {
    return a->spec.key[1] < b->spec.key[1];
  });
  for (const auto& s : slots) {
    auto key = full_key(s->spec.key, det, device, {16, 16, 16});
    if (t.plans.count(key)) continue;
    AheadJob j;
    j.ahead = std::make_shared<Ahead>();
    j.slot = s;
    j.valid = target_of_key(s->spec.key, det, j.target);
    const auto it = by_key.find(s->spec.key);
    if (it != by_key.end() && !it->second->blob.empty()) {
      j.has_kept = true;
      j.kept = *it->second;
    }
    t.plans.emplace(std::move(key), j.ahead);
    jobs->push_back(std::move(j));
  }
  t.jobs = static_cast<int64_t>(jobs->size());
  auto next = std::make_shared<std::atomic<size_t>>(0);
  const size_t n = std::min(static_cast<size_t>(threads), jobs->size());
  auto finish = [](AheadJob& j) {  // never leave a first call waiting
    {
      std::lock_guard<std::mutex> lock(j.ahead->m);
      j.ahead->done = true;
    }
    j.ahead->cv.notify_all();
  };
  for (size_t i = 0; i < n; ++i) {
    try {
      t.threads.emplace_back([jobs, next, device, finish] {
        bool ready = true;
        std::optional<c10::cuda::CUDAGuard> guard;
        try {
          guard.emplace(static_cast<c10::DeviceIndex>(device));
          cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
          cudaThreadExchangeStreamCaptureMode(&mode);
        } catch (...) {
          ready = false;  // its jobs end unbuilt: their first calls build their own
        }
        for (size_t k = (*next)++; k < jobs->size(); k = (*next)++) {
          try {
            if (ready) run_ahead_job((*jobs)[k]);
          } catch (...) {
          }
          finish((*jobs)[k]);
        }
      });
    } catch (const std::system_error&) {
      break;  // no more threads: those started take every job
    }
  }
  if (t.threads.empty()) {
    for (auto& j : *jobs) finish(j);
  }
}

std::vector<KeptPlan> kept_plans() {
  AheadTable& t = ahead_table();
  std::vector<std::shared_ptr<Ahead>> all;
  {
    std::lock_guard<std::mutex> lock(t.m);
    for (const auto& kv : t.plans) all.push_back(kv.second);
  }
  std::vector<KeptPlan> out;
  for (const auto& a : all) {
    std::lock_guard<std::mutex> lock(a->m);
    if (a->done && !a->kept.blob.empty()) out.push_back(a->kept);
  }
  return out;
}

namespace {

std::shared_ptr<Slot> slot_for(const std::vector<int64_t>& key) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.m);
  auto it = r.slots.find(key);
  if (it != r.slots.end()) return it->second;
  auto s = std::make_shared<Slot>();
  s->spec.key = key;
  s->spec.description = describe_key(key);
  // Say what the file has instead when only the TF32 setting differs.
  std::vector<int64_t> other = key;
  other[3] = 1 - other[3];
  if (key[2] == 0 && r.slots.count(other)) {
    s->reason = key[3] ? "the plan file has it with TF32 off only"
                       : "the plan file has it with TF32 allowed only";
  }
  r.slots.emplace(key, s);
  return s;
}

}  // namespace

bool run_pinned(const PinnedCall& c) {
  ThreadPlans& tp = thread_plans();
  const int64_t gen = registry().generation.load(std::memory_order_acquire);
  if (tp.generation != gen) {
    tp.clear();
    tp.generation = gen;
  }
  // Note [no allocation per pinned call]: a steady call allocates nothing here, in
  // run_pinned: the key is built in a vector this thread reuses, and the plan's tensor
  // pointers go in a map this thread reuses (its three entries made once, their values set
  // per call). Neither is touched by another call before this one returns (nothing here
  // reenters). The op's caller keeps the call's small lists inline (Dims, conv_op.cpp),
  // and a fallback warns once, not per call. What still allocates per call: the output
  // and the workspace, the tensors' views (a copy where an input is not dense in the
  // layout); a miss the thread knows makes none of them (Note [known misses]).
  thread_local std::vector<int64_t> key;
  fill_call_key(c, key);
  const size_t file_key = key.size();
  const bool det = deterministic_now();
  key.push_back(det ? 1 : 0);
  key.push_back(c.x->get_device());
  for (const at::Tensor* t : {c.x, c.w, c.y}) key.push_back(alignment_of(*t));
  auto it = tp.plans.find(key);
  std::unique_ptr<Built> ahead;
  std::shared_ptr<Slot> slot;
  if (it == tp.plans.end()) {
    slot = slot_for(std::vector<int64_t>(key.begin(), key.begin() + file_key));
    if (slot->covered) ahead = take_ahead(key, *slot);  // Note [plans built ahead]
    if (ahead) it = tp.plans.emplace(key, std::move(ahead)).first;
  }
  if (it == tp.plans.end()) {
    if (slot->covered && c10::cuda::currentStreamCaptureStatusMayInitCtx() !=
                             c10::cuda::CaptureStatus::None) {
      // Note [no builds in a capture]: building runs cuDNN work (and run-time
      // compilation) that a CUDA-graph capture must not record; run the step once
      // before capturing it.
      note_fallback(*slot, "its plan was not built before the CUDA-graph capture");
      return false;
    }
    it = tp.plans.emplace(key, build(target_of_call(c, det), slot)).first;
    if (!slot->covered) {
      {
        std::lock_guard<std::mutex> lock(slot->m);
        if (!slot->reason.empty()) it->second->why = slot->reason;
      }
      tp.misses.emplace(std::vector<int64_t>(key.begin(), key.begin() + file_key),
                        it->second.get());
    }
  }
  Built& b = *it->second;
  Slot& s = *b.slot;
  if (!b.graph) {  // a refused or failed plan; an uncovered key's first call per thread
    note_built_fallback(b);
    return false;
  }
  c10::DataPtr ws;
  if (b.workspace > 0) {
    try {
      ws = c10::cuda::CUDACachingAllocator::get()->allocate(static_cast<size_t>(b.workspace));
    } catch (const c10::OutOfMemoryError&) {
      const std::string why = cat("its workspace of ", b.workspace / (1024.0 * 1024.0),
                                  " MiB did not fit in GPU memory");
      note_fallback(s, why);
      return false;
    }
  }
  thread_local std::unordered_map<int64_t, void*> pack{{kX, nullptr}, {kW, nullptr},
                                                       {kY, nullptr}};
  pack[kX] = c.x->data_ptr();
  pack[kW] = c.w->data_ptr();
  pack[kY] = c.y->data_ptr();
  // a scope of its own in profiles (a flag's check when no profiler runs)
  RECORD_FUNCTION("cudnn_explorer::execute_plan", c10::ArrayRef<const c10::IValue>{});
  // (no capture runs on the default stream: the query, a driver call, is made elsewhere)
  const auto device = static_cast<c10::DeviceIndex>(c.x->get_device());
  if (!b.captured &&
      c10::cuda::getCurrentCUDAStream(device) != c10::cuda::getDefaultCUDAStream(device) &&
      c10::cuda::currentStreamCaptureStatusMayInitCtx() != c10::cuda::CaptureStatus::None) {
    b.captured = true;
  }
  auto st = b.graph->execute_plan_at_index(at::native::getCudnnHandle(), pack, ws.get(), 0);
  if (!st.is_good()) {
    b.why = "its plan failed to run: " + st.get_message().substr(0, 300);
    tp.retire(b);  // later calls fall back at once
    note_built_fallback(b);
    return false;
  }
  s.pinned.fetch_add(1, std::memory_order_relaxed);
  return true;
}

// Note [known misses]: a call the file does not cover falls back to PyTorch's own
// convolution on every call, a recording's on all of them. Once this thread has seen its
// problem-direction (run_pinned, above), the op asks here before it allocates the
// direction's output: the call is counted as that fallback (strict pinning raises), and
// the op runs PyTorch's call with nothing made for a plan. Whether the file covers a key
// depends on nothing else the thread's plans are keyed by (deterministic mode, device,
// alignments), so the file's key is enough. A thread with no misses pays one check.
bool counted_known_miss(const CallGeometry& c, at::ScalarType dtype, at::IntArrayRef x,
                        at::IntArrayRef w, at::IntArrayRef y) {
  ThreadPlans& tp = thread_plans();
  if (tp.misses.empty() ||
      tp.generation != registry().generation.load(std::memory_order_acquire)) {
    return false;  // run_pinned clears the thread's plans of another file first
  }
  thread_local std::vector<int64_t> key;
  fill_key(c, dtype, x, w, y, key);
  const auto it = tp.misses.find(key);
  if (it == tp.misses.end()) return false;
  note_built_fallback(*it->second);
  return true;
}

int64_t retired_plan_count() { return static_cast<int64_t>(thread_plans().retired.size()); }

#else  // built without cudnn-frontend

int64_t retired_plan_count() { return 0; }
void build_ahead(int64_t, int64_t, const std::vector<KeptPlan>&) {}
int64_t wait_ahead() { return 0; }
void drop_ahead() {}
std::vector<KeptPlan> kept_plans() { return {}; }

bool run_pinned(const PinnedCall&) {
  note_unpinned("this build of cudnn_explorer has no cudnn-frontend");
  return false;
}

bool counted_known_miss(const CallGeometry&, at::ScalarType, at::IntArrayRef,
                        at::IntArrayRef, at::IntArrayRef) {
  return false;
}

#endif

}  // namespace cudnn_explorer
