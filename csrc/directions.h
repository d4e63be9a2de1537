// One traits struct per direction so that find / run / timing code is written once.
// Each wraps the legacy cuDNN call of that direction with the argument order it needs.
#pragma once

#include "problem.h"

#include <string>

namespace cudnn_explorer {

std::string algo_name(Direction d, int algo);

template <Direction D>
struct Ops;

template <>
struct Ops<Direction::Forward> {
  using Perf = cudnnConvolutionFwdAlgoPerf_t;
  using Algo = cudnnConvolutionFwdAlgo_t;
  static constexpr int kCount = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
  static cudnnStatus_t max_count(cudnnHandle_t h, int* n) {
    return cudnnGetConvolutionForwardAlgorithmMaxCount(h, n);
  }
  static cudnnStatus_t heuristics(cudnnHandle_t h, const Problem& p, int req, int* ret, Perf* out) {
    return cudnnGetConvolutionForwardAlgorithm_v7(h, p.x_desc(), p.w_desc(), p.conv_desc(),
                                                  p.y_desc(), req, ret, out);
  }
  static cudnnStatus_t find(cudnnHandle_t h, const Problem& p, int req, int* ret, Perf* out,
                            void* ws, size_t bytes) {
    return cudnnFindConvolutionForwardAlgorithmEx(
        h, p.x_desc(), p.x().data_ptr(), p.w_desc(), p.w().data_ptr(), p.conv_desc(), p.y_desc(),
        p.y().data_ptr(), req, ret, out, ws, bytes);
  }
  static cudnnStatus_t workspace(cudnnHandle_t h, const Problem& p, Algo a, size_t* bytes) {
    return cudnnGetConvolutionForwardWorkspaceSize(h, p.x_desc(), p.w_desc(), p.conv_desc(),
                                                   p.y_desc(), a, bytes);
  }
  static cudnnStatus_t run(cudnnHandle_t h, const Problem& p, Algo a, void* ws, size_t bytes) {
    return cudnnConvolutionForward(h, p.one(), p.x_desc(), p.x().data_ptr(), p.w_desc(),
                                   p.w().data_ptr(), p.conv_desc(), a, ws, bytes, p.zero(),
                                   p.y_desc(), p.y().data_ptr());
  }
};

template <>
struct Ops<Direction::BackwardData> {
  using Perf = cudnnConvolutionBwdDataAlgoPerf_t;
  using Algo = cudnnConvolutionBwdDataAlgo_t;
  static constexpr int kCount = CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
  static cudnnStatus_t max_count(cudnnHandle_t h, int* n) {
    return cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, n);
  }
  static cudnnStatus_t heuristics(cudnnHandle_t h, const Problem& p, int req, int* ret, Perf* out) {
    return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p.w_desc(), p.y_desc(), p.conv_desc(),
                                                       p.x_desc(), req, ret, out);
  }
  static cudnnStatus_t find(cudnnHandle_t h, const Problem& p, int req, int* ret, Perf* out,
                            void* ws, size_t bytes) {
    return cudnnFindConvolutionBackwardDataAlgorithmEx(
        h, p.w_desc(), p.w().data_ptr(), p.y_desc(), p.y().data_ptr(), p.conv_desc(), p.x_desc(),
        p.x().data_ptr(), req, ret, out, ws, bytes);
  }
  static cudnnStatus_t workspace(cudnnHandle_t h, const Problem& p, Algo a, size_t* bytes) {
    return cudnnGetConvolutionBackwardDataWorkspaceSize(h, p.w_desc(), p.y_desc(), p.conv_desc(),
                                                        p.x_desc(), a, bytes);
  }
  static cudnnStatus_t run(cudnnHandle_t h, const Problem& p, Algo a, void* ws, size_t bytes) {
    return cudnnConvolutionBackwardData(h, p.one(), p.w_desc(), p.w().data_ptr(), p.y_desc(),
                                        p.y().data_ptr(), p.conv_desc(), a, ws, bytes, p.zero(),
                                        p.x_desc(), p.x().data_ptr());
  }
};

template <>
struct Ops<Direction::BackwardFilter> {
  using Perf = cudnnConvolutionBwdFilterAlgoPerf_t;
  using Algo = cudnnConvolutionBwdFilterAlgo_t;
  static constexpr int kCount = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
  static cudnnStatus_t max_count(cudnnHandle_t h, int* n) {
    return cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, n);
  }
  static cudnnStatus_t heuristics(cudnnHandle_t h, const Problem& p, int req, int* ret, Perf* out) {
    return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p.x_desc(), p.y_desc(), p.conv_desc(),
                                                         p.w_desc(), req, ret, out);
  }
  static cudnnStatus_t find(cudnnHandle_t h, const Problem& p, int req, int* ret, Perf* out,
                            void* ws, size_t bytes) {
    return cudnnFindConvolutionBackwardFilterAlgorithmEx(
        h, p.x_desc(), p.x().data_ptr(), p.y_desc(), p.y().data_ptr(), p.conv_desc(), p.w_desc(),
        p.w().data_ptr(), req, ret, out, ws, bytes);
  }
  static cudnnStatus_t workspace(cudnnHandle_t h, const Problem& p, Algo a, size_t* bytes) {
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p.x_desc(), p.y_desc(),
                                                          p.conv_desc(), p.w_desc(), a, bytes);
  }
  static cudnnStatus_t run(cudnnHandle_t h, const Problem& p, Algo a, void* ws, size_t bytes) {
    return cudnnConvolutionBackwardFilter(h, p.one(), p.x_desc(), p.x().data_ptr(), p.y_desc(),
                                          p.y().data_ptr(), p.conv_desc(), a, ws, bytes, p.zero(),
                                          p.w_desc(), p.w().data_ptr());
  }
};

// Call f.template operator()<D>() with the compile-time direction matching d.
template <typename F>
auto dispatch(Direction d, F&& f) {
  switch (d) {
    case Direction::Forward: return f.template operator()<Direction::Forward>();
    case Direction::BackwardData: return f.template operator()<Direction::BackwardData>();
    case Direction::BackwardFilter: break;
  }
  return f.template operator()<Direction::BackwardFilter>();
}

}  // namespace cudnn_explorer
