// torch.ops.cudnn_explorer.conv: aten::convolution with the plan file's engine configs.
//
// Note [pinned convolution op]: the op takes aten::convolution's arguments and returns
// what it returns. Each cuDNN direction it needs (forward; in backward the input's and the
// weight's gradients) runs the loaded plan for that problem-direction (pinned_plans.cpp);
// a direction without one runs PyTorch's own call (at::convolution,
// at::convolution_backward), counted and warned about once. Its autograd is here, in C++
// (a Node calling cudnn_explorer::conv_backward, Note [autograd node]), so that its host
// cost stays near ATen's; it casts under autocast as aten::convolution does (to the
// autocast dtype). Transposed convolutions are run as PyTorch runs them: as the
// convolution they are the adjoint of (forward = its backward-data, input gradient = its
// forward, weight gradient = its backward-filter, on the same tensors).
//
// Note [output layout]: every output of the op is dense in the memory format PyTorch's
// cuDNN path uses (ATen's cudnn_conv_suggest_memory_format: channels_last when the input
// or the 4-D weight is, channels_last_3d likewise for 5-D, contiguous for float64), pinned
// or not; the fake implementation (cudnn_explorer/pinning/op.py) follows the same rule.
#include "pinned.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/SmallVector.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/library.h>

#include <array>
#include <climits>
#include <optional>
#include <tuple>
#include <type_traits>

