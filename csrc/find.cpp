#include "find.h"

#include "directions.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <chrono>

namespace cudnn_explorer {

namespace {

constexpr cudnnMathType_t kAllMathTypes[] = {CUDNN_DEFAULT_MATH, CUDNN_TENSOR_OP_MATH,
                                             CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION,
                                             CUDNN_FMA_MATH};

template <typename Perf>
AlgoPerf to_row(Direction d, const Perf& perf, bool timed) {
  AlgoPerf r;
  r.algo = static_cast<int>(perf.algo);
  r.algo_name = algo_name(d, r.algo);
  r.status_code = static_cast<int>(perf.status);
  r.status = status_name(perf.status);
  r.time_ms = timed ? perf.time : -1.0f;
  r.memory_bytes = static_cast<int64_t>(perf.memory);
  r.deterministic = perf.determinism == CUDNN_DETERMINISTIC;
  r.math_type = math_type_name(perf.mathType);
  return r;
}

template <Direction D>
WorkspaceQuery query_workspace(cudnnHandle_t h, Problem& p, int algo, cudnnMathType_t m) {
  MathTypeScope scope(p);
  p.set_math_type(m);
  size_t bytes = 0;
  cudnnStatus_t st = Ops<D>::workspace(h, p, static_cast<typename Ops<D>::Algo>(algo), &bytes);
  WorkspaceQuery q;
  q.algo = algo;
  q.algo_name = algo_name(D, algo);
  q.math_type = math_type_name(m);
  q.status_code = static_cast<int>(st);
  q.status = status_name(st);
  q.bytes = st == CUDNN_STATUS_SUCCESS ? static_cast<int64_t>(bytes) : -1;
  return q;
}

// Note [Find workspace that fits]: like PyTorch's Conv_v7 (getMaxWorkspaceSize), Find is
// given the largest workspace that both the algorithms need and the GPU can give now: the
// caching allocator's largest free block, or the device's free memory when that is larger
// (CUDACachingAllocator::cacheInfo). Should even that allocation fail (fragmentation, a
// neighbour's allocation), the size is halved until it succeeds, down to none. Algorithms
// that need more come back with an error status; the Python side marks each with what it
// needs and what was free, and re-times every other one. A workspace cut to what is free
// leaves kFindHeadroomBytes of it to cuDNN's own allocations during Find (cudaMalloc, which
// PyTorch's cache cannot serve): with none left, on an H200 with 2 GiB free, a Find of the
// default problem failed with CUDNN_STATUS_INTERNAL_ERROR.
constexpr int64_t kFindHeadroomBytes = int64_t{128} << 20;

c10::DataPtr workspace_that_fits(const Problem& p, FindReport& rep) {
  auto* alloc = c10::cuda::CUDACachingAllocator::get();
  size_t largest = 0;  // 0 asks cacheInfo to start from cudaMemGetInfo's free memory
  c10::cuda::CUDACachingAllocator::cacheInfo(p.x().device().index(), &largest);
  if (static_cast<int64_t>(largest) < rep.workspace_given) {
    rep.workspace_free = static_cast<int64_t>(largest);
    rep.workspace_given = std::max<int64_t>(rep.workspace_free - kFindHeadroomBytes, 0);
  }
  while (true) {
    try {
      return alloc->allocate(static_cast<size_t>(rep.workspace_given));
    } catch (const c10::OutOfMemoryError&) {
      if (rep.workspace_given == 0) throw;  // not even an empty workspace: truly out
      (void)cudaGetLastError();             // clear the sticky allocation error
      rep.workspace_free = rep.workspace_given / 2;
      rep.workspace_given = rep.workspace_free;
    }
  }
}

struct FindFn {
  Problem& p;
  int64_t cap;
  const std::vector<cudnnMathType_t>& maths;
  template <Direction D>
  FindReport operator()() const {
    using O = Ops<D>;
    c10::cuda::CUDAGuard guard(p.x().device());
    cudnnHandle_t h = current_handle();
    FindReport rep;
    rep.direction = direction_name(D);
    rep.math_type = math_type_name(maths.front());
    rep.problem = p.describe();

    // Note [FindEx workspace]: cudnnFind*Ex tries every algorithm under several math
    // types, not only the descriptor's. A workspace sized for the descriptor's math
    // type alone was too small for another math type's variant on the H200 (that
    // row came back as an error instead of a time). So size it as the maximum over
    // every (algorithm, math type) that cuDNN answers for, then apply the user's cap.
    for (int a = 0; a < O::kCount; ++a) {
      for (cudnnMathType_t m : kAllMathTypes) {
        WorkspaceQuery q = query_workspace<D>(h, p, a, m);
        if (q.bytes > rep.workspace_needed) rep.workspace_needed = q.bytes;
        rep.workspace.push_back(std::move(q));
      }
    }
    rep.workspace_given =
        cap >= 0 ? std::min<int64_t>(cap, rep.workspace_needed) : rep.workspace_needed;

    int max_count = 0;
    CE_CUDNN_CHECK(O::max_count(h, &max_count), p.describe());
    // One row per (algorithm, math type) can come back: ask for room for all of them.
    rep.requested = std::max(max_count, O::kCount) * 4;
    std::vector<typename O::Perf> perf(rep.requested);

    MathTypeScope scope(p);
    p.set_math_type(maths.front());
    int returned = 0;
    CE_CUDNN_CHECK(O::heuristics(h, p, rep.requested, &returned, perf.data()), p.describe());
    for (int i = 0; i < returned; ++i) rep.heuristics.push_back(to_row(D, perf[i], false));

    // Workspace from PyTorch's caching allocator, like the tensors (freed on scope exit).
    c10::DataPtr ws = workspace_that_fits(p, rep);
    for (cudnnMathType_t m : maths) {
      const bool first = rep.searched.empty();
      rep.searched.push_back(math_type_name(m));
      returned = 0;
      double wall = 0.0;
      try {
        p.set_math_type(m);
        // Host wall time of the Find call alone, synchronised on both sides.
        CE_CUDA_CHECK(cudaStreamSynchronize(c10::cuda::getCurrentCUDAStream().stream()));
        const auto t0 = std::chrono::steady_clock::now();
        CE_CUDNN_CHECK(O::find(h, p, rep.requested, &returned, perf.data(), ws.get(),
                               static_cast<size_t>(rep.workspace_given)),
                       p.describe() + " (Find under " + math_type_name(m) + ")");
        CE_CUDA_CHECK(cudaStreamSynchronize(c10::cuda::getCurrentCUDAStream().stream()));
        wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                   .count();
      } catch (const NativeError& e) {
        // PyTorch's own math type must work; another one cuDNN refuses as a whole is
        // recorded, and the rows found so far stand.
        if (first || e.kind != "cudnn") throw;
        rep.find_errors.push_back(math_type_name(m) + ": " + e.status);
        continue;
      }
      if (first) rep.find_wall_ms = wall;
      rep.find_wall_ms_all += wall;
      rep.returned = std::max(rep.returned, returned);
      for (int i = 0; i < returned; ++i) {
        AlgoPerf row = to_row(D, perf[i], true);
        row.found_under = math_type_name(m);
        rep.find.push_back(std::move(row));
      }
    }
    // Find ran asynchronously on the current stream; the workspace's memory goes back
    // to the caching allocator, which is stream-ordered, so no sync is needed for reuse.
    return rep;
  }
};

struct WorkspaceFn {
  Problem& p;
  int algo;
  cudnnMathType_t m;
  template <Direction D>
  WorkspaceQuery operator()() const {
    c10::cuda::CUDAGuard guard(p.x().device());
    CE_CHECK_ARG(algo >= 0 && algo < Ops<D>::kCount, "algorithm ", algo, " out of range for ",
                 direction_name(D), " (0..", Ops<D>::kCount - 1, ")");
    return query_workspace<D>(current_handle(), p, algo, m);
  }
};

struct RunFn {
  Problem& p;
  int algo;
  cudnnMathType_t m;
  template <Direction D>
  int operator()() const {
    using O = Ops<D>;
    c10::cuda::CUDAGuard guard(p.x().device());
    CE_CHECK_ARG(algo >= 0 && algo < O::kCount, "algorithm ", algo, " out of range for ",
                 direction_name(D), " (0..", O::kCount - 1, ")");
    cudnnHandle_t h = current_handle();
    MathTypeScope scope(p);
    p.set_math_type(m);
    size_t bytes = 0;
    const std::string ctx = algo_name(D, algo) + " (" + math_type_name(m) + ") on " + p.describe();
    CE_CUDNN_CHECK(O::workspace(h, p, static_cast<typename O::Algo>(algo), &bytes), ctx);
    c10::DataPtr ws = c10::cuda::CUDACachingAllocator::get()->allocate(bytes);
    CE_CUDNN_CHECK(O::run(h, p, static_cast<typename O::Algo>(algo), ws.get(), bytes), ctx);
    return 0;
  }
};

}  // namespace

std::string algo_name(Direction d, int algo) {
  static const char* fwd[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT",
                              "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  static const char* bwd_data[] = {"ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD",
                                   "WINOGRAD_NONFUSED"};
  static const char* bwd_filter[] = {"ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD",
                                     "WINOGRAD_NONFUSED", "FFT_TILING"};
  static_assert(sizeof(fwd) / sizeof(*fwd) == CUDNN_CONVOLUTION_FWD_ALGO_COUNT, "fwd names");
  static_assert(sizeof(bwd_data) / sizeof(*bwd_data) == CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                "bwd-data names");
  static_assert(
      sizeof(bwd_filter) / sizeof(*bwd_filter) == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
      "bwd-filter names");
  const char** names = d == Direction::Forward        ? fwd
                       : d == Direction::BackwardData ? bwd_data
                                                      : bwd_filter;
  const int n = d == Direction::Forward        ? static_cast<int>(CUDNN_CONVOLUTION_FWD_ALGO_COUNT)
                : d == Direction::BackwardData ? static_cast<int>(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT)
                                               : static_cast<int>(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
  return (algo >= 0 && algo < n) ? names[algo] : "ALGO_" + std::to_string(algo);
}

FindReport find_algorithms(Direction d, Problem& p, int64_t max_workspace_bytes,
                           const std::vector<std::string>& math_types) {
  CE_CHECK_ARG(!math_types.empty(), "find_algorithms needs at least one math type");
  std::vector<cudnnMathType_t> maths;
  for (const auto& m : math_types) maths.push_back(math_type_from_name(m));
  return dispatch(d, FindFn{p, max_workspace_bytes, maths});
}

WorkspaceQuery workspace_size(Direction d, Problem& p, int algo, const std::string& math_type) {
  return dispatch(d, WorkspaceFn{p, algo, math_type_from_name(math_type)});
}

void run_algorithm(Direction d, Problem& p, int algo, const std::string& math_type) {
  dispatch(d, RunFn{p, algo, math_type_from_name(math_type)});
}

}  // namespace cudnn_explorer
