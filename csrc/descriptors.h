// RAII wrappers for cuDNN descriptors: no bare Create/Destroy pairs anywhere else.
#pragma once

#include "common.h"

#include <memory>

namespace cudnn_explorer {

template <typename T, cudnnStatus_t (*create)(T**), cudnnStatus_t (*destroy)(T*)>
class Descriptor {
 public:
  Descriptor() {
    T* raw = nullptr;
    CE_CUDNN_CHECK(create(&raw), "descriptor creation");
    ptr_.reset(raw);
  }
  T* get() const { return ptr_.get(); }

 private:
  struct Deleter {
    void operator()(T* p) const {
      if (p) destroy(p);  // never throws from a destructor
    }
  };
  std::unique_ptr<T, Deleter> ptr_;
};

using TensorDescriptor =
    Descriptor<cudnnTensorStruct, &cudnnCreateTensorDescriptor, &cudnnDestroyTensorDescriptor>;
using FilterDescriptor =
    Descriptor<cudnnFilterStruct, &cudnnCreateFilterDescriptor, &cudnnDestroyFilterDescriptor>;
using ConvolutionDescriptor = Descriptor<cudnnConvolutionStruct, &cudnnCreateConvolutionDescriptor,
                                         &cudnnDestroyConvolutionDescriptor>;

}  // namespace cudnn_explorer