namespace cudnn_explorer {

namespace {

using at::IntArrayRef;
using at::Tensor;

at::MemoryFormat layout_of(const Tensor& input, const Tensor& weight) {
  if (input.scalar_type() == at::kDouble || weight.scalar_type() == at::kDouble) {
    return at::MemoryFormat::Contiguous;
  }
  const auto im = input.suggest_memory_format(), wm = weight.suggest_memory_format();
  if (weight.dim() == 4 &&
      (im == at::MemoryFormat::ChannelsLast || wm == at::MemoryFormat::ChannelsLast)) {
    return at::MemoryFormat::ChannelsLast;
  }
  if (weight.dim() == 5 &&
      (im == at::MemoryFormat::ChannelsLast3d || wm == at::MemoryFormat::ChannelsLast3d)) {
    return at::MemoryFormat::ChannelsLast3d;
  }
  return at::MemoryFormat::Contiguous;
}

Tensor in_format(const Tensor& t, at::MemoryFormat mf) {
  return !t.defined() || t.is_contiguous(mf) ? t : t.contiguous(mf);
}

// A call's small integer lists, held inline (no allocation per call: Note [no allocation
// per pinned call], pinned_plans.cpp).
using Dims = c10::SmallVector<int64_t, 6>;

// One convolution call's geometry in cuDNN's view: a 1-D call as 2-D with H = 1.
struct Geometry {
  bool valid = false;  // false: shapes or arguments PyTorch itself refuses
  bool one_d = false;
  bool transposed = false;
  int64_t groups = 1;
  at::MemoryFormat mf = at::MemoryFormat::Contiguous;
  Dims padding, stride, dilation;
  Dims x_sizes, w_sizes, y_sizes;  // cuDNN's x, w, y (Note [transposed])
};

Dims expanded(IntArrayRef v, size_t n, bool* ok) {
  if (v.size() == 1) return Dims(n, v[0]);
  if (v.size() != n) *ok = false;
  return Dims(v.begin(), v.end());
}

Geometry geometry(const Tensor& input, const Tensor& weight, IntArrayRef stride,
                  IntArrayRef padding, IntArrayRef dilation, bool transposed,
                  IntArrayRef output_padding, int64_t groups) {
  Geometry g;
  const int64_t dim = input.dim();
  if (dim < 3 || dim > 5 || weight.dim() != dim || groups < 1) return g;
  const size_t sp = static_cast<size_t>(dim - 2);
  bool ok = true;
  auto s = expanded(stride, sp, &ok), p = expanded(padding, sp, &ok),
       d = expanded(dilation, sp, &ok);
  auto op = transposed ? expanded(output_padding, sp, &ok) : Dims(sp, 0);
  if (!ok) return g;
  const IntArrayRef in = input.sizes(), w = weight.sizes();
  Dims out{in[0], transposed ? w[1] * groups : w[0]};
  for (size_t i = 0; i < sp; ++i) {
    if (s[i] < 1 || d[i] < 1 || p[i] < 0 || op[i] < 0) return g;
    if (transposed && op[i] >= std::max(s[i], d[i])) return g;
    const int64_t k = w[2 + i];
    out.push_back(transposed ? (in[2 + i] - 1) * s[i] - 2 * p[i] + d[i] * (k - 1) + op[i] + 1
                             : (in[2 + i] + 2 * p[i] - d[i] * (k - 1) - 1) / s[i] + 1);
    if (out.back() < 1) return g;
  }
  const int64_t in_channels = transposed ? w[0] : w[1] * groups;
  if (in[1] != in_channels || w[0] % groups) return g;
  g.transposed = transposed;
  g.groups = groups;
  g.mf = layout_of(input, weight);
  g.one_d = dim == 3;
  // cuDNN's x is the convolution's input: a transposed call's output (Note [transposed]).
  g.x_sizes = transposed ? out : Dims(in.begin(), in.end());
  g.y_sizes = transposed ? Dims(in.begin(), in.end()) : out;
  g.w_sizes = Dims(w.begin(), w.end());
  if (g.one_d) {
    for (auto* v : {&g.x_sizes, &g.y_sizes, &g.w_sizes}) v->insert(v->begin() + 2, 1);
    s.insert(s.begin(), 1);
    p.insert(p.begin(), 0);
    d.insert(d.begin(), 1);
  }
  g.stride = std::move(s);
  g.padding = std::move(p);
  g.dilation = std::move(d);
  g.valid = true;
  return g;
}

// Why a call cannot run a pinned plan whatever the file holds, or "".
std::string unpinnable(const Tensor& input, const Tensor& weight, const Tensor* other) {
  if (!input.is_cuda() || !weight.is_cuda() || (other && !other->is_cuda())) {
    return "its tensors are not on a CUDA device";
  }
  if (loaded_plan_count() == 0) return "no plan file is loaded";
  const auto t = input.scalar_type();
  if (t != at::kFloat && t != at::kHalf && t != at::kBFloat16 && t != at::kDouble) {
    return cat("cuDNN convolutions take float32, float16, bfloat16 or float64, not ", t);
  }
  if (weight.scalar_type() != t || (other && other->scalar_type() != t)) {
    return "its tensors' dtypes differ";
  }
  if (input.device() != weight.device() || (other && other->device() != input.device())) {
    return "its tensors are on different devices";
  }
  if (!at::globalContext().userEnabledCuDNN()) {
    return "cuDNN is disabled (torch.backends.cudnn.enabled is False)";
  }
  for (const Tensor* x : {&input, &weight, other}) {
    if (x && (x->numel() == 0 || x->numel() > INT_MAX)) {
      return "a tensor is empty or needs 64-bit indexing";
    }
  }
  return "";
}

Tensor cudnn_view(const Tensor& t, const Geometry& g) {
  Tensor c = t.contiguous(g.mf);
  return g.one_d ? c.unsqueeze(2) : c;
}

Tensor allocated(IntArrayRef sizes, const Tensor& like, const Geometry& g) {
  return at::empty(sizes, like.options().memory_format(g.mf));
}

Tensor plain_view(const Tensor& t, const Geometry& g) { return g.one_d ? t.squeeze(2) : t; }

CallGeometry call_geometry(Direction d, const Geometry& g) {
  return CallGeometry{d, g.padding, g.stride, g.dilation, g.groups,
                      g.mf != at::MemoryFormat::Contiguous};
}

PinnedCall make_call(Direction d, const Tensor& x, const Tensor& w, const Tensor& y,
                     const Geometry& g) {
  return PinnedCall{call_geometry(d, g), &x, &w, &y};
}

// A direction the file does not cover, seen before: counted as its fallback here (Note
// [known misses], pinned_plans.cpp).
bool counted_known_miss(Direction d, const Tensor& like, const Geometry& g) {
  return counted_known_miss(call_geometry(d, g), like.scalar_type(), g.x_sizes, g.w_sizes,
                            g.y_sizes);
}

using ConvSignature = Tensor(const Tensor&, const Tensor&, const std::optional<Tensor>&,
                             IntArrayRef, IntArrayRef, IntArrayRef, bool, IntArrayRef, int64_t);
using Grads = std::tuple<Tensor, Tensor, Tensor>;
using ConvBackwardSignature = Grads(const Tensor&, const Tensor&, const Tensor&, IntArrayRef,
                                    IntArrayRef, IntArrayRef, bool, IntArrayRef, int64_t,
                                    std::array<bool, 3>);

template <typename Signature>
c10::TypedOperatorHandle<Signature> typed_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").template typed<Signature>();
}

// The library's two ops, each looked up once.
const c10::TypedOperatorHandle<ConvSignature>& conv_op() {
  static const auto op = typed_op<ConvSignature>("cudnn_explorer::conv");
  return op;
}

const c10::TypedOperatorHandle<ConvBackwardSignature>& conv_backward_op() {
  static const auto op = typed_op<ConvBackwardSignature>("cudnn_explorer::conv_backward");
  return op;
}

Tensor conv_kernel(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
                   IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation, bool transposed,
                   IntArrayRef output_padding, int64_t groups) {
  const Geometry g = geometry(input, weight, stride, padding, dilation, transposed,
                              output_padding, groups);
  const Tensor* b = bias.has_value() && bias->defined() ? &*bias : nullptr;
  if (g.valid) {  // otherwise ATen's call below says what is wrong
    const std::string why = unpinnable(input, weight, b);
    const Direction d = transposed ? Direction::BackwardData : Direction::Forward;
    if (why.empty() && !counted_known_miss(d, input, g)) {
      c10::cuda::CUDAGuard guard(input.device());
      const Tensor in = cudnn_view(input, g), w = cudnn_view(weight, g);
      const Tensor out = allocated(transposed ? g.x_sizes : g.y_sizes, in, g);
      const PinnedCall call =
          transposed ? make_call(d, out, w, in, g) : make_call(d, in, w, out, g);
      if (run_pinned(call)) {
        if (b) {
          Dims shape(static_cast<size_t>(out.dim()), 1);
          shape[1] = -1;
          out.add_(b->reshape(shape));
        }
        return plain_view(out, g);
      }
    } else if (!why.empty()) {
      note_unpinned(why);
    }
  }
  return in_format(at::convolution(input, weight, bias, stride, padding, dilation, transposed,
                                   output_padding, groups),
                   g.valid ? g.mf : layout_of(input, weight));
}

Grads conv_backward_kernel(const Tensor& grad_output, const Tensor& input, const Tensor& weight,
                           IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation,
                           bool transposed, IntArrayRef output_padding, int64_t groups,
                           std::array<bool, 3> mask) {
  const Geometry g = geometry(input, weight, stride, padding, dilation, transposed,
                              output_padding, groups);
  Tensor gi, gw, gb;
  if (mask[2]) {  // as ATen's convolution_backward: the sum over all but the channels
    Dims dims{0};
    for (int64_t i = 2; i < grad_output.dim(); ++i) dims.push_back(i);
    gb = grad_output.sum(dims);
  }
  std::array<bool, 3> fallback{mask[0], mask[1], false};
  if (g.valid && (mask[0] || mask[1])) {
    const std::string why = unpinnable(input, weight, &grad_output);
    const Direction data = transposed ? Direction::Forward : Direction::BackwardData;
    const bool try_data = why.empty() && mask[0] && !counted_known_miss(data, input, g),
               try_filter = why.empty() && mask[1] &&
                            !counted_known_miss(Direction::BackwardFilter, input, g);
    if (try_data || try_filter) {
      c10::cuda::CUDAGuard guard(input.device());
      const Tensor go = cudnn_view(grad_output, g), in = cudnn_view(input, g),
                   w = cudnn_view(weight, g);
      if (try_data) {
        const Tensor out = allocated(in.sizes(), in, g);
        const PinnedCall call = transposed ? make_call(data, go, w, out, g)
                                           : make_call(data, out, w, go, g);
        if (run_pinned(call)) {
          gi = plain_view(out, g);
          fallback[0] = false;
        }
      }
      if (try_filter) {
        const Tensor out = allocated(w.sizes(), w, g);
        const PinnedCall call = transposed ? make_call(Direction::BackwardFilter, go, out, in, g)
                                           : make_call(Direction::BackwardFilter, in, out, go, g);
        if (run_pinned(call)) {
          gw = plain_view(out, g);
          fallback[1] = false;
        }
      }
    } else if (!why.empty()) {
      for (int i = 0; i < 2; ++i) {
        if (mask[i]) note_unpinned(why);
      }
    }
  }
  if (fallback[0] || fallback[1]) {
    const at::MemoryFormat mf = g.valid ? g.mf : layout_of(input, weight);
    auto r = at::convolution_backward(grad_output, input, weight, std::nullopt, stride, padding,
                                      dilation, transposed, output_padding, groups, fallback);
    if (fallback[0]) gi = in_format(std::get<0>(r), mf);
    if (fallback[1]) gw = in_format(std::get<1>(r), mf);
  }
  return {gi, gw, gb};
}

// Note [autograd node]: the op's autograd is a Node of its own, made as ATen's generated
// autograd kernels make theirs (ConvolutionBackward0): the inputs saved as SavedVariables,
// the arguments as plain members, the output's history set directly. A
// torch::autograd::Function (CppNode) costs several microseconds more per training call
// (a map of saved IValues, its argument visitors, its output wrapping), and an eager
// training step calls it once per layer. Its backward calls the conv_backward op, which
// has a derivative of its own (Note [double backward]); compiled autograd takes neither
// node (they have no compiled_args: it raises, naming the node).
using NodePtr = decltype(torch::autograd::Edge::function);

// A bias of shape (C), viewed to broadcast over `like`'s batch and spatial dims.
Tensor bias_view(const Tensor& bias, const Tensor& like) {
  std::vector<int64_t> shape(static_cast<size_t>(like.dim()), 1);
  shape[1] = -1;
  return bias.reshape(shape);
}

Tensor sum_defined(const Tensor& a, const Tensor& b) {
  if (!b.defined()) return a;
  return a.defined() ? a + b : b;
}

bool has_tangent(const Tensor& t) { return t.defined() && t._fw_grad(0).defined(); }

// An autograd node of the op: the call's arguments, kept for the convolutions it runs.
struct ConvNode : public torch::autograd::Node {
  std::vector<int64_t> stride, padding, dilation, output_padding;
  bool transposed = false;
  int64_t groups = 1;

