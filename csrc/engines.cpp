#include "engines.h"

#ifdef CE_HAVE_FRONTEND
#include <cudnn_frontend.h>
#endif

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>

#include <chrono>
#include <unordered_map>

namespace cudnn_explorer {

#ifdef CE_HAVE_FRONTEND
namespace fe = cudnn_frontend;

namespace {

// The frontend keeps per-plan numerical notes in a protected member; this subclass
// only exposes them (cudnn-frontend has a public getter for behaviour notes alone).
class Graph : public fe::graph::Graph {
 public:
  std::vector<fe::NumericalNote_t> numeric_notes_at(int64_t i) const {
    if (i < 0 || i >= static_cast<int64_t>(plans.numeric_notes.size())) return {};
    return plans.numeric_notes[static_cast<size_t>(i)];
  }
};

// A frontend enum's name from cudnn-frontend's own enum <-> string table (the names it
// logs, e.g. "TENSOR_CORE", "RUNTIME_COMPILATION"); its number if the table lacks it.
template <typename Enum>
std::string fe_name(Enum n) {
  nlohmann::json j = n;
  return j.is_string() ? j.get<std::string>() : std::to_string(static_cast<int>(n));
}

fe::DataType_t fe_type(cudnnDataType_t t) {
  switch (t) {
    case CUDNN_DATA_HALF: return fe::DataType_t::HALF;
    case CUDNN_DATA_BFLOAT16: return fe::DataType_t::BFLOAT16;
    case CUDNN_DATA_DOUBLE: return fe::DataType_t::DOUBLE;
    default: return fe::DataType_t::FLOAT;
  }
}

std::vector<int64_t> v64(at::IntArrayRef a) { return std::vector<int64_t>(a.begin(), a.end()); }
std::vector<int64_t> v64(const std::vector<int>& a) {
  return std::vector<int64_t>(a.begin(), a.end());
}

constexpr int64_t kX = 1, kW = 2, kY = 3;  // tensor uids in every variant pack

std::string err(fe::error_t e) { return e.get_message(); }

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
    const cudnnDataType_t dt = p.data_type();
    g->set_io_data_type(fe_type(dt))
        .set_intermediate_data_type(dt == CUDNN_DATA_DOUBLE ? fe::DataType_t::DOUBLE
                                                            : fe::DataType_t::FLOAT)
        .set_compute_data_type(dt == CUDNN_DATA_DOUBLE ? fe::DataType_t::DOUBLE
                                                       : fe::DataType_t::FLOAT);
    auto attrs = [](const char* name, const at::Tensor& t, int64_t uid) {
      return fe::graph::Tensor_attributes().set_name(name).set_dim(v64(t.sizes()))
          .set_stride(v64(t.strides())).set_uid(uid);
    };
    const auto pad = v64(p.padding()), str = v64(p.stride()), dil = v64(p.dilation());
    if (d == Direction::Forward) {
      auto X = g->tensor(attrs("x", p.x(), kX));
      auto W = g->tensor(attrs("w", p.w(), kW));
      auto Y = g->conv_fprop(X, W, fe::graph::Conv_fprop_attributes()
                                       .set_padding(pad).set_stride(str).set_dilation(dil));
      Y->set_output(true).set_dim(v64(p.y().sizes())).set_stride(v64(p.y().strides()))
          .set_uid(kY);
    } else if (d == Direction::BackwardData) {
      auto DY = g->tensor(attrs("dy", p.y(), kY));
      auto W = g->tensor(attrs("w", p.w(), kW));
      auto DX = g->conv_dgrad(DY, W, fe::graph::Conv_dgrad_attributes()
                                         .set_padding(pad).set_stride(str).set_dilation(dil));
      DX->set_output(true).set_dim(v64(p.x().sizes())).set_stride(v64(p.x().strides()))
          .set_uid(kX);
    } else {
      auto DY = g->tensor(attrs("dy", p.y(), kY));
      auto X = g->tensor(attrs("x", p.x(), kX));
      auto DW = g->conv_wgrad(DY, X, fe::graph::Conv_wgrad_attributes()
                                         .set_padding(pad).set_stride(str).set_dilation(dil));
      DW->set_output(true).set_dim(v64(p.w().sizes())).set_stride(v64(p.w().strides()))
          .set_uid(kW);
    }
    auto st = g->validate();
    TORCH_CHECK(st.is_good(), "cudnn-frontend rejected the graph of ", ctx, ": ", err(st));
    st = g->build_operation_graph(h);
    TORCH_CHECK(st.is_good(), "cudnn-frontend could not build the operation graph of ", ctx,
                ": ", err(st));
    return g;
  }
};

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
  auto st = impl_->graph->get_engine_count(n);
  TORCH_CHECK(st.is_good(), "engine count query failed for ", impl_->ctx, ": ", err(st));
  return n;
}

EngineInfo EngineSearch::engine_info(int64_t engine) {
  EngineInfo info;
  info.engine = engine;
  std::vector<fe::Knob> knobs;
  auto st = impl_->graph->get_knobs_for_engine(engine, knobs);
  if (!st.is_good()) {
    info.status = err(st);
    return info;
  }
  info.status = "OK";
  for (const auto& k : knobs) {
    info.knobs.push_back({static_cast<int64_t>(k.type), k.minValue, k.maxValue,
                          k.stride > 0 ? k.stride : 1});
  }
  return info;
}

