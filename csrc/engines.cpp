#include "engines.h"

#include "frontend_graph.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>

#include <chrono>
#include <unordered_map>

namespace cudnn_explorer {

#ifdef CE_HAVE_FRONTEND
namespace fe = cudnn_frontend;

namespace {

std::vector<int64_t> v64(at::IntArrayRef a) { return std::vector<int64_t>(a.begin(), a.end()); }
std::vector<int64_t> v64(const std::vector<int>& a) {
  return std::vector<int64_t>(a.begin(), a.end());
}

std::string err(fe::error_t e) { return e.get_message(); }

fe::HeurMode_t heur_mode(const std::string& mode) {
  CE_CHECK_ARG(mode == "A" || mode == "B" || mode == "FALLBACK",
               "heuristic mode must be A, B or FALLBACK, not ", mode);
  return mode == "A" ? fe::HeurMode_t::A
         : mode == "B" ? fe::HeurMode_t::B
                       : fe::HeurMode_t::FALLBACK;
}

}  // namespace

struct EngineSearch::Impl {
  Direction d;
  Problem& p;
  cudnnHandle_t h;
  std::unique_ptr<Graph> graph;
  std::unordered_map<int64_t, void*> pack;
  std::string ctx;

  // The workspace plan ``idx`` asks for, from PyTorch's caching allocator; the error of
  // the query when it fails (then ``bytes`` is left unchanged).
  fe::error_t workspace(int64_t idx, int64_t* bytes, c10::DataPtr* ws) const {
    auto st = graph->get_workspace_size_plan_at_index(idx, *bytes);
    if (st.is_good()) {
      *ws = c10::cuda::CUDACachingAllocator::get()->allocate(
          static_cast<size_t>(std::max<int64_t>(*bytes, 0)));
    }
    return st;
  }