  void set_args(IntArrayRef s, IntArrayRef p, IntArrayRef d, bool t, IntArrayRef op,
                int64_t g) {
    stride = s.vec();
    padding = p.vec();
    dilation = d.vec();
    output_padding = op.vec();
    transposed = t;
    groups = g;
  }
};

// Note [double backward]: the convolution y = conv(x, w) + b is bilinear in x and w, and
// so is its backward: gI = gI(gO, w) (the backward-data of gO), gW = gW(gO, x) (the
// backward-filter of gO against x), gb = the sum of gO. The backward of conv_backward,
// given the gradients ggI, ggW, ggb of its three outputs, is made of the same op's calls,
// as ATen's _convolution_double_backward is made of convolutions:
//   d gO = conv(ggI, w) + conv(x, ggW) + ggb      (forward convolutions)
//   d x  = gI(gO, ggW)                            (a backward-data with weight ggW)
//   d w  = gW(gO, ggI)                            (a backward-filter with input ggI)
// Each is a call of the pinned op through the dispatcher, with its own autograd: it runs
// the file's plan where the file covers that problem-direction and PyTorch's own call
// otherwise (counted either way), and it can be differentiated again.
struct PinnedConvBackwardBackward : public ConvNode {
  torch::autograd::SavedVariable grad_output_, input_, weight_;

