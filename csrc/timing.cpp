#include "timing.h"

#include "directions.h"
#include "find.h"
#include "graph_kernels.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <utility>

namespace cudnn_explorer {

namespace {

// RAII CUDA event (timing enabled).
class Event {
 public:
  Event() { CE_CUDA_CHECK(cudaEventCreate(&e_)); }
  ~Event() { cudaEventDestroy(e_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(cudaStream_t s) { CE_CUDA_CHECK(cudaEventRecord(e_, s)); }
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

double elapsed_ms(const Event& a, const Event& b) {
  float ms = 0.f;
  CE_CUDA_CHECK(cudaEventElapsedTime(&ms, a.get(), b.get()));
  return static_cast<double>(ms);
}

struct GraphDeleter {
  void operator()(cudaGraphExec_t g) const { cudaGraphExecDestroy(g); }
};
using GraphExec = std::unique_ptr<std::remove_pointer<cudaGraphExec_t>::type, GraphDeleter>;

// Restores PyTorch's stream on the handle when a capture scope ends.
class HandleStreamScope {
 public:
  HandleStreamScope(cudnnHandle_t h, cudaStream_t restore) : h_(h), restore_(restore) {}
  ~HandleStreamScope() { cudnnSetStream(h_, restore_); }

 private:
  cudnnHandle_t h_;
  cudaStream_t restore_;
};

// Times any launch (a legacy algorithm, an engine-config plan) the same way.
// ``x`` rounded up, within [lo, hi]: a count of launches or samples.
int ceil_within(double x, int lo, int hi) {
  return static_cast<int>(
      std::clamp(std::ceil(x), static_cast<double>(lo), static_cast<double>(hi)));
}

struct Timer {
  cudnnHandle_t h;
  cudaStream_t stream;
  c10::Device device;
  const Launch& run;
  const TimingOptions& opt;
  std::string ctx;

  void launch() const {
    cudnnStatus_t st = run();
    if (st != CUDNN_STATUS_SUCCESS) throw_cudnn_error(st, "launch", ctx);
  }

  // The first launch between events (time_launch), the host's time to issue it into
  // ``host_ms``.
  double time_first(double* host_ms) const {
    cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
    const double ms = time_launch(stream, run, &st, host_ms);
    if (st != CUDNN_STATUS_SUCCESS) throw_cudnn_error(st, "launch", ctx);
    return ms;
  }

  double time_eager(int n) const {  // events around n back-to-back launches
    Event a, b;
    a.record(stream);
    for (int i = 0; i < n; ++i) launch();
    b.record(stream);
    CE_CUDA_CHECK(cudaEventSynchronize(b.get()));
    return elapsed_ms(a, b);
  }

  // Note [graph capture]: cuDNN calls are captured on a side stream with the handle
  // bound to it; if any call is not capturable the capture is abandoned and we fall
  // back to eager launches, saying why in the result's note.
  // ``names``: read the graph's kernels into it; ``instantiate`` false: only that (the
  // graph is never launched), so a capture in relaxed mode may serve.
  GraphExec capture(int n, std::string* why, TimingResult* names = nullptr,
                    bool instantiate = true, bool relaxed = false) const {
    c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, device.index());
    Event ready;
    ready.record(stream);
    CE_CUDA_CHECK(cudaStreamWaitEvent(side.stream(), ready.get(), 0));
    HandleStreamScope restore(h, stream);
    CE_CUDNN_CHECK(cudnnSetStream(h, side.stream()), ctx);
    const cudaStreamCaptureMode mode =
        relaxed ? cudaStreamCaptureModeRelaxed : cudaStreamCaptureModeThreadLocal;
    if (cudaStreamBeginCapture(side.stream(), mode) != cudaSuccess) {
      *why = std::string("cudaStreamBeginCapture: ") + cudaGetErrorString(cudaGetLastError());
      return nullptr;
    }
    cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
    for (int i = 0; i < n && st == CUDNN_STATUS_SUCCESS; ++i) st = run();
    cudaGraph_t graph = nullptr;
    cudaError_t end = cudaStreamEndCapture(side.stream(), &graph);
    if (st != CUDNN_STATUS_SUCCESS || end != cudaSuccess || graph == nullptr) {
      *why = st != CUDNN_STATUS_SUCCESS ? "cuDNN call failed under capture: " + status_name(st)
                                        : std::string("capture invalidated: ") +
                                              cudaGetErrorString(end);
      if (graph) cudaGraphDestroy(graph);
      cudaGetLastError();  // clear the (non-sticky) capture error
      return nullptr;
    }
    if (names != nullptr) read_kernels(graph, n, *names);
    if (!instantiate) {
      cudaGraphDestroy(graph);
      return nullptr;
    }
    cudaGraphExec_t exec = nullptr;
    cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    if (inst != cudaSuccess) {
      *why = std::string("cudaGraphInstantiate: ") + cudaGetErrorString(inst);
      cudaGetLastError();
      return nullptr;
    }
    return GraphExec(exec);
  }

  // The kernels of one launch, from a graph of n launches (their node order).
  static void read_kernels(cudaGraph_t graph, int n, TimingResult& r) {
    auto names = graph_kernel_names(reinterpret_cast<std::uintptr_t>(graph));
    if (!names || n < 1 || names->size() % static_cast<size_t>(n) != 0) return;
    r.kernels.assign(names->begin(), names->begin() + names->size() / n);
    r.kernels_read = true;
  }

  // The kernels of a launch that was not captured for its timing (cut, eager, graphs
  // off): a capture of one launch, in relaxed mode, never instantiated nor launched. Some
  // plans cannot be captured to be replayed (e.g. engine configs with knob 3, USE_TEX,
  // fail under a thread-local capture), and a graph that is only read needs no more.
  // Earlier launches did any first-call work, so the capture holds what a launch runs.
  void name_kernels(TimingResult& r) const {
    if (!opt.kernels || r.kernels_read) return;
    std::string why;
    capture(1, &why, &r, /*instantiate=*/false, /*relaxed=*/true);
  }

  // The time of one warm launch, by the timing's method: a replay of a graph of one
  // launch (uploaded first, so the replay holds the launch alone), else an eager launch
  // between events. An eager launch's events also hold the host's time to issue it, which
  // some plans make long (FFT configs with knob 11 = 1 spend 0.26 s of host time per call
  // on an H200 host, for 36 ms of GPU time); a replay holds only the GPU's.
  double one_sample(TimingResult& r) const {
    if (opt.use_graph) {
      std::string why;
      GraphExec g = capture(1, &why, opt.kernels ? &r : nullptr);
      if (g) return replays_ms(g, 1);
    }
    return time_eager(1);
  }

  // Note [cut launches]: ``r`` ended after ``warm`` launches past the first (0: Note
  // [one-launch cut]), ``sample`` its one sample (method "cut").
  TimingResult cut(TimingResult r, double sample, int warm) const {
    r.method = "cut";
    r.per_launch_ms = {sample};
    r.launches_per_sample = 1;
    r.warmup_launches = warm;
    r.estimate_ms = sample;
    name_kernels(r);
    return r;
  }

  // Launches per sample at ``est`` ms a launch: enough for a sample's target GPU time.
  int launches_per_sample(double est) const {
    return ceil_within(opt.sample_target_ms / est, 1, 1000);
  }
  // Warm-up launches (or replays) of ``per`` ms each: enough for the warm-up's time.
  int warmups(double per) const { return ceil_within(opt.warmup_ms / per, 1, 1000); }

  // The GPU time of ``times`` back-to-back replays of ``g`` between two events, uploaded
  // first so that the events hold the replays alone.
  double replays_ms(const GraphExec& g, int times) const {
    CE_CUDA_CHECK(cudaGraphUpload(g.get(), stream));  // ordered before the events
    Event a, b;
    a.record(stream);
    for (int i = 0; i < times; ++i) CE_CUDA_CHECK(cudaGraphLaunch(g.get(), stream));
    b.record(stream);
    CE_CUDA_CHECK(cudaEventSynchronize(b.get()));
    return elapsed_ms(a, b);
  }

  // Calls per sample of the eager wall-clock loop: its minimum samples within its budget
  // at ``est`` ms of GPU time a call, at most a graph sample's ``k`` (before, always k:
  // five samples of k calls took at least five times sample_target_ms, and far more for
  // kernels shorter than their host cost, whatever eager_budget_ms said).
  int eager_calls(double est, int k) const {
    return ceil_within(opt.eager_budget_ms / (opt.min_samples * est), 1, k);
  }

  // Note [eager wall time]: what a caller that does not use CUDA graphs pays per call:
  // the host clock around k back-to-back launches, synchronised at the end. Each call's
  // host cost is included: when the host cannot queue launches as fast as the GPU runs
  // them, the GPU idles between kernels and the wall time per call exceeds the graph
  // median (seen on the H200 for kernels under ~20 us).
  void eager_wall(int k, TimingResult& r) const {
    using clock = std::chrono::steady_clock;
    r.eager_calls_per_sample = k;
    CE_CUDA_CHECK(cudaStreamSynchronize(stream));
    const auto t0 = clock::now();
    auto ms_since = [](clock::time_point t) {
      return std::chrono::duration<double, std::milli>(clock::now() - t).count();
    };
    while (static_cast<int>(r.eager_per_call_ms.size()) < opt.max_samples &&
           (static_cast<int>(r.eager_per_call_ms.size()) < opt.min_samples ||
            ms_since(t0) < opt.eager_budget_ms)) {
      const auto a = clock::now();
      for (int i = 0; i < k; ++i) launch();
      CE_CUDA_CHECK(cudaStreamSynchronize(stream));
      r.eager_per_call_ms.push_back(ms_since(a) / k);
    }
  }

  // Note [batched rounds]: a staged search's rounds only rank, and in the H200's
  // ResNet-50 sweep a round-1 config cost about 6 ms of wall time for about 3 ms of GPU
  // time: eager launches whose host cost exceeds their kernels' (the estimate and the
  // warm-up), and a synchronisation after every sample. Here the estimate is three replays
  // of a graph of one launch (GPU time only), the warm-up is replays of the sample's
  // graph, and the samples (their count fixed from the estimate: the budget's GPU time,
  // at least min_samples) are queued back to back with an event between each two, then
  // synchronised once; each sample is still the time between its two events. False when
  // the launch cannot be captured (the caller's path then says why).
  bool batched(TimingResult& r) const {
    std::string why;
    GraphExec one = capture(1, &why, opt.kernels ? &r : nullptr);
    if (!one) return false;
    const double est = std::max(replays_ms(one, 3) / 3.0, 1e-4);
    const int k = launches_per_sample(est);
    GraphExec many;
    if (k > 1) {
      many = capture(k, &why);
      if (!many) return false;
      CE_CUDA_CHECK(cudaGraphUpload(many.get(), stream));
    }
    cudaGraphExec_t g = k > 1 ? many.get() : one.get();
    const double per_sample = est * k;
    const int warm = warmups(per_sample);
    const int n = ceil_within(opt.budget_ms / per_sample, opt.min_samples, opt.max_samples);
    for (int i = 0; i < warm; ++i) CE_CUDA_CHECK(cudaGraphLaunch(g, stream));
    std::vector<Event> marks(static_cast<size_t>(n) + 1);
    marks[0].record(stream);
    for (int i = 0; i < n; ++i) {
      CE_CUDA_CHECK(cudaGraphLaunch(g, stream));
      marks[static_cast<size_t>(i) + 1].record(stream);
    }
    CE_CUDA_CHECK(cudaEventSynchronize(marks.back().get()));
    r.method = "graph";
    r.estimate_ms = est;
    r.launches_per_sample = k;
    r.warmup_launches = 4 + warm * k;  // the first launch, the estimate's, the warm-up
    r.per_launch_ms.reserve(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      r.per_launch_ms.push_back(elapsed_ms(marks[static_cast<size_t>(i)],
                                           marks[static_cast<size_t>(i) + 1]) / k);
    }
    return true;
  }

  TimingResult operator()() const {
    TimingResult r;
    // Warm-up: the first launch loads modules (unless the caller launched once already,
    // and says how long it took: first_ms); then estimate one launch and warm up more.
    // No synchronisation here: every later event is stream-ordered after that launch.
    double first_host = opt.warmed ? opt.first_host_ms : -1.0;
    const double first = opt.warmed ? opt.first_ms : time_first(&first_host);
    r.first_ms = first;
    r.first_host_ms = first_host;
    // Note [cut launches]: a staged search's first round only ranks, and a config whose
    // launch takes several times the round's best so far cannot rank near it: when the
    // first launch and the next, warm one are both slower than the cutoff, the timing ends
    // there (the warm launch's time is its one sample, method "cut"; a graph replay where
    // the plan can be captured: one_sample), instead of the ten or more launches of a full
    // sampling. The first launch's time includes its module loading, so it only decides.
    // The caller chooses the cutoff (measure/engines.py, Note [cut launches] in
    // core/staging.py).
    if (opt.cutoff_ms > 0 && first > opt.cutoff_ms) {
      // Note [one-launch cut]: the GPU cannot start a launch's kernels before the host
      // has issued them, and it is idle between the first event and the end only while
      // the host issues them, so the first launch's events less the host's time to issue
      // it (from before the first event's record; module loading, and any wait inside the
      // call, included) are a lower bound of its GPU time. Where that bound is over the
      // cutoff, the launch cannot rank: the timing ends with the bound as its one sample
      // (warmup_launches 0), without the warm launch, which on the H100 cost 1.7 s of the
      // main job's 30 s (63 float32 backward-filter configs of 14-93 ms each) and 1.2 s of
      // a ResNet-50 sweep. Otherwise (module loading, or a host-heavy call such as an FFT
      // config with knob 11 = 1, took the time) the warm launch decides, as before.
      // confirm_cut takes the warm launch all the same and says whether the bound would
      // have cut (tests/test_gpu_cuts.py: where it would, the warm launch is over the
      // cutoff too).
      const double at_least = first_host >= 0 ? first - first_host : -1.0;
      if (at_least > opt.cutoff_ms) {
        if (!opt.confirm_cut) return cut(std::move(r), at_least, 0);
        r.first_would_cut = true;
      }
      const double second = one_sample(r);
      if (second > opt.cutoff_ms) return cut(std::move(r), second, 1);
    }
    if (opt.batched && opt.use_graph && !opt.flush_l2) {
      if (batched(r)) return r;  // else (no capture) the path below, which says why
    }
    double est = std::max(time_eager(3) / 3.0, 1e-4);
    r.estimate_ms = est;
    r.warmup_launches = 4;  // the first launch and the estimate's

    auto t0 = std::chrono::steady_clock::now();
    auto spent_ms = [&] {
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
          .count();
    };
    auto done = [&](size_t n) {
      return static_cast<int>(n) >= opt.max_samples ||
             (static_cast<int>(n) >= opt.min_samples && spent_ms() >= opt.budget_ms);
    };
    auto eager_warm_up = [&] {
      const int warm = warmups(est);
      time_eager(warm);
      r.warmup_launches += warm;
    };

    if (opt.flush_l2) {
      eager_warm_up();
      t0 = std::chrono::steady_clock::now();
      // One launch per sample, L2 cleared before it (outside the events), as triton's
      // do_bench does; the memset also gives the host time to queue the launch.
      int l2 = at::cuda::getCurrentDeviceProperties()->l2CacheSize;
      size_t flush_bytes = static_cast<size_t>(std::max(l2, 1 << 20)) * 2;
      c10::DataPtr flush = c10::cuda::CUDACachingAllocator::get()->allocate(flush_bytes);
      r.method = "eager+flush";
      r.launches_per_sample = 1;
      while (!done(r.per_launch_ms.size())) {
        CE_CUDA_CHECK(cudaMemsetAsync(flush.get(), 0, flush_bytes, stream));
        r.per_launch_ms.push_back(time_eager(1));
      }
      name_kernels(r);
      return r;
    }

    const int k = launches_per_sample(est);
    r.launches_per_sample = k;
    GraphExec graph;
    if (opt.use_graph) {
      std::string why;
      graph = capture(k, &why, opt.kernels ? &r : nullptr);
      if (!graph) r.note = "graph capture not used (" + why + ")";
    }
    if (graph) {
      // Note [warm-up replays]: the warm-up is replays of the sample's graph, as the
      // samples are: GPU time, whatever the host's cost per launch. Eager launches of
      // kernels shorter than their host cost took several times warmup_ms (a ResNet-50
      // sweep's finalists on the H200: about 25 ms each for a 10 ms budget).
      r.method = "graph";
      const int warm = warmups(est * k);
      for (int i = 0; i < warm; ++i) CE_CUDA_CHECK(cudaGraphLaunch(graph.get(), stream));
      CE_CUDA_CHECK(cudaStreamSynchronize(stream));
      r.warmup_launches += warm * k;
      t0 = std::chrono::steady_clock::now();
      while (!done(r.per_launch_ms.size())) {
        Event a, b;
        a.record(stream);
        CE_CUDA_CHECK(cudaGraphLaunch(graph.get(), stream));
        b.record(stream);
        CE_CUDA_CHECK(cudaEventSynchronize(b.get()));
        r.per_launch_ms.push_back(elapsed_ms(a, b) / k);
      }
    } else {
      r.method = "eager";
      eager_warm_up();
      t0 = std::chrono::steady_clock::now();
      while (!done(r.per_launch_ms.size())) r.per_launch_ms.push_back(time_eager(k) / k);
    }
    if (opt.eager_budget_ms > 0) eager_wall(eager_calls(est, k), r);
    name_kernels(r);
    return r;
  }
};

struct TimeFn {
  Problem& p;
  int algo;
  cudnnMathType_t m;
  const TimingOptions& opt;
  template <Direction D>
  TimingResult operator()() const {
    using O = Ops<D>;
    CE_CHECK_ARG(algo >= 0 && algo < O::kCount, "algorithm ", algo, " out of range for ",
                 direction_name(D), " (0..", O::kCount - 1, ")");
    CE_CHECK_ARG(opt.budget_ms >= 0 && opt.min_samples >= 1 &&
                     opt.max_samples >= opt.min_samples,
                 "invalid timing options");
    c10::cuda::CUDAGuard guard(p.x().device());
    cudnnHandle_t h = current_handle();
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
    MathTypeScope scope(p);
    p.set_math_type(m);
    const auto a = static_cast<typename O::Algo>(algo);
    const std::string ctx = algo_name(D, algo) + " (" + math_type_name(m) + ") on " + p.describe();
    size_t bytes = 0;
    CE_CUDNN_CHECK(O::workspace(h, p, a, &bytes), ctx);
    c10::DataPtr ws = c10::cuda::CUDACachingAllocator::get()->allocate(bytes);
    void* wsp = ws.get();
    Problem& prob = p;
    Launch run = [&prob, h, a, wsp, bytes] { return O::run(h, prob, a, wsp, bytes); };
    TimingResult r = time_launches(h, stream, p.x().device(), run, opt, ctx);
    r.workspace_bytes = static_cast<int64_t>(bytes);
    return r;
  }
};

}  // namespace

double time_launch(cudaStream_t stream, const Launch& run, cudnnStatus_t* status,
                   double* host_ms) {
  Event a, b;
  const auto t0 = std::chrono::steady_clock::now();  // before the first event: a bound
  a.record(stream);
  *status = run();
  if (host_ms != nullptr) {
    *host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                   .count();
  }
  b.record(stream);
  if (*status != CUDNN_STATUS_SUCCESS) return -1.0;
  CE_CUDA_CHECK(cudaEventSynchronize(b.get()));
  return elapsed_ms(a, b);
}

TimingResult time_launches(cudnnHandle_t h, cudaStream_t stream, c10::Device device,
                           const Launch& run, const TimingOptions& opt, const std::string& ctx) {
  return Timer{h, stream, device, run, opt, ctx}();
}

TimingResult time_algorithm(Direction d, Problem& p, int algo, const std::string& math_type,
                            const TimingOptions& opt) {
  return dispatch(d, TimeFn{p, algo, math_type_from_name(math_type), opt});
}

}  // namespace cudnn_explorer
