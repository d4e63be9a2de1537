#include "problem.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cudnn/Handle.h>
#include <c10/cuda/CUDAStream.h>

#include <sstream>

namespace cudnn_explorer {

cudnnDataType_t data_type_of(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return CUDNN_DATA_FLOAT;
    case at::kDouble: return CUDNN_DATA_DOUBLE;
    case at::kHalf: return CUDNN_DATA_HALF;
    case at::kBFloat16: return CUDNN_DATA_BFLOAT16;
    default:
      CE_CHECK_ARG(false, "unsupported dtype ", t.scalar_type(),
                   "; valid: float32, float16, bfloat16, float64");
  }
}

namespace {

std::string join(at::IntArrayRef v) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
  os << "]";
  return os.str();
}

std::string join(const std::vector<int>& v) {
  std::vector<int64_t> w(v.begin(), v.end());
  return join(at::IntArrayRef(w));
}

bool is_channels_last(const at::Tensor& t) {
  return t.dim() == 4 ? t.is_contiguous(at::MemoryFormat::ChannelsLast)
                      : t.is_contiguous(at::MemoryFormat::ChannelsLast3d);
}

void set_tensor_desc(const TensorDescriptor& d, const at::Tensor& t, cudnnDataType_t dt,
                     const std::string& ctx) {
  std::vector<int> size(t.sizes().begin(), t.sizes().end());
  std::vector<int> stride(t.strides().begin(), t.strides().end());
  CE_CUDNN_CHECK(cudnnSetTensorNdDescriptor(d.get(), dt, static_cast<int>(t.dim()), size.data(),
                                            stride.data()),
                 ctx);
}

}  // namespace

Direction direction_from_name(const std::string& name) {
  if (name == "fwd") return Direction::Forward;
  if (name == "bwd-data") return Direction::BackwardData;
  if (name == "bwd-filter") return Direction::BackwardFilter;
  CE_CHECK_ARG(false, "unknown direction '", name, "'; valid: fwd, bwd-data, bwd-filter");
}

std::string direction_name(Direction d) {
  switch (d) {
    case Direction::Forward: return "fwd";
    case Direction::BackwardData: return "bwd-data";
    case Direction::BackwardFilter: return "bwd-filter";
  }
  return "?";
}

cudnnHandle_t current_handle() {
  cudnnHandle_t handle = at::native::getCudnnHandle();
  // getCudnnHandle already binds the current stream; say so explicitly anyway,
  // since every measurement must run on PyTorch's current stream.
  CE_CUDNN_CHECK(cudnnSetStream(handle, c10::cuda::getCurrentCUDAStream().stream()),
                 "binding PyTorch's current stream");
  return handle;
}

