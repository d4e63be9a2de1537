// The loaded plans, the plans built from them (per thread, as PyTorch's own Conv_v8 plan
// cache is), and running one convolution direction with its plan.
#include "pinned.h"

#include "frontend_graph.h"

#include <ATen/Context.h>
#include <ATen/cudnn/Handle.h>
#include <ATen/record_function.h>
#include <c10/core/ScalarType.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
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
  std::atomic<int64_t> pinned{0}, fallback{0}, builds{0};
  mutable std::mutex m;  // guards the strings and build_ms
  std::string reason, ran;
  double build_ms = 0.0;
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
void note_fallback(Slot& s, const std::string& why) {
  s.fallback.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(s.m);
    if (s.reason != why) s.reason = why;
  }
  TORCH_CHECK(!registry().strict.load(), "cudnn_explorer strict pinning: ", s.spec.description,
              " (key ", key_text(s.spec.key), ") is not pinned: ", why);
  warn_once(s.spec.description, why);
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

// Note [size-1 strides]: the stride of a size-1 dim is arbitrary (a depthwise 64x1x3x3
// weight may come as (9, 9, 3, 1) or (9, 1, 3, 1)), and cuDNN reads the layout from the
// strides. As ATen's fixSizeOneDimStride does, give such a dim the stride it has in a
// dense tensor of the layout, so that the plan is built for the layout the sweep measured.
std::vector<int64_t> fixed_strides(const at::Tensor& t, bool nhwc) {
  std::vector<int64_t> st = strides_of(t);
  const int64_t dim = t.dim();
  std::vector<int64_t> order;
  if (nhwc) order.push_back(1);
  for (int64_t d = dim - 1; d > 1; --d) order.push_back(d);
  if (!nhwc) order.push_back(1);
  order.push_back(0);
  int64_t z = 1;
  for (int64_t d : order) {
    if (t.size(d) == 1) {
      st[static_cast<size_t>(d)] = z;
    } else {
      z *= t.size(d);
    }
  }
  return st;
}

bool deterministic_now() {
  auto& ctx = at::globalContext();
  return ctx.deterministicCuDNN() || ctx.deterministicAlgorithms();
}

}  // namespace

std::string describe_plan_key(const std::vector<int64_t>& key) { return describe_key(key); }

std::vector<int64_t> call_key(const PinnedCall& c) {
  const at::Tensor& x = *c.x;
  const int64_t dtype = dtype_code(x.scalar_type());
  const bool tf32 = dtype != 0 || at::globalContext().allowTF32CuDNN(at::Float32Op::CONV);
  std::vector<int64_t> k;
  k.reserve(static_cast<size_t>(7 + 6 * x.dim()));  // run_pinned appends 5 more
  k.insert(k.end(), {kKeyVersion, static_cast<int64_t>(c.direction), dtype, tf32 ? 1 : 0,
                     c.groups, c.channels_last ? 1 : 0, x.dim()});
  for (const at::Tensor* t : {c.x, c.w, c.y}) {
    for (int64_t v : t->sizes()) k.push_back(v);
  }
  for (const auto* v : {&c.padding, &c.stride, &c.dilation}) k.insert(k.end(), v->begin(), v->end());
  return k;
}

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
    std::lock_guard<std::mutex> slock(s.m);
    p.ran = s.ran;
    p.reason = s.reason;
    p.build_ms = s.build_ms;
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
  void clear() {
    for (auto& kv : plans) retire(*kv.second);
    plans.clear();
  }
};

ThreadPlans& thread_plans() {
  // Never destroyed (as ATen's cuDNN handle pool is not): destroying cuDNN descriptors
  // after the CUDA context has gone at exit crashes.
  thread_local auto* t = new ThreadPlans;
  return *t;
}

// Note [plan validators]: the file names an engine config; cuDNN says what the config is.
// A plan is refused (and the call falls back) when cuDNN's numerical notes say PyTorch's
// rules would not run it here: DOWN_CONVERT_INPUTS always, TENSOR_CORE for float32 with
// TF32 off, NONDETERMINISTIC in deterministic mode; or when the built plan is not the
// file's (another name from cudnn-frontend).
std::string refusal(const Graph& g, const PinnedCall& c, const std::string& tag, bool det,
                    const std::string& built_name) {
  bool tf32 = true;
  if (c.x->scalar_type() == at::kFloat) {
    tf32 = at::globalContext().allowTF32CuDNN(at::Float32Op::CONV);
  }
  for (auto n : g.numeric_notes_at(0)) {
    if (n == fe::NumericalNote_t::DOWN_CONVERT_INPUTS) {
      return "its engine config " + tag + " converts its inputs down (DOWN_CONVERT_INPUTS), "
             "which PyTorch never runs";
    }
    if (n == fe::NumericalNote_t::TENSOR_CORE && !tf32 && c.x->scalar_type() == at::kFloat) {
      return "TF32 is off here and its engine config " + tag + " uses tensor cores";
    }
    if (n == fe::NumericalNote_t::NONDETERMINISTIC && det) {
      return "deterministic algorithms are on and its engine config " + tag +
             " is NONDETERMINISTIC";
    }
  }
  // the tag without the operation's prefix ("ConvFwd_eng0_k2=1" and "eng0_k2=1" agree)
  auto bare = [](const std::string& t) {
    const auto at = t.find("eng");
    return at == std::string::npos ? t : t.substr(at);
  };
  if (!built_name.empty() && bare(built_name) != bare(tag)) {
    return "cudnn-frontend built " + built_name + ", not the file's " + tag;
  }
  return "";
}