  std::unique_ptr<Graph> make_graph() const {
    auto g = std::make_unique<Graph>();
    TargetProblem tp;  // the problem's tensors as dims and strides
    tp.x_dims = v64(p.x().sizes());
    tp.x_strides = v64(p.x().strides());
    tp.w_dims = v64(p.w().sizes());
    tp.w_strides = v64(p.w().strides());
    tp.y_dims = v64(p.y().sizes());
    tp.y_strides = v64(p.y().strides());
    tp.padding = v64(p.padding());
    tp.stride = v64(p.stride());
    tp.dilation = v64(p.dilation());
    add_conv(*g, d, fe_type(p.data_type()), tp);
    fe_check(g->validate(), "cudnn-frontend validating the graph of " + ctx);
    fe_check(g->build_operation_graph(h), "cudnn-frontend building the operation graph of " + ctx);
    return g;
  }
};

namespace {

fe::DataType_t fe_type_named(const std::string& dtype) {
  if (dtype == "float16") return fe::DataType_t::HALF;
  if (dtype == "bfloat16") return fe::DataType_t::BFLOAT16;
  if (dtype == "float64") return fe::DataType_t::DOUBLE;
  CE_CHECK_ARG(dtype == "float32", "unknown dtype '", dtype,
               "'; valid: float32, float16, bfloat16, float64");
  return fe::DataType_t::FLOAT;
}

}  // namespace

std::vector<TargetPlan> deviceless_heuristics(const TargetProblem& tp,
                                              const std::string& device_json,
                                              const std::string& mode) {
  const std::string ctx = tp.direction + " for a device profile";
  const fe::HeurMode_t m = heur_mode(mode);
  auto props = std::make_shared<fe::DeviceProperties>();
  const std::vector<uint8_t> buf(device_json.begin(), device_json.end());
  fe_check(props->deserialize(buf), "reading the device profile");
  Graph g;
  add_conv(g, direction_from_name(tp.direction), fe_type_named(tp.dtype), tp);
  g.set_device_properties(props);
  fe_check(g.validate(), "cudnn-frontend validating the graph of " + ctx);
  fe_check(g.build_operation_graph(), "building the operation graph of " + ctx);
  std::vector<TargetPlan> out;
  if (!g.create_execution_plans({m}).is_good()) return out;  // the mode lists nothing
  for (int64_t i = 0; i < g.get_execution_plan_count(); ++i) {
    TargetPlan plan;
    if (!g.get_plan_name_at_index(i, plan.name).is_good()) continue;
    for (auto n : g.numeric_notes_at(i)) {
      if (n != fe::NumericalNote_t::NOT_SET) plan.numeric_notes.push_back(fe_name(n));
    }
    std::vector<fe::BehaviorNote_t> behavior;
    if (g.get_behavior_notes_for_plan_at_index(i, behavior).is_good()) {
      for (auto n : behavior) {
        if (n != fe::BehaviorNote_t::NOT_SET) plan.behavior_notes.push_back(fe_name(n));
      }
    }
    out.push_back(std::move(plan));
  }
  return out;
}

std::string device_properties_json(int device) {
  fe::DeviceProperties props;
  props.set_device_id(device);
  fe_check(props.build(), cat("describing CUDA device ", device));
  std::vector<uint8_t> buf;
  fe_check(props.serialize(buf), cat("serializing the properties of CUDA device ", device));
  std::string text(buf.begin(), buf.end());
  while (!text.empty() && text.back() == '\0') text.pop_back();
  return text;
}

EngineSearch::EngineSearch(Direction d, Problem& p) : impl_(new Impl{d, p, nullptr, {}, {}, {}}) {
  c10::cuda::CUDAGuard guard(p.x().device());
  impl_->h = current_handle();
  impl_->ctx = direction_name(d) + " of " + p.describe();
  impl_->pack = {{kX, p.x().data_ptr()}, {kW, p.w().data_ptr()}, {kY, p.y().data_ptr()}};
  impl_->graph = impl_->make_graph();
}

EngineSearch::~EngineSearch() = default;

int64_t EngineSearch::engine_count() const {
  int64_t n = 0;
  fe_check(impl_->graph->get_engine_count(n), "the engine count of " + impl_->ctx);
  return n;
}

EngineInfo EngineSearch::engine_info(int64_t engine) {
  EngineInfo info;
  info.engine = engine;
  try {
    info.knobs = impl_->graph->knobs_of(engine, impl_->ctx);
    info.status = "OK";
  } catch (const std::exception& e) {
    info.status = std::string(e.what()).substr(0, 400);
  }
  return info;
}

std::vector<std::string> EngineSearch::heuristics(const std::string& mode) {
  const fe::HeurMode_t m = heur_mode(mode);
  auto g = impl_->make_graph();  // a fresh graph: its plan list holds only this mode's
  std::vector<std::string> out;
  if (!g->create_execution_plans({m}).is_good()) return out;
  for (int64_t i = 0; i < g->get_execution_plan_count(); ++i) {
    std::string name;  // carries the backend knob types (Note [backend knob types])
    if (g->get_plan_name_at_index(i, name).is_good()) out.push_back(std::move(name));
  }
  return out;
}

ConfigResult EngineSearch::build(int64_t engine, const Knobs& knobs) {
  Impl& I = *impl_;
  c10::cuda::CUDAGuard guard(I.p.x().device());
  ConfigResult r;
  r.engine = engine;
  r.knobs = knobs;
  const int64_t before = I.graph->get_execution_plan_count();
  try {
    I.graph->add_config(engine, knobs, "engine " + std::to_string(engine) + " of " + I.ctx);
  } catch (const std::exception& e) {
    r.status = "config rejected";
    r.message = std::string(e.what()).substr(0, 400);
    return r;
  }
  if (I.graph->get_execution_plan_count() <= before) {
    r.status = "config rejected";
    r.message = "cudnn-frontend added no plan";
    return r;
  }
  const int64_t idx = I.graph->get_execution_plan_count() - 1;
  r.plan_index = idx;
  if (!I.graph->get_plan_name_at_index(idx, r.name).is_good()) r.name.clear();
  for (auto n : I.graph->numeric_notes_at(idx)) {
    if (n != fe::NumericalNote_t::NOT_SET) r.numeric_notes.push_back(fe_name(n));
  }
  std::vector<fe::BehaviorNote_t> bn;
  if (I.graph->get_behavior_notes_for_plan_at_index(idx, bn).is_good()) {
    for (auto n : bn) r.behavior_notes.push_back(fe_name(n));
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto st = I.graph->build_plan_at_index(I.h, idx);
  r.build_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!st.is_good()) {
    r.status = "build failed";
    r.message = err(st);
    return r;
  }
  int64_t ws_bytes = 0;
  st = I.graph->get_workspace_size_plan_at_index(idx, ws_bytes);
  if (!st.is_good()) {
    r.status = "workspace query failed";
    r.message = err(st);
    return r;
  }
  r.workspace_bytes = ws_bytes;
  r.status = "built";
  return r;
}

ConfigResult EngineSearch::measure(ConfigResult r, bool time, const TimingOptions& opt) {
  Impl& I = *impl_;
  c10::cuda::CUDAGuard guard(I.p.x().device());
  CE_CHECK_ARG(r.status == "built" && r.plan_index >= 0 &&
                   r.plan_index < I.graph->get_execution_plan_count(),
               "measure() takes a config that build() built, not one with status '",
               r.status, "'");
  const int64_t idx = r.plan_index;
  int64_t ws_bytes = 0;
  c10::DataPtr ws;
  fe::error_t st;
  try {
    st = I.workspace(idx, &ws_bytes, &ws);
  } catch (const c10::OutOfMemoryError&) {
    // Note [workspace that does not fit]: a config whose workspace the GPU's free memory
    // cannot hold is recorded as such and the search goes on, in this process (as
    // PyTorch skips such a candidate); it used to end the worker process, and every
    // config of that kind cost a new worker (or, out of memory, the search).
    r.status = "workspace did not fit";
    r.message = cat("its workspace of ", ws_bytes / (1024.0 * 1024.0),
                    " MiB did not fit in the GPU's free memory");
    return r;
  }
  if (!st.is_good()) {
    r.status = "workspace query failed";
    r.message = err(st);
    return r;
  }
  void* wsp = ws.get();
  std::string last;
  Graph* g = I.graph.get();
  auto* pack = &I.pack;
  cudnnHandle_t h = I.h;
  Launch launch = [g, h, pack, wsp, idx, &last] {
    auto e = g->execute_plan_at_index(h, *pack, wsp, idx);
    if (e.is_good()) return CUDNN_STATUS_SUCCESS;
    last = e.get_message();
    return CUDNN_STATUS_EXECUTION_FAILED;
  };
  const std::string ctx = "engine config " + r.name + " on " + I.ctx;
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  // The execute check; timed (and synchronised) only where its time can cut the timing.
  cudnnStatus_t launched = CUDNN_STATUS_SUCCESS;
  double first_ms = -1.0, first_host_ms = -1.0;
  if (time && opt.cutoff_ms > 0) {
    first_ms = time_launch(stream, launch, &launched, &first_host_ms);
  } else {
    launched = launch();
  }
  if (launched != CUDNN_STATUS_SUCCESS) {
    r.status = "execute failed";
    r.message = last;
    return r;
  }
  r.status = "OK";
  if (time) {
    try {
      TimingOptions warm = opt;
      warm.warmed = true;  // the launch above was the first
      warm.first_ms = first_ms;
      warm.first_host_ms = first_host_ms;
      r.timing = time_launches(h, stream, I.p.x().device(), launch, warm, ctx);
      r.timed = true;
    } catch (const std::exception& e) {
      r.status = "timing failed";
      r.message = std::string(e.what()).substr(0, 400) + (last.empty() ? "" : " | " + last);
    }
  }
  return r;
}

ConfigResult EngineSearch::run(int64_t engine, const Knobs& knobs, bool time,
                               const TimingOptions& opt) {
  ConfigResult r = build(engine, knobs);
  return r.status == "built" ? measure(std::move(r), time, opt) : r;
}

void EngineSearch::execute(int64_t plan_index) {
  Impl& I = *impl_;
  c10::cuda::CUDAGuard guard(I.p.x().device());
  int64_t ws_bytes = 0;
  c10::DataPtr ws;
  fe_check(I.workspace(plan_index, &ws_bytes, &ws),
           cat("the workspace of plan ", plan_index, " of ", I.ctx));
  fe_check(I.graph->execute_plan_at_index(current_handle(), I.pack, ws.get(), plan_index),
           cat("executing plan ", plan_index, " of ", I.ctx));
}

bool frontend_available() { return true; }

#else  // built without cudnn-frontend

struct EngineSearch::Impl {};

EngineSearch::EngineSearch(Direction, Problem&) {
  throw_native("argument", "NOT_BUILT", "EngineSearch",
              "cudnn_explorer was built without cudnn-frontend's headers, so it cannot list "
              "engine configs; pip install nvidia-cudnn-frontend and rebuild the extension");
}
EngineSearch::~EngineSearch() = default;
int64_t EngineSearch::engine_count() const { return 0; }
EngineInfo EngineSearch::engine_info(int64_t) { return {}; }
std::vector<std::string> EngineSearch::heuristics(const std::string&) { return {}; }
ConfigResult EngineSearch::build(int64_t, const Knobs&) { return {}; }
ConfigResult EngineSearch::measure(ConfigResult r, bool, const TimingOptions&) { return r; }
ConfigResult EngineSearch::run(int64_t, const Knobs&, bool, const TimingOptions&) { return {}; }
void EngineSearch::execute(int64_t) {}
bool frontend_available() { return false; }
std::vector<TargetPlan> deviceless_heuristics(const TargetProblem&, const std::string&,
                                              const std::string&) {
  throw_native("frontend", "NOT_BUILT", "deviceless_heuristics",
               "this build of the extension has no cudnn-frontend");
}
std::string device_properties_json(int) {
  throw_native("frontend", "NOT_BUILT", "device_properties_json",
               "this build of the extension has no cudnn-frontend");
}

#endif

}  // namespace cudnn_explorer
