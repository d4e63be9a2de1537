// Python bindings only: every function and record lives in its own file.
#include <torch/extension.h>
#include <pybind11/stl.h>

#include "engines.h"
#include "find.h"
#include "graph_kernels.h"
#include "info.h"
#include "pinned.h"
#include "timing.h"

namespace ce = cudnn_explorer;
namespace py = pybind11;

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "cudnn_explorer native module: legacy cuDNN algorithms and cuDNN 9 engine configs";
  // Note [one native error path] (common.h): one Python type with kind, status, call.
  static py::exception<ce::NativeError> native_error(m, "NativeError");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ce::NativeError& e) {
      py::object err = py::handle(native_error.ptr())(py::str(e.what()));
      err.attr("kind") = py::str(e.kind);
      err.attr("status") = py::str(e.status);
      err.attr("call") = py::str(e.call);
      PyErr_SetObject(native_error.ptr(), err.ptr());
    }
  });

  py::class_<ce::Problem>(m, "Problem")
      .def(py::init<const at::Tensor&, const at::Tensor&, const at::Tensor&, std::vector<int>,
                    std::vector<int>, std::vector<int>, int, const std::string&>(),
           py::arg("x"), py::arg("w"), py::arg("y"), py::arg("padding"), py::arg("stride"),
           py::arg("dilation"), py::arg("groups"), py::arg("math_type"))
      .def("describe", &ce::Problem::describe);

  py::class_<ce::AlgoPerf>(m, "AlgoPerf")
      .def_readonly("algo", &ce::AlgoPerf::algo)
      .def_readonly("algo_name", &ce::AlgoPerf::algo_name)
      .def_readonly("status_code", &ce::AlgoPerf::status_code)
      .def_readonly("status", &ce::AlgoPerf::status)
      .def_readonly("time_ms", &ce::AlgoPerf::time_ms)
      .def_readonly("memory_bytes", &ce::AlgoPerf::memory_bytes)
      .def_readonly("deterministic", &ce::AlgoPerf::deterministic)
      .def_readonly("math_type", &ce::AlgoPerf::math_type)
      .def_readonly("found_under", &ce::AlgoPerf::found_under);

  py::class_<ce::WorkspaceQuery>(m, "WorkspaceQuery")
      .def_readonly("algo", &ce::WorkspaceQuery::algo)
      .def_readonly("algo_name", &ce::WorkspaceQuery::algo_name)
      .def_readonly("math_type", &ce::WorkspaceQuery::math_type)
      .def_readonly("status_code", &ce::WorkspaceQuery::status_code)
      .def_readonly("status", &ce::WorkspaceQuery::status)
      .def_readonly("bytes", &ce::WorkspaceQuery::bytes);

  py::class_<ce::FindReport>(m, "FindReport")
      .def_readonly("direction", &ce::FindReport::direction)
      .def_readonly("math_type", &ce::FindReport::math_type)
      .def_readonly("searched", &ce::FindReport::searched)
      .def_readonly("find_errors", &ce::FindReport::find_errors)
      .def_readonly("find", &ce::FindReport::find)
      .def_readonly("heuristics", &ce::FindReport::heuristics)
      .def_readonly("workspace", &ce::FindReport::workspace)
      .def_readonly("workspace_needed", &ce::FindReport::workspace_needed)
      .def_readonly("workspace_given", &ce::FindReport::workspace_given)
      .def_readonly("workspace_free", &ce::FindReport::workspace_free)
      .def_readonly("requested", &ce::FindReport::requested)
      .def_readonly("returned", &ce::FindReport::returned)
      .def_readonly("find_wall_ms", &ce::FindReport::find_wall_ms)
      .def_readonly("find_wall_ms_all", &ce::FindReport::find_wall_ms_all)
      .def_readonly("problem", &ce::FindReport::problem);

  m.def("find_algorithms",
        [](const std::string& d, ce::Problem& p, int64_t cap,
           const std::vector<std::string>& math_types) {
          return ce::find_algorithms(ce::direction_from_name(d), p, cap, math_types);
        },
        py::arg("direction"), py::arg("problem"), py::arg("max_workspace_bytes"),
        py::arg("math_types"));
  m.def("workspace_size",
        [](const std::string& d, ce::Problem& p, int algo, const std::string& math) {
          return ce::workspace_size(ce::direction_from_name(d), p, algo, math);
        },
        py::arg("direction"), py::arg("problem"), py::arg("algo"), py::arg("math_type"));
  m.def("run_algorithm",
        [](const std::string& d, ce::Problem& p, int algo, const std::string& math) {
          ce::run_algorithm(ce::direction_from_name(d), p, algo, math);
        },
        py::arg("direction"), py::arg("problem"), py::arg("algo"), py::arg("math_type"));
  py::class_<ce::TimingOptions>(m, "TimingOptions")
      .def(py::init<>())
      .def_readwrite("budget_ms", &ce::TimingOptions::budget_ms)
      .def_readwrite("warmup_ms", &ce::TimingOptions::warmup_ms)
      .def_readwrite("sample_target_ms", &ce::TimingOptions::sample_target_ms)
      .def_readwrite("flush_l2", &ce::TimingOptions::flush_l2)
      .def_readwrite("use_graph", &ce::TimingOptions::use_graph)
      .def_readwrite("eager_budget_ms", &ce::TimingOptions::eager_budget_ms)
      .def_readwrite("min_samples", &ce::TimingOptions::min_samples)
      .def_readwrite("max_samples", &ce::TimingOptions::max_samples)
      .def_readwrite("cutoff_ms", &ce::TimingOptions::cutoff_ms)
      .def_readwrite("confirm_cut", &ce::TimingOptions::confirm_cut)
      .def_readwrite("kernels", &ce::TimingOptions::kernels)
      .def_readwrite("batched", &ce::TimingOptions::batched);

  py::class_<ce::TimingResult>(m, "TimingResult")
      .def_readonly("per_launch_ms", &ce::TimingResult::per_launch_ms)
      .def_readonly("launches_per_sample", &ce::TimingResult::launches_per_sample)
      .def_readonly("warmup_launches", &ce::TimingResult::warmup_launches)
      .def_readonly("method", &ce::TimingResult::method)
      .def_readonly("note", &ce::TimingResult::note)
      .def_readonly("workspace_bytes", &ce::TimingResult::workspace_bytes)
      .def_readonly("estimate_ms", &ce::TimingResult::estimate_ms)
      .def_readonly("first_ms", &ce::TimingResult::first_ms)
      .def_readonly("first_host_ms", &ce::TimingResult::first_host_ms)
      .def_readonly("first_would_cut", &ce::TimingResult::first_would_cut)
      .def_readonly("eager_per_call_ms", &ce::TimingResult::eager_per_call_ms)
      .def_readonly("eager_calls_per_sample", &ce::TimingResult::eager_calls_per_sample)
      .def_readonly("kernels", &ce::TimingResult::kernels)
      .def_readonly("kernels_read", &ce::TimingResult::kernels_read);

  m.def("time_algorithm",
        [](const std::string& d, ce::Problem& p, int algo, const std::string& math,
           const ce::TimingOptions& opt) {
          py::gil_scoped_release release;  // long GPU loop: let other Python threads run
          return ce::time_algorithm(ce::direction_from_name(d), p, algo, math, opt);
        },
        py::arg("direction"), py::arg("problem"), py::arg("algo"), py::arg("math_type"),
        py::arg("options"));
  py::class_<ce::KnobSpec>(m, "KnobSpec")
      .def_readonly("type", &ce::KnobSpec::type)
      .def_readonly("min_value", &ce::KnobSpec::min_value)
      .def_readonly("max_value", &ce::KnobSpec::max_value)
      .def_readonly("stride", &ce::KnobSpec::stride);
  py::class_<ce::EngineInfo>(m, "EngineInfo")
      .def_readonly("engine", &ce::EngineInfo::engine)
      .def_readonly("status", &ce::EngineInfo::status)
      .def_readonly("knobs", &ce::EngineInfo::knobs);
  py::class_<ce::ConfigResult>(m, "ConfigResult")
      .def_readonly("engine", &ce::ConfigResult::engine)
      .def_readonly("knobs", &ce::ConfigResult::knobs)
      .def_readonly("name", &ce::ConfigResult::name)
      .def_readonly("plan_index", &ce::ConfigResult::plan_index)
      .def_readonly("status", &ce::ConfigResult::status)
      .def_readonly("message", &ce::ConfigResult::message)
      .def_readonly("numeric_notes", &ce::ConfigResult::numeric_notes)
      .def_readonly("behavior_notes", &ce::ConfigResult::behavior_notes)
      .def_readonly("workspace_bytes", &ce::ConfigResult::workspace_bytes)
      .def_readonly("build_ms", &ce::ConfigResult::build_ms)
      .def_readonly("timed", &ce::ConfigResult::timed)
      .def_readonly("timing", &ce::ConfigResult::timing);
  py::class_<ce::EngineSearch>(m, "EngineSearch")
      .def(py::init([](const std::string& d, ce::Problem& p) {
             return std::make_unique<ce::EngineSearch>(ce::direction_from_name(d), p);
           }),
           py::arg("direction"), py::arg("problem"), py::keep_alive<1, 3>())
      .def("engine_count", &ce::EngineSearch::engine_count)
      .def("engine_info", &ce::EngineSearch::engine_info)
      .def("heuristics", &ce::EngineSearch::heuristics)
      .def("build",
           [](ce::EngineSearch& s, int64_t engine, const ce::Knobs& knobs) {
             py::gil_scoped_release release;
             return s.build(engine, knobs);
           },
           py::arg("engine"), py::arg("knobs"))
      .def("measure",
           [](ce::EngineSearch& s, const ce::ConfigResult& built, bool time,
              const ce::TimingOptions& opt) {
             py::gil_scoped_release release;
             return s.measure(built, time, opt);
           },
           py::arg("built"), py::arg("time"), py::arg("options"))
      .def("run",
           [](ce::EngineSearch& s, int64_t engine, const ce::Knobs& knobs, bool time,
              const ce::TimingOptions& opt) {
             py::gil_scoped_release release;
             return s.run(engine, knobs, time, opt);
           },
           py::arg("engine"), py::arg("knobs"), py::arg("time"), py::arg("options"))
      .def("execute", &ce::EngineSearch::execute, py::arg("plan_index"));
  m.def("frontend_available", &ce::frontend_available);
  py::class_<ce::TargetPlan>(m, "TargetPlan")
      .def_readonly("name", &ce::TargetPlan::name)
      .def_readonly("numeric_notes", &ce::TargetPlan::numeric_notes)
      .def_readonly("behavior_notes", &ce::TargetPlan::behavior_notes);
  m.def("deviceless_heuristics",
        [](const std::string& direction, const std::string& dtype,
           const std::vector<int64_t>& x_dims, const std::vector<int64_t>& x_strides,
           const std::vector<int64_t>& w_dims, const std::vector<int64_t>& w_strides,
           const std::vector<int64_t>& y_dims, const std::vector<int64_t>& y_strides,
           const std::vector<int64_t>& padding, const std::vector<int64_t>& stride,
           const std::vector<int64_t>& dilation, const std::string& device_json,
           const std::string& mode) {
          ce::TargetProblem tp{direction, dtype, x_dims, x_strides, w_dims, w_strides,
                               y_dims, y_strides, padding, stride, dilation};
          return ce::deviceless_heuristics(tp, device_json, mode);
        });
  m.def("device_properties_json", &ce::device_properties_json, py::arg("device"));
  m.def("algo_name",
        [](const std::string& d, int algo) {
          return ce::algo_name(ce::direction_from_name(d), algo);
        });
  py::class_<ce::PlanSpec>(m, "PlanSpec")
      .def(py::init<>())
      .def_readwrite("key", &ce::PlanSpec::key)
      .def_readwrite("engine", &ce::PlanSpec::engine)
      .def_readwrite("knobs", &ce::PlanSpec::knobs)
      .def_readwrite("tag", &ce::PlanSpec::tag)
      .def_readwrite("description", &ce::PlanSpec::description);
  py::class_<ce::PinStat>(m, "PinStat")
      .def_readonly("key", &ce::PinStat::key)
      .def_readonly("description", &ce::PinStat::description)
      .def_readonly("covered", &ce::PinStat::covered)
      .def_readonly("tag", &ce::PinStat::tag)
      .def_readonly("ran", &ce::PinStat::ran)
      .def_readonly("pinned_calls", &ce::PinStat::pinned_calls)
      .def_readonly("fallback_calls", &ce::PinStat::fallback_calls)
      .def_readonly("reason", &ce::PinStat::reason)
      .def_readonly("builds", &ce::PinStat::builds)
      .def_readonly("build_ms", &ce::PinStat::build_ms)
      .def_readonly("restored", &ce::PinStat::restored)
      .def_readonly("waited_ms", &ce::PinStat::waited_ms)
      .def_readonly("kept_error", &ce::PinStat::kept_error)
      .def_readonly("runtime_compiled", &ce::PinStat::runtime_compiled);
  // a kept plan's bytes cross as Python bytes, not str (they are UBJSON, not UTF-8)
  m.def("build_ahead",
        [](int64_t device, int64_t threads, const std::vector<py::tuple>& kept) {
          std::vector<ce::KeptPlan> plans;
          for (const auto& k : kept) {
            ce::KeptPlan p;
            p.key = k[0].cast<std::vector<int64_t>>();
            p.tag = k[1].cast<std::string>();
            p.blob = std::string(k[2].cast<py::bytes>());
            plans.push_back(std::move(p));
          }
          py::gil_scoped_release release;
          ce::build_ahead(device, threads, plans);
        },
        py::arg("device"), py::arg("threads"), py::arg("kept"));
  m.def("wait_ahead", &ce::wait_ahead, py::call_guard<py::gil_scoped_release>());
  m.def("kept_plans", [] {
    std::vector<ce::KeptPlan> plans;
    {
      py::gil_scoped_release release;
      plans = ce::kept_plans();
    }
    py::list out;
    for (const auto& p : plans) {
      out.append(py::make_tuple(p.key, p.tag, py::bytes(p.blob), p.runtime_compiled));
    }
    return out;
  });
  m.def("load_plans", &ce::load_plans, py::arg("specs"),
        py::call_guard<py::gil_scoped_release>());
  m.def("loaded_plan_count", &ce::loaded_plan_count);
  m.def("set_strict", &ce::set_strict, py::arg("on"));
  m.def("strict", &ce::strict);
  m.def("retired_plan_count", &ce::retired_plan_count);
  m.def("pin_stats", &ce::pin_stats);
  m.def("reset_pin_counts", &ce::reset_pin_counts);
  m.def("describe_plan_key", &ce::describe_plan_key, py::arg("key"));
  // Note [eager entry's warnings and GIL]: as ATen's own bindings, the call runs without
  // the GIL (a plan build may compile an engine for seconds) and under PyTorch's warning
  // handler, so that a fallback's c10 warning reaches Python's warnings module (and
  // warnings.simplefilter("error") turns it into an exception) as a backward's does. The
  // handler raises that exception from its destructor: it is left before the result is
  // returned (torch's wrap_pybind_function returns from inside its scope, and a result
  // already made when the destructor throws corrupted the heap with GCC 12).
  m.def("conv", [](const at::Tensor& input, const at::Tensor& weight,
                   const std::optional<at::Tensor>& bias, const std::vector<int64_t>& stride,
                   const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation,
                   bool transposed, const std::vector<int64_t>& output_padding,
                   int64_t groups) {
    at::Tensor out;
    try {
      torch::PyWarningHandler warnings;
      try {
        py::gil_scoped_release no_gil;
        out = ce::call_conv(input, weight, bias, stride, padding, dilation, transposed,
                            output_padding, groups);
      } catch (...) {
        warnings.set_in_exception();
        throw;
      }
    } catch (python_error& e) {  // a warning made an error by Python's filters
      e.restore();
      throw py::error_already_set();
    }
    return out;
  });
  m.def("conv_keys",
        [](const at::Tensor& input, const at::Tensor& weight, const std::vector<int64_t>& stride,
           const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation,
           bool transposed, const std::vector<int64_t>& output_padding, int64_t groups) {
          return ce::conv_keys(input, weight, stride, padding, dilation, transposed,
                               output_padding, groups);
        },
        py::arg("input"), py::arg("weight"), py::arg("stride"), py::arg("padding"),
        py::arg("dilation"), py::arg("transposed"), py::arg("output_padding"),
        py::arg("groups"));
  m.def("graph_kernel_names", &ce::graph_kernel_names, py::arg("graph"));
  m.def("build_info", &ce::build_info);
  m.def("runtime_info", &ce::runtime_info);
}