  std::string name() const override { return "PinnedConvBackwardBackward"; }

  void release_variables() override {
    grad_output_.reset_data();
    input_.reset_data();
    weight_.reset_data();
  }

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    torch::autograd::variable_list out(3);
    const Tensor &ggI = grads[0], &ggW = grads[1], &ggb = grads[2];
    const Tensor go = grad_output_.unpack(), x = input_.unpack(), w = weight_.unpack();
    if (task_should_compute_output(0)) {
      Tensor ggO;
      if (ggI.defined()) {
        ggO = conv_op().call(ggI, w, std::nullopt, stride, padding, dilation, transposed,
                             output_padding, groups);
      }
      if (ggW.defined()) {
        ggO = sum_defined(ggO, conv_op().call(x, ggW, std::nullopt, stride, padding, dilation,
                                              transposed, output_padding, groups));
      }
      if (ggb.defined()) {
        const Tensor b = bias_view(ggb, go);
        ggO = ggO.defined() ? ggO + b : b.expand(go.sizes()).contiguous();
      }
      out[0] = std::move(ggO);
    }
    if (task_should_compute_output(1) && ggW.defined()) {
      out[1] = std::get<0>(conv_backward_op().call(go, x, ggW, stride, padding, dilation,
                                                   transposed, output_padding, groups,
                                                   {true, false, false}));
    }
    if (task_should_compute_output(2) && ggI.defined()) {
      out[2] = std::get<1>(conv_backward_op().call(go, ggI, w, stride, padding, dilation,
                                                   transposed, output_padding, groups,
                                                   {false, true, false}));
    }
    return out;
  }
};

