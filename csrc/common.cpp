#include "common.h"

namespace cudnn_explorer {

std::string status_name(cudnnStatus_t status) {
  const char* s = cudnnGetErrorString(status);
  return s ? std::string(s) : ("CUDNN_STATUS_" + std::to_string(static_cast<int>(status)));
}

std::string last_error_detail() {
  char buf[1024] = {0};
  cudnnGetLastErrorString(buf, sizeof(buf));
  return std::string(buf);
}

void throw_cudnn_error(cudnnStatus_t status, const char* call, const std::string& context) {
  std::string msg = status_name(status) + ": " + call + " failed for " + context;
  std::string detail = last_error_detail();
  if (!detail.empty()) msg += " [cuDNN: " + detail + "]";
  throw NativeError("cudnn", status_name(status), call, msg);
}

void throw_cuda_error(cudaError_t err, const char* call) {
  const std::string name = cudaGetErrorName(err);
  throw NativeError("cuda", name, call,
                    name + ": " + call + " failed (" + cudaGetErrorString(err) + ")");
}

void throw_native(const char* kind, const std::string& status, const char* call,
                  const std::string& message) {
  throw NativeError(kind, status, call, message);
}

std::string math_type_name(cudnnMathType_t m) {
  switch (m) {
    case CUDNN_DEFAULT_MATH: return "DEFAULT_MATH";
    case CUDNN_TENSOR_OP_MATH: return "TENSOR_OP_MATH";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "TENSOR_OP_MATH_ALLOW_CONVERSION";
    case CUDNN_FMA_MATH: return "FMA_MATH";
  }
  return "MATH_" + std::to_string(static_cast<int>(m));
}

cudnnMathType_t math_type_from_name(const std::string& name) {
  for (cudnnMathType_t m : {CUDNN_DEFAULT_MATH, CUDNN_TENSOR_OP_MATH,
                            CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION, CUDNN_FMA_MATH}) {
    if (math_type_name(m) == name) return m;
  }
  throw_native("argument", "INVALID_ARGUMENT", "math_type_from_name",
               "unknown math type '" + name +
                   "'; valid: DEFAULT_MATH, TENSOR_OP_MATH, TENSOR_OP_MATH_ALLOW_CONVERSION, "
                   "FMA_MATH");
}

std::string data_type_name(cudnnDataType_t t) {
  switch (t) {
    case CUDNN_DATA_FLOAT: return "FLOAT";
    case CUDNN_DATA_DOUBLE: return "DOUBLE";
    case CUDNN_DATA_HALF: return "HALF";
    case CUDNN_DATA_BFLOAT16: return "BFLOAT16";
    default: return "DATA_" + std::to_string(static_cast<int>(t));
  }
}

}  // namespace cudnn_explorer
