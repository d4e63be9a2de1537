// A convolution problem on real tensors: the three tensors, their descriptors
// and the convolution descriptor, built once and validated at the boundary.
#pragma once

#include "descriptors.h"

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace cudnn_explorer {

enum class Direction { Forward, BackwardData, BackwardFilter };

Direction direction_from_name(const std::string& name);
std::string direction_name(Direction d);

// cuDNN's data type of a float32, float16, bfloat16 or float64 tensor (a bad-argument
// error naming the valid ones for any other).
cudnnDataType_t data_type_of(const at::Tensor& t);

// x: input (N, C, spatial...), w: weight (K, C/groups, kernel...), y: output.
// Which one is written depends on the direction: y for forward, x (as dx) for
// backward-data, w (as dw) for backward-filter. 1-D problems arrive already
// viewed as 2-D with H = 1 (what PyTorch does too).
class Problem {
 public:
  Problem(const at::Tensor& x, const at::Tensor& w, const at::Tensor& y,
          std::vector<int> padding, std::vector<int> stride, std::vector<int> dilation,
          int groups, const std::string& math_type);

  // Set the convolution descriptor's math type (cuDNN reads it in every query).
  void set_math_type(cudnnMathType_t m);
  cudnnMathType_t math_type() const { return math_type_; }

  const at::Tensor& x() const { return x_; }
  const at::Tensor& w() const { return w_; }
  const at::Tensor& y() const { return y_; }
  cudnnTensorDescriptor_t x_desc() const { return x_desc_.get(); }
  cudnnFilterDescriptor_t w_desc() const { return w_desc_.get(); }
  cudnnTensorDescriptor_t y_desc() const { return y_desc_.get(); }
  cudnnConvolutionDescriptor_t conv_desc() const { return conv_desc_.get(); }
  cudnnDataType_t data_type() const { return data_type_; }
  const std::vector<int>& padding() const { return padding_; }
  const std::vector<int>& stride() const { return stride_; }
  const std::vector<int>& dilation() const { return dilation_; }
  // alpha = 1, beta = 0 in the scaling type cuDNN expects for this data type.
  const void* one() const;
  const void* zero() const;

  // "x=[32,3,224,224] w=[64,3,3,3] y=[32,64,224,224] pad=[1,1] ... FLOAT NCHW"
  const std::string& describe() const { return description_; }

 private:
  at::Tensor x_, w_, y_;
  TensorDescriptor x_desc_, y_desc_;
  FilterDescriptor w_desc_;
  ConvolutionDescriptor conv_desc_;
  cudnnDataType_t data_type_;
  cudnnMathType_t math_type_;
  std::string description_;
  std::vector<int> padding_, stride_, dilation_;
  double one_d_ = 1.0, zero_d_ = 0.0;
  float one_f_ = 1.0f, zero_f_ = 0.0f;
};

// Restores the problem's math type when a scope that changes it ends.
class MathTypeScope {
 public:
  explicit MathTypeScope(Problem& p) : p_(p), saved_(p.math_type()) {}
  ~MathTypeScope() {
    try {
      p_.set_math_type(saved_);
    } catch (...) {  // never throw from a destructor
    }
  }
  MathTypeScope(const MathTypeScope&) = delete;
  MathTypeScope& operator=(const MathTypeScope&) = delete;

 private:
  Problem& p_;
  cudnnMathType_t saved_;
};

cudnnHandle_t current_handle();  // PyTorch's handle, bound to PyTorch's current stream

}  // namespace cudnn_explorer