struct PinnedConvBackward : public ConvNode {
  torch::autograd::SavedVariable input_, weight_;
  bool bias = false;

  std::string name() const override { return "PinnedConvBackward"; }

  void release_variables() override {
    input_.reset_data();
    weight_.reset_data();
  }

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    torch::autograd::variable_list out(3);
    if (!grads[0].defined()) return out;
    // task_should_compute_output, as ATen's generated nodes ask: should_compute_output
    // says only that an edge exists, and torch.autograd.grad(out, x) then computed the
    // weights' gradients too (a backward-filter per layer that nobody asked for)
    const std::array<bool, 3> mask{task_should_compute_output(0), task_should_compute_output(1),
                                   bias && task_should_compute_output(2)};
    if (!mask[0] && !mask[1] && !mask[2]) return out;
    auto r = conv_backward_op().call(grads[0], input_.unpack(), weight_.unpack(), stride,
                                     padding, dilation, transposed, output_padding, groups,
                                     mask);
    out[0] = std::move(std::get<0>(r));
    out[1] = std::move(std::get<1>(r));
    out[2] = std::move(std::get<2>(r));
    return out;
  }
};

// A node held as this torch's autograd holds nodes (std::shared_ptr before torch 2.12,
// c10::intrusive_ptr after).
template <class T>
NodePtr new_node() {
  if constexpr (std::is_same_v<NodePtr, std::shared_ptr<torch::autograd::Node>>) {
    return NodePtr(new T());
  } else {
    return c10::make_intrusive<T>();
  }
}

