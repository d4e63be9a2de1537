// The cudnn-frontend graph of one convolution direction, shared by the engine search
// (engines.cpp) and the pinned convolution op (pinned_plans.cpp). Include only from those
// translation units: cudnn-frontend's headers are heavy.
#pragma once

#ifdef CE_HAVE_FRONTEND
#include <cudnn_frontend.h>

#include "common.h"
#include "engines.h"
#include "problem.h"

#include <string>
#include <vector>

namespace cudnn_explorer {
namespace fe = cudnn_frontend;

inline namespace frontend_graph {

// A frontend enum's name from cudnn-frontend's own enum <-> string table (the names it
// logs, e.g. "TENSOR_CORE", "RUNTIME_COMPILATION"); its number if the table lacks it.
template <typename Enum>
inline std::string fe_name(Enum n) {
  nlohmann::json j = n;
  return j.is_string() ? j.get<std::string>() : std::to_string(static_cast<int>(n));
}

// Note [one native error path]: a failed cudnn-frontend call becomes a NativeError of
// kind "frontend" whose status is the error code's name.
inline void fe_check(const fe::error_t& st, const std::string& what) {
  if (!st.is_good()) {
    throw_native("frontend", fe_name(st.code), what.c_str(),
                 what + " failed: " + fe_name(st.code) + ": " + st.err_msg);
  }
}

// Note [backend knob types]: cudnn-frontend's graph API renumbers knob types into its own
// KnobType_t and maps every backend type it does not mirror (SPLIT_K, USE_TEX, KBLOCK,
// LDGA, LDGB, CHUNK_K, ...) to NOT_SET, so Graph::get_knobs_for_engine and
// Graph::create_execution_plan(engine, knobs) can neither name nor set every knob, and
// their numbers are not the "k<type>" of the plan tags PyTorch logs (seen on the H200:
// our "k10=0" was the tag's "k18=0", IDX_MODE). This subclass queries knobs and builds
// engine configs with cuDNN's own cudnnBackendKnobType_t values, using the frontend's
// descriptor helpers, and hands each config to the graph's plan list like
// create_execution_plan does, so that building, notes, naming and execution stay the
// frontend's.
class Graph : public fe::graph::Graph {
 public:
  // Per-plan numerical notes sit in a protected member (the frontend has a public getter
  // for behaviour notes only).
  std::vector<fe::NumericalNote_t> numeric_notes_at(int64_t i) const {
    if (i < 0 || i >= static_cast<int64_t>(plans.numeric_notes.size())) return {};
    return plans.numeric_notes[static_cast<size_t>(i)];
  }

  // The numerical notes of plan 0: the frontend keeps them per config for a plan it
  // built, and only on the plan itself for one it deserialized (Note [kept plans]).
  std::vector<fe::NumericalNote_t> plan_notes() const {
    auto notes = numeric_notes_at(0);
    if (!notes.empty() || plans.execution_plans.empty() || !plans.execution_plans[0]) {
      return notes;
    }
    for (auto n : plans.execution_plans[0]->getAllNumericNotes()) {
      switch (n) {
        case CUDNN_NUMERICAL_NOTE_TENSOR_CORE:
          notes.push_back(fe::NumericalNote_t::TENSOR_CORE);
          break;
        case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS:
          notes.push_back(fe::NumericalNote_t::DOWN_CONVERT_INPUTS);
          break;
        case CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC:
          notes.push_back(fe::NumericalNote_t::NONDETERMINISTIC);
          break;
        default:
          break;
      }
    }
    return notes;
  }

  // The tag cuDNN gives plan 0 ("eng70_k2=4_k18=0"), "" before it is built.
  std::string plan_tag() const {
    if (plans.execution_plans.empty() || !plans.execution_plans[0]) return "";
    return plans.execution_plans[0]->getTag();
  }

  // The knobs of one engine with backend knob types; throws when cuDNN refuses the engine.
  std::vector<KnobSpec> knobs_of(int64_t engine, const std::string& ctx) const {
    fe::detail::backend_descriptor eng(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    make_engine(eng, engine, ctx);
    std::vector<fe::detail::backend_descriptor> info;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (int i = 0; i < CUDNN_KNOB_TYPE_COUNTS; ++i) {
      info.emplace_back(CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR);
      raw.push_back(info.back().get_ptr());
    }
    int64_t n = 0;
    CE_CUDNN_CHECK(cudnnBackendGetAttribute(eng.get_ptr(), CUDNN_ATTR_ENGINE_KNOB_INFO,
                                            CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                            CUDNN_KNOB_TYPE_COUNTS, &n, raw.data()),
                   ctx);
    std::vector<KnobSpec> out;
    for (int64_t i = 0; i < n; ++i) {
      auto get = [&](cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, void* v) {
        CE_CUDNN_CHECK(cudnnBackendGetAttribute(raw[i], a, t, 1, nullptr, v), ctx);
      };
      cudnnBackendKnobType_t type;
      KnobSpec k;
      get(CUDNN_ATTR_KNOB_INFO_TYPE, CUDNN_TYPE_KNOB_TYPE, &type);
      get(CUDNN_ATTR_KNOB_INFO_MINIMUM_VALUE, CUDNN_TYPE_INT64, &k.min_value);
      get(CUDNN_ATTR_KNOB_INFO_MAXIMUM_VALUE, CUDNN_TYPE_INT64, &k.max_value);
      get(CUDNN_ATTR_KNOB_INFO_STRIDE, CUDNN_TYPE_INT64, &k.stride);
      k.type = static_cast<int64_t>(type);
      k.stride = k.stride > 0 ? k.stride : 1;
      out.push_back(k);
    }
    return out;
  }

  // Appends the config (engine, knobs with backend types) to the plan list; throws
  // CudnnError (e.g. NOT_SUPPORTED for an invalid knob combination) when cuDNN refuses it.
  void add_config(int64_t engine, const Knobs& knobs, const std::string& ctx) {
    fe::detail::backend_descriptor eng(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    make_engine(eng, engine, ctx);
    std::vector<fe::detail::backend_descriptor> choices;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (const auto& kv : knobs) {
      choices.emplace_back(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
      cudnnBackendDescriptor_t c = choices.back().get_ptr();
      const auto type = static_cast<cudnnBackendKnobType_t>(kv.first);
      const int64_t value = kv.second;
      CE_CUDNN_CHECK(cudnnBackendSetAttribute(c, CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE,
                                              CUDNN_TYPE_KNOB_TYPE, 1, &type), ctx);
      CE_CUDNN_CHECK(cudnnBackendSetAttribute(c, CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE,
                                              CUDNN_TYPE_INT64, 1, &value), ctx);
      CE_CUDNN_CHECK(cudnnBackendFinalize(c), ctx);
      raw.push_back(c);
    }
    auto cfg = fe::make_shared_backend_pointer(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    cudnnBackendDescriptor_t c = cfg->get_backend_descriptor();
    cudnnBackendDescriptor_t e = eng.get_ptr();
    CE_CUDNN_CHECK(cudnnBackendSetAttribute(c, CUDNN_ATTR_ENGINECFG_ENGINE,
                                            CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &e), ctx);
    CE_CUDNN_CHECK(cudnnBackendSetAttribute(c, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                                            CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                            static_cast<int64_t>(raw.size()), raw.data()), ctx);
    CE_CUDNN_CHECK(cudnnBackendFinalize(c), ctx);
    plans.enqueue_engine_configs({cfg});
    fe_check(plans.query_properties(), "querying the plan properties of " + ctx);
  }

 private:
  void make_engine(fe::detail::backend_descriptor& eng, int64_t engine,
                   const std::string& ctx) const {
    CE_CUDNN_CHECK(eng.get_status(), "creating an engine descriptor for " + ctx);
    fe_check(fe::detail::create_engine(eng, engine, operation_graph->get_raw_desc()),
             cat("engine ", engine, " of ", ctx));
  }
};

inline fe::DataType_t fe_type(cudnnDataType_t t) {
  switch (t) {
    case CUDNN_DATA_HALF: return fe::DataType_t::HALF;
    case CUDNN_DATA_BFLOAT16: return fe::DataType_t::BFLOAT16;
    case CUDNN_DATA_DOUBLE: return fe::DataType_t::DOUBLE;
    default: return fe::DataType_t::FLOAT;
  }
}


constexpr int64_t kX = 1, kW = 2, kY = 3;  // tensor uids in every variant pack

// The convolution of direction d in g, from its tensors' dims and strides (uids kX, kW,
// kY), data type io, accumulating in float (double for double): the one graph both the
// engine search on the device and the deviceless heuristics build.
inline void add_conv(Graph& g, Direction d, fe::DataType_t io, const TargetProblem& tp) {
  const fe::DataType_t acc = io == fe::DataType_t::DOUBLE ? io : fe::DataType_t::FLOAT;
  g.set_io_data_type(io).set_intermediate_data_type(acc).set_compute_data_type(acc);
  // Note [pointer alignment]: the frontend tells cuDNN every tensor is 16-byte aligned
  // unless told otherwise, and cuDNN may pick vectorised loads on that promise; a tensor
  // at a smaller alignment (a view at an odd offset) needs a graph that says so.
  auto align = [&tp](int64_t uid) {
    return tp.alignment.size() == 3 ? tp.alignment[static_cast<size_t>(uid - 1)]
                                    : fe::graph::Tensor_attributes::default_alignment;
  };
  auto attrs = [&align](const char* name, const std::vector<int64_t>& dims,
                        const std::vector<int64_t>& strides, int64_t uid) {
    return fe::graph::Tensor_attributes().set_name(name).set_dim(dims).set_stride(strides)
        .set_uid(uid).set_alignment(align(uid));
  };
  const auto x = attrs("x", tp.x_dims, tp.x_strides, kX);
  const auto w = attrs("w", tp.w_dims, tp.w_strides, kW);
  const auto y = attrs("dy", tp.y_dims, tp.y_strides, kY);
  // the direction's output: the graph's result, given its tensor's dims, strides and uid
  auto output = [](const auto& t, const fe::graph::Tensor_attributes& as) {
    t->set_output(true).set_dim(as.get_dim()).set_stride(as.get_stride())
        .set_uid(as.get_uid()).set_alignment(as.get_alignment());
  };
  if (d == Direction::Forward) {
    auto X = g.tensor(x);
    auto W = g.tensor(w);
    output(g.conv_fprop(X, W, fe::graph::Conv_fprop_attributes().set_padding(tp.padding)
                                  .set_stride(tp.stride).set_dilation(tp.dilation)), y);
  } else if (d == Direction::BackwardData) {
    auto DY = g.tensor(y);
    auto W = g.tensor(w);
    output(g.conv_dgrad(DY, W, fe::graph::Conv_dgrad_attributes().set_padding(tp.padding)
                                   .set_stride(tp.stride).set_dilation(tp.dilation)), x);
  } else {
    auto DY = g.tensor(y);
    auto X = g.tensor(x);
    output(g.conv_wgrad(DY, X, fe::graph::Conv_wgrad_attributes().set_padding(tp.padding)
                                   .set_stride(tp.stride).set_dilation(tp.dilation)), w);
  }
}


}  // namespace frontend_graph
}  // namespace cudnn_explorer
#endif  // CE_HAVE_FRONTEND
