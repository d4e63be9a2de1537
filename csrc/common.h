// Shared helpers: the one native error type and its check macros, enum names.
#pragma once

#include <ATen/cudnn/cudnn-wrapper.h>
#include <cuda_runtime_api.h>

#include <sstream>
#include <stdexcept>
#include <string>

namespace cudnn_explorer {

// Note [one native error path]: every failure in csrc/ throws NativeError, whatever
// reported it: a cuDNN status (kind "cudnn", status e.g. "CUDNN_STATUS_NOT_SUPPORTED"),
// a CUDA error (kind "cuda", status e.g. "cudaErrorMemoryAllocation"), a cudnn-frontend
// error_t (kind "frontend", status its error code's name) or a bad argument (kind
// "argument", status "INVALID_ARGUMENT", or "NOT_BUILT" for a part left out of the build). ``call`` names the failing call or check.
// bindings.cpp turns it into cudnn_explorer._C.NativeError with the attributes kind,
// status and call; measure/native.py maps that to the project's error classes.
struct NativeError : public std::runtime_error {
  NativeError(std::string kind_, std::string status_, std::string call_, const std::string& msg)
      : std::runtime_error(msg), kind(std::move(kind_)), status(std::move(status_)),
        call(std::move(call_)) {}
  std::string kind;
  std::string status;
  std::string call;
};

// Status name as cuDNN spells it ("CUDNN_STATUS_NOT_SUPPORTED").
std::string status_name(cudnnStatus_t status);
// cuDNN 9's own detail for the last failed call on this thread ("" if none).
std::string last_error_detail();

[[noreturn]] void throw_cudnn_error(cudnnStatus_t status, const char* call,
                                    const std::string& context);
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call);
[[noreturn]] void throw_native(const char* kind, const std::string& status, const char* call,
                               const std::string& message);

std::string math_type_name(cudnnMathType_t m);
cudnnMathType_t math_type_from_name(const std::string& name);
std::string data_type_name(cudnnDataType_t t);

// Concatenates any streamable values into one message.
template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

}  // namespace cudnn_explorer

// The one cuDNN check macro: names the failing call, cuDNN's status and the problem.
#define CE_CUDNN_CHECK(call, context)                                   \
  do {                                                                  \
    cudnnStatus_t ce_status_ = (call);                                  \
    if (ce_status_ != CUDNN_STATUS_SUCCESS) {                           \
      ::cudnn_explorer::throw_cudnn_error(ce_status_, #call, (context)); \
    }                                                                   \
  } while (0)

#define CE_CUDA_CHECK(call)                                   \
  do {                                                        \
    cudaError_t ce_err_ = (call);                             \
    if (ce_err_ != cudaSuccess) {                             \
      ::cudnn_explorer::throw_cuda_error(ce_err_, #call);     \
    }                                                         \
  } while (0)

// A bad argument from the caller (Python maps it to UserError).
#define CE_CHECK_ARG(cond, ...)                                                        \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      ::cudnn_explorer::throw_native("argument", "INVALID_ARGUMENT", #cond,            \
                                     ::cudnn_explorer::cat(__VA_ARGS__));               \
    }                                                                                  \
  } while (0)