std::unique_ptr<Built> build(const PinnedCall& c, std::shared_ptr<Slot> slot, bool det) {
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
    TargetProblem tp;
    tp.x_dims = dims_of(*c.x);
    tp.x_strides = fixed_strides(*c.x, c.channels_last);
    tp.w_dims = dims_of(*c.w);
    tp.w_strides = fixed_strides(*c.w, c.channels_last);
    tp.y_dims = dims_of(*c.y);
    tp.y_strides = fixed_strides(*c.y, c.channels_last);
    tp.padding = c.padding;
    tp.stride = c.stride;
    tp.dilation = c.dilation;
    tp.alignment = {alignment_of(*c.x), alignment_of(*c.w), alignment_of(*c.y)};
    add_conv(*g, c.direction, fe_type(data_type_of(*c.x)), tp);
    const std::string what = s.spec.description;
    fe_check(g->validate(), "validating the graph of " + what);
    fe_check(g->build_operation_graph(h), "building the operation graph of " + what);
    g->add_config(s.spec.engine, s.spec.knobs, s.spec.tag + " of " + what);
    std::string name;
    if (!g->get_plan_name_at_index(0, name).is_good()) name.clear();
    b->why = refusal(*g, c, s.spec.tag, det, name);
    if (b->why.empty()) {
      fe_check(g->build_plan_at_index(h, 0), "building the plan " + s.spec.tag);
      fe_check(g->get_workspace_size_plan_at_index(0, b->workspace),
               "the workspace of " + s.spec.tag);
      b->graph = std::move(g);
      std::lock_guard<std::mutex> lock(s.m);
      s.ran = name;
    }
  } catch (const std::exception& e) {
    b->graph.reset();
    b->why = std::string("its plan did not build: ") + std::string(e.what()).substr(0, 300);
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  s.builds.fetch_add(1);
  std::lock_guard<std::mutex> lock(s.m);
  s.build_ms += ms;
  return b;
}

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

std::string run_pinned(const PinnedCall& c) {
  ThreadPlans& tp = thread_plans();
  const int64_t gen = registry().generation.load(std::memory_order_acquire);
  if (tp.generation != gen) {
    tp.clear();
    tp.generation = gen;
  }
  std::vector<int64_t> key = call_key(c);
  const size_t file_key = key.size();
  const bool det = deterministic_now();
  key.push_back(det ? 1 : 0);
  key.push_back(c.x->get_device());
  for (const at::Tensor* t : {c.x, c.w, c.y}) key.push_back(alignment_of(*t));
  auto it = tp.plans.find(key);
  if (it == tp.plans.end()) {
    auto slot = slot_for(std::vector<int64_t>(key.begin(), key.begin() + file_key));
    if (slot->covered && c10::cuda::currentStreamCaptureStatusMayInitCtx() !=
                             c10::cuda::CaptureStatus::None) {
      // Note [no builds in a capture]: building runs cuDNN work (and run-time
      // compilation) that a CUDA-graph capture must not record; run the step once
      // before capturing it.
      const std::string why = "its plan was not built before the CUDA-graph capture";
      note_fallback(*slot, why);
      return why;
    }
    it = tp.plans.emplace(key, build(c, slot, det)).first;
    if (!slot->covered) {
      std::lock_guard<std::mutex> lock(slot->m);
      if (!slot->reason.empty()) it->second->why = slot->reason;
    }
  }
  Built& b = *it->second;
  Slot& s = *b.slot;
  if (!b.graph) {
    note_fallback(s, b.why);
    return b.why;
  }
  c10::DataPtr ws;
  if (b.workspace > 0) {
    try {
      ws = c10::cuda::CUDACachingAllocator::get()->allocate(static_cast<size_t>(b.workspace));
    } catch (const c10::OutOfMemoryError&) {
      const std::string why = cat("its workspace of ", b.workspace / (1024.0 * 1024.0),
                                  " MiB did not fit in GPU memory");
      note_fallback(s, why);
      return why;
    }
  }
  std::unordered_map<int64_t, void*> pack{
      {kX, c.x->data_ptr()}, {kW, c.w->data_ptr()}, {kY, c.y->data_ptr()}};
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
    note_fallback(s, b.why);
    return b.why;
  }
  s.pinned.fetch_add(1, std::memory_order_relaxed);
  return "";
}

int64_t retired_plan_count() { return static_cast<int64_t>(thread_plans().retired.size()); }

#else  // built without cudnn-frontend

int64_t retired_plan_count() { return 0; }

std::string run_pinned(const PinnedCall&) {
  const std::string why = "this build of cudnn_explorer has no cudnn-frontend";
  note_unpinned(why);
  return why;
}

#endif

}  // namespace cudnn_explorer