Tensor conv_autograd(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
                     IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation,
                     bool transposed, IntArrayRef output_padding, int64_t groups) {
  NodePtr node;
  if (torch::autograd::compute_requires_grad(input, weight, bias)) {
    node = new_node<PinnedConvBackward>();
    auto& n = static_cast<PinnedConvBackward&>(*node);
    n.set_next_edges(torch::autograd::collect_next_edges(input, weight, bias));
    n.input_ = torch::autograd::SavedVariable(input, false);
    n.weight_ = torch::autograd::SavedVariable(weight, false);
    n.set_args(stride, padding, dilation, transposed, output_padding, groups);
    n.bias = bias.has_value() && bias->defined();
  }
  Tensor out;
  {
    at::AutoDispatchBelowADInplaceOrView below;
    out = conv_op().call(input, weight, bias, stride, padding, dilation, transposed,
                         output_padding, groups);
  }
  if (node) torch::autograd::set_history(out, node);
  // Note [forward-mode AD]: as ATen's generated kernels do (convolution_jvp), the tangent
  // is the op on primals and tangents, conv(x_t, w) + conv(x, w_t) + b_t, set at level 0
  // (torch.func's jvp maps its own levels onto it). Each is a call of the pinned op.
  const Tensor* b = bias.has_value() && bias->defined() ? &*bias : nullptr;
  if (has_tangent(input) || has_tangent(weight) || (b && has_tangent(*b))) {
    Tensor t;
    if (has_tangent(input)) {
      t = conv_op().call(input._fw_grad(0), weight._fw_primal(0), std::nullopt, stride,
                         padding, dilation, transposed, output_padding, groups);
    }
    if (has_tangent(weight)) {
      t = sum_defined(t, conv_op().call(input._fw_primal(0), weight._fw_grad(0), std::nullopt,
                                        stride, padding, dilation, transposed, output_padding,
                                        groups));
    }
    if (b && has_tangent(*b)) {
      const Tensor bt = bias_view(b->_fw_grad(0), out);
      t = t.defined() ? t + bt : bt.expand(out.sizes()).contiguous();
    }
    out._set_fw_grad(t, 0, false);
  }
  return out;
}

// The autograd of conv_backward: its backward (Note [double backward]) and its forward-mode
// AD, the tangents of gI(gO, w), gW(gO, x) and sum(gO) by the same bilinearity.
Grads conv_backward_autograd(const Tensor& grad_output, const Tensor& input, const Tensor& weight,
                             IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation,
                             bool transposed, IntArrayRef output_padding, int64_t groups,
                             std::array<bool, 3> mask) {
  NodePtr node;
  if (torch::autograd::compute_requires_grad(grad_output, input, weight)) {
    node = new_node<PinnedConvBackwardBackward>();
    auto& n = static_cast<PinnedConvBackwardBackward&>(*node);
    n.set_next_edges(torch::autograd::collect_next_edges(grad_output, input, weight));
    n.grad_output_ = torch::autograd::SavedVariable(grad_output, false);
    n.input_ = torch::autograd::SavedVariable(input, false);
    n.weight_ = torch::autograd::SavedVariable(weight, false);
    n.set_args(stride, padding, dilation, transposed, output_padding, groups);
  }
  Grads r;
  {
    at::AutoDispatchBelowADInplaceOrView below;
    r = conv_backward_op().call(grad_output, input, weight, stride, padding, dilation,
                                transposed, output_padding, groups, mask);
  }
  Tensor& gi = std::get<0>(r);
  Tensor& gw = std::get<1>(r);
  Tensor& gb = std::get<2>(r);
  if (node) {
    for (Tensor* t : {&gi, &gw, &gb}) torch::autograd::set_history(*t, node);
  }
  if (!has_tangent(grad_output) && !has_tangent(input) && !has_tangent(weight)) return r;
  const Tensor go = grad_output._fw_primal(0), x = input._fw_primal(0), w = weight._fw_primal(0);
  const Tensor go_t = has_tangent(grad_output) ? grad_output._fw_grad(0) : Tensor();
  const Tensor x_t = has_tangent(input) ? input._fw_grad(0) : Tensor();
  const Tensor w_t = has_tangent(weight) ? weight._fw_grad(0) : Tensor();
  // one gradient of conv_backward on these tensors: 0 the input's, 1 the weight's
  auto grad = [&](const Tensor& g, const Tensor& xx, const Tensor& ww, int which) {
    auto rr = conv_backward_op().call(g, xx, ww, stride, padding, dilation, transposed,
                                      output_padding, groups, {which == 0, which == 1, false});
    return which == 0 ? std::get<0>(rr) : std::get<1>(rr);
  };
  if (gi.defined() && (go_t.defined() || w_t.defined())) {
    Tensor t = go_t.defined() ? grad(go_t, x, w, 0) : Tensor();
    if (w_t.defined()) t = sum_defined(t, grad(go, x, w_t, 0));
    gi._set_fw_grad(t, 0, false);
  }
  if (gw.defined() && (go_t.defined() || x_t.defined())) {
    Tensor t = go_t.defined() ? grad(go_t, x, w, 1) : Tensor();
    if (x_t.defined()) t = sum_defined(t, grad(go, x_t, w, 1));
    gw._set_fw_grad(t, 0, false);
  }
  if (gb.defined() && go_t.defined()) {
    std::vector<int64_t> dims{0};
    for (int64_t i = 2; i < go_t.dim(); ++i) dims.push_back(i);
    gb._set_fw_grad(go_t.sum(dims), 0, false);
  }
  return r;
}