Problem::Problem(const at::Tensor& x, const at::Tensor& w, const at::Tensor& y,
                 std::vector<int> padding, std::vector<int> stride, std::vector<int> dilation,
                 int groups, const std::string& math_type)
    : x_(x), w_(w), y_(y), padding_(padding), stride_(stride), dilation_(dilation) {
  // --- validate at the boundary -------------------------------------------------------
  for (const at::Tensor* t : {&x, &w, &y}) {
    CE_CHECK_ARG(t->defined() && t->is_cuda(), "x, w and y must be CUDA tensors");
    CE_CHECK_ARG(t->device() == x.device(), "x, w and y must be on one device (x is on ",
                 x.device(), ", another on ", t->device(), ")");
    CE_CHECK_ARG(t->scalar_type() == x.scalar_type(), "x, w and y must share one dtype (x is ",
                 x.scalar_type(), ", another is ", t->scalar_type(), ")");
    CE_CHECK_ARG(t->dim() == 4 || t->dim() == 5,
                 "tensors must be 4-D or 5-D (1-D problems are viewed as 2-D), got ",
                 t->dim(), "-D");
    CE_CHECK_ARG(t->dim() == x.dim(), "x, w and y must have the same number of dims");
  }
  const int nsp = static_cast<int>(x.dim()) - 2;
  CE_CHECK_ARG(static_cast<int>(padding.size()) == nsp &&
                   static_cast<int>(stride.size()) == nsp &&
                   static_cast<int>(dilation.size()) == nsp,
               "padding, stride and dilation need ", nsp, " values each");
  CE_CHECK_ARG(groups >= 1, "groups must be >= 1, got ", groups);
  // Note [ambiguous layout]: a tensor with size-1 dims (C = 1, or H = W = 1) is contiguous
  // in both formats, so x alone cannot tell the layout: an NCHW problem with C = 1 was
  // refused as "not channels_last" (found by the API fuzz). The layout is the one all
  // three tensors share, NCHW when they share both.
  const bool all_nchw = x.is_contiguous() && w.is_contiguous() && y.is_contiguous();
  const bool all_cl = is_channels_last(x) && is_channels_last(w) && is_channels_last(y);
  CE_CHECK_ARG(all_nchw || all_cl,
               "x, w and y must all be contiguous in one layout (contiguous NCHW or "
               "channels_last)");
  const bool cl = !all_nchw;
  data_type_ = data_type_of(x);

  std::ostringstream os;
  os << "x=" << join(x.sizes()) << " w=" << join(w.sizes()) << " y=" << join(y.sizes())
     << " pad=" << join(padding) << " stride=" << join(stride) << " dilation=" << join(dilation)
     << " groups=" << groups << " " << data_type_name(data_type_) << " "
     << (cl ? "NHWC" : "NCHW") << " " << math_type;
  description_ = os.str();

  // --- descriptors ------------------------------------------------------------------------
  set_tensor_desc(x_desc_, x, data_type_, description_);
  set_tensor_desc(y_desc_, y, data_type_, description_);
  std::vector<int> wsize(w.sizes().begin(), w.sizes().end());
  CE_CUDNN_CHECK(cudnnSetFilterNdDescriptor(w_desc_.get(), data_type_,
                                            cl ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                            static_cast<int>(w.dim()), wsize.data()),
                 description_);
  // Note [compute type]: ATen's ConvolutionDescriptor::set uses the data type, except
  // half, which accumulates in float. cuDNN 9.19 refuses a BFLOAT16 compute type in
  // cudnnSetConvolutionNdDescriptor (BAD_PARAM: it allows FLOAT, DOUBLE, HALF, INT32),
  // so bfloat16 accumulates in float too, cuDNN's PSEUDO_BFLOAT16 configuration.
  cudnnDataType_t compute =
      (data_type_ == CUDNN_DATA_HALF || data_type_ == CUDNN_DATA_BFLOAT16) ? CUDNN_DATA_FLOAT
                                                                           : data_type_;
  CE_CUDNN_CHECK(cudnnSetConvolutionNdDescriptor(conv_desc_.get(), nsp, padding.data(),
                                                 stride.data(), dilation.data(),
                                                 CUDNN_CROSS_CORRELATION, compute),
                 description_);
  CE_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv_desc_.get(), groups), description_);
  set_math_type(math_type_from_name(math_type));

  // Independent check of the output shape against cuDNN's own arithmetic.
  std::vector<int> expect(x.dim());
  CE_CUDNN_CHECK(cudnnGetConvolutionNdForwardOutputDim(conv_desc_.get(), x_desc_.get(),
                                                       w_desc_.get(), static_cast<int>(x.dim()),
                                                       expect.data()),
                 description_);
  std::vector<int64_t> expect64(expect.begin(), expect.end());
  CE_CHECK_ARG(at::IntArrayRef(expect64) == y.sizes(), "output tensor has shape ",
               join(y.sizes()), " but cuDNN computes ", join(at::IntArrayRef(expect64)),
               " for ", description_);
}

void Problem::set_math_type(cudnnMathType_t m) {
  CE_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_desc_.get(), m), description_);
  math_type_ = m;
}

const void* Problem::one() const {
  return data_type_ == CUDNN_DATA_DOUBLE ? static_cast<const void*>(&one_d_)
                                         : static_cast<const void*>(&one_f_);
}

const void* Problem::zero() const {
  return data_type_ == CUDNN_DATA_DOUBLE ? static_cast<const void*>(&zero_d_)
                                         : static_cast<const void*>(&zero_f_);
}

}  // namespace cudnn_explorer