std::vector<ConfigRef> EngineSearch::heuristics(const std::string& mode) {
  TORCH_CHECK_VALUE(mode == "A" || mode == "B" || mode == "FALLBACK",
                    "heuristic mode must be A, B or FALLBACK, not ", mode);
  const fe::HeurMode_t m = mode == "A"   ? fe::HeurMode_t::A
                           : mode == "B" ? fe::HeurMode_t::B
                                         : fe::HeurMode_t::FALLBACK;
  auto g = impl_->make_graph();  // a fresh graph: its plan list holds only this mode's
  std::vector<ConfigRef> out;
  if (!g->create_execution_plans({m}).is_good()) return out;
  for (int64_t i = 0; i < g->get_execution_plan_count(); ++i) {
    ConfigRef c;
    std::unordered_map<fe::KnobType_t, int64_t> knobs;
    if (!g->get_engine_and_knobs_at_index(i, c.engine, knobs).is_good()) continue;
    for (const auto& kv : knobs) c.knobs.emplace_back(static_cast<int64_t>(kv.first), kv.second);
    std::sort(c.knobs.begin(), c.knobs.end());
    g->get_plan_name_at_index(i, c.name);
    out.push_back(std::move(c));
  }
  return out;
}

ConfigResult EngineSearch::run(int64_t engine, const Knobs& knobs, bool time,
                               const TimingOptions& opt) {
  Impl& I = *impl_;
  c10::cuda::CUDAGuard guard(I.p.x().device());
  ConfigResult r;
  r.engine = engine;
  r.knobs = knobs;
  std::unordered_map<fe::KnobType_t, int64_t> km;
  for (const auto& kv : knobs) km[static_cast<fe::KnobType_t>(kv.first)] = kv.second;
  const int64_t before = I.graph->get_execution_plan_count();
  auto st = I.graph->create_execution_plan(engine, km);
  if (!st.is_good() || I.graph->get_execution_plan_count() <= before) {
    r.status = "config rejected";
    r.message = err(st);
    return r;
  }
  const int64_t idx = I.graph->get_execution_plan_count() - 1;
  r.plan_index = idx;
  I.graph->get_plan_name_at_index(idx, r.name);
  for (auto n : I.graph->numeric_notes_at(idx)) {
    if (n != fe::NumericalNote_t::NOT_SET) r.numeric_notes.push_back(fe_name(n));
  }
  std::vector<fe::BehaviorNote_t> bn;
  if (I.graph->get_behavior_notes_for_plan_at_index(idx, bn).is_good()) {
    for (auto n : bn) r.behavior_notes.push_back(fe_name(n));
  }
  const auto t0 = std::chrono::steady_clock::now();
  st = I.graph->build_plan_at_index(I.h, idx);
  r.build_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!st.is_good()) {
    r.status = "build failed";
    r.message = err(st);
    return r;
  }
  int64_t ws_bytes = 0;
  c10::DataPtr ws;
  st = I.workspace(idx, &ws_bytes, &ws);
  if (!st.is_good()) {
    r.status = "workspace query failed";
    r.message = err(st);
    return r;
  }
  r.workspace_bytes = ws_bytes;
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
  if (launch() != CUDNN_STATUS_SUCCESS) {
    r.status = "execute failed";
    r.message = last;
    return r;
  }
  r.status = "OK";
  if (time) {
    try {
      r.timing = time_launches(h, c10::cuda::getCurrentCUDAStream().stream(), I.p.x().device(),
                               launch, opt, ctx);
      r.timed = true;
    } catch (const std::exception& e) {
      r.status = "timing failed";
      r.message = std::string(e.what()).substr(0, 400) + (last.empty() ? "" : " | " + last);
    }
  }
  return r;
}

void EngineSearch::execute(int64_t plan_index) {
  Impl& I = *impl_;
  c10::cuda::CUDAGuard guard(I.p.x().device());
  int64_t ws_bytes = 0;
  c10::DataPtr ws;
  auto st = I.workspace(plan_index, &ws_bytes, &ws);
  TORCH_CHECK(st.is_good(), "plan ", plan_index, ": ", err(st));
  st = I.graph->execute_plan_at_index(current_handle(), I.pack, ws.get(), plan_index);
  TORCH_CHECK(st.is_good(), "executing plan ", plan_index, " failed: ", err(st));
}

bool frontend_available() { return true; }

#else  // built without cudnn-frontend

struct EngineSearch::Impl {};

EngineSearch::EngineSearch(Direction, Problem&) {
  TORCH_CHECK(false,
              "cudnn_explorer was built without cudnn-frontend's headers, so it cannot list "
              "engine configs; pip install nvidia-cudnn-frontend and rebuild the extension");
}
EngineSearch::~EngineSearch() = default;
int64_t EngineSearch::engine_count() const { return 0; }
EngineInfo EngineSearch::engine_info(int64_t) { return {}; }
std::vector<ConfigRef> EngineSearch::heuristics(const std::string&) { return {}; }
ConfigResult EngineSearch::run(int64_t, const Knobs&, bool, const TimingOptions&) { return {}; }
void EngineSearch::execute(int64_t) {}
bool frontend_available() { return false; }

#endif

}  // namespace cudnn_explorer