// aten::convolution is on autocast's lower-precision list: so is this op.
Tensor conv_autocast(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
                     IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation,
                     bool transposed, IntArrayRef output_padding, int64_t groups) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCUDA);
  const auto to = at::autocast::get_autocast_dtype(at::kCUDA);
  return conv_op().call(at::autocast::cached_cast(to, input, c10::DeviceType::CUDA),
                        at::autocast::cached_cast(to, weight, c10::DeviceType::CUDA),
                        at::autocast::cached_cast(to, bias, c10::DeviceType::CUDA), stride,
                        padding, dilation, transposed, output_padding, groups);
}

}  // namespace

at::Tensor call_conv(const at::Tensor& input, const at::Tensor& weight,
                     const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                     at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
                     at::IntArrayRef output_padding, int64_t groups) {
  return conv_op().call(input, weight, bias, stride, padding, dilation, transposed,
                        output_padding, groups);
}

std::vector<std::vector<int64_t>> conv_keys(const Tensor& input, const Tensor& weight,
                                            IntArrayRef stride, IntArrayRef padding,
                                            IntArrayRef dilation, bool transposed,
                                            IntArrayRef output_padding, int64_t groups) {
  const Geometry g = geometry(input, weight, stride, padding, dilation, transposed,
                              output_padding, groups);
  CE_CHECK_ARG(g.valid, "not a convolution PyTorch runs: input ", input.sizes(), ", weight ",
               weight.sizes());
  auto meta = [&g, &input](IntArrayRef sizes) {
    return at::empty(sizes, input.options().device(at::kMeta).memory_format(g.mf));
  };
  const Tensor x = meta(g.x_sizes), w = meta(g.w_sizes), y = meta(g.y_sizes);
  std::vector<std::vector<int64_t>> out;
  for (Direction d : {Direction::Forward, Direction::BackwardData, Direction::BackwardFilter}) {
    out.push_back(call_key(make_call(d, x, w, y, g)));
  }
  return out;
}

}  // namespace cudnn_explorer

TORCH_LIBRARY(cudnn_explorer, m) {
  m.def(
      "conv(Tensor input, Tensor weight, Tensor? bias, int[] stride, int[] padding, "
      "int[] dilation, bool transposed, int[] output_padding, int groups) -> Tensor");
  m.def(
      "conv_backward(Tensor grad_output, Tensor input, Tensor weight, int[] stride, "
      "int[] padding, int[] dilation, bool transposed, int[] output_padding, int groups, "
      "bool[3] output_mask) -> (Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(cudnn_explorer, CUDA, m) {
  m.impl("conv", &cudnn_explorer::conv_kernel);
  m.impl("conv_backward", &cudnn_explorer::conv_backward_kernel);
}

// On the CPU the op is PyTorch's own call (counted as a fallback): the same program runs
// pinned or not, wherever its tensors are.
TORCH_LIBRARY_IMPL(cudnn_explorer, CPU, m) {
  m.impl("conv", &cudnn_explorer::conv_kernel);
  m.impl("conv_backward", &cudnn_explorer::conv_backward_kernel);
}

TORCH_LIBRARY_IMPL(cudnn_explorer, Autograd, m) {
  m.impl("conv", &cudnn_explorer::conv_autograd);
  m.impl("conv_backward", &cudnn_explorer::conv_backward_autograd);
}

TORCH_LIBRARY_IMPL(cudnn_explorer, AutocastCUDA, m) {
  m.impl("conv", &cudnn_explorer::conv_autocast);
}
