// Shared helpers: the one cuDNN check macro, enum names, the error type.
#pragma once

#include <ATen/cudnn/cudnn-wrapper.h>
#include <c10/util/Exception.h>

#include <stdexcept>
#include <string>

namespace cudnn_explorer {

// Thrown for any cuDNN call that does not return CUDNN_STATUS_SUCCESS.
// Registered with pybind11 as cudnn_explorer._C.CudnnError; the message starts
// with the status name (e.g. "CUDNN_STATUS_NOT_SUPPORTED: ...") so the Python
// side can recover it.
struct CudnnError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Status name as cuDNN spells it ("CUDNN_STATUS_NOT_SUPPORTED").
std::string status_name(cudnnStatus_t status);
// cuDNN 9's own detail for the last failed call on this thread ("" if none).
std::string last_error_detail();

[[noreturn]] void throw_cudnn_error(cudnnStatus_t status, const char* call,
                                    const std::string& context);

std::string math_type_name(cudnnMathType_t m);
cudnnMathType_t math_type_from_name(const std::string& name);
std::string data_type_name(cudnnDataType_t t);

}  // namespace cudnn_explorer

// The one check macro: names the failing call, cuDNN's status and the problem.
#define CE_CUDNN_CHECK(call, context)                                   \
  do {                                                                  \
    cudnnStatus_t ce_status_ = (call);                                  \
    if (ce_status_ != CUDNN_STATUS_SUCCESS) {                           \
      ::cudnn_explorer::throw_cudnn_error(ce_status_, #call, (context)); \
    }                                                                   \
  } while (0)

#define CE_CUDA_CHECK(call)                                                \
  do {                                                                     \
    cudaError_t ce_err_ = (call);                                          \
    TORCH_CHECK(ce_err_ == cudaSuccess, "CUDA error ",                     \
                cudaGetErrorName(ce_err_), " (", cudaGetErrorString(ce_err_), \
                ") in ", #call);                                           \
  } while (0)
