// What the ONNX reader (onnx.cpp: the file, its tensors, the graph's checks and the import
// loop) and the operator table (onnx_ops.cpp: one converter per ONNX op type) share. Internal to
// src/io; needs the onnx_proto headers.
#pragma once
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

// (onnx_pb.h defines ONNX_API, then includes onnx-ml.pb.h as ONNX_ML=1 asks)
#include <onnx/onnx_pb.h>

#include "io/onnx.hpp"
#include "ir/frontend.hpp"

namespace rlx::io {

struct OnnxModelFile::Impl {
  std::string path;    // for messages
  std::string folder;  // where external data files lie; empty for bytes
  onnx::ModelProto model;
  int64_t opset = 0;
  std::map<std::string, Tensor> initializers;
  std::vector<const onnx::NodeProto*> order;  // topological
  std::vector<std::string> inputs;            // graph inputs that are not initializers
  std::map<std::string, const onnx::ValueInfoProto*> input_info;
};

namespace onnx_detail {

// A node's result as a converter gives it: a value in the graph, or a tensor known now.
struct Result {
  Var var;
  std::optional<Tensor> known;
  Result(Var v) : var(std::move(v)) {}          // NOLINT: implicit on purpose
  Result(Tensor t) : known(std::move(t)) {}     // NOLINT
};

// One node being converted: its inputs (as values in the target graph, or as tensors known at
// import), its attributes, and the model's opset.
class NodeContext {
 public:
  NodeContext(const onnx::NodeProto& n, int64_t opset, ir::Graph& g, std::vector<std::optional<Tensor>> known,
              std::function<Var(size_t)> materialize, std::vector<TensorType> types, int64_t max_known)
      : n_(n), opset_(opset), g_(g), known_(std::move(known)), materialize_(std::move(materialize)),
        types_(std::move(types)), max_known_(max_known) {}

  const onnx::NodeProto& node() const { return n_; }
  int64_t opset() const { return opset_; }
  ir::Graph& graph() const { return g_; }
  size_t inputs() const { return size_t(n_.input_size()); }
  size_t outputs() const { return size_t(n_.output_size()); }
  bool has(size_t i) const { return i < inputs() && !n_.input(int(i)).empty(); }
  bool wants_output(size_t i) const { return i < outputs() && !n_.output(int(i)).empty(); }
  // Input i (present: `need` says so in the message otherwise).
  Var var(size_t i) const;
  const Tensor* known(size_t i) const { return has(i) && known_[i] ? &*known_[i] : nullptr; }
  const TensorType& type(size_t i) const;
  // The integers of input i, which must be known at import (`what` names it in the message).
  std::vector<int64_t> ints(size_t i, const char* what) const;
  int64_t max_known() const { return max_known_; }

  // Attributes; a present attribute of another type is an InputError.
  bool has_attr(const char* name) const { return attr(name) != nullptr; }
  int64_t attr_int(const char* name, int64_t def) const;
  double attr_float(const char* name, double def) const;
  std::string attr_string(const char* name, const std::string& def) const;
  std::vector<int64_t> attr_ints(const char* name, std::vector<int64_t> def = {}) const;
  const onnx::TensorProto* attr_tensor(const char* name) const;
  [[noreturn]] void fail(const std::string& why) const;

 private:
  const onnx::AttributeProto* attr(const char* name) const;
  const onnx::NodeProto& n_;
  int64_t opset_;
  ir::Graph& g_;
  std::vector<std::optional<Tensor>> known_;
  std::function<Var(size_t)> materialize_;
  std::vector<TensorType> types_;
  int64_t max_known_;
};

using Converter = std::function<std::vector<Result>(NodeContext&)>;
// The operator table (onnx_ops.cpp): op type -> converter.
const std::map<std::string, Converter>& converters();

// The rlx dtype of an ONNX TensorProto data type; nullopt for the types rlx lacks.
std::optional<DType> dtype_of_onnx(int32_t elem_type);
std::string onnx_type_name(int32_t elem_type);
// A TensorProto as a host tensor (what = where it came from, for messages; folder for
// external data, empty: refused). Checks dims and data lengths before allocating.
Tensor read_tensor(const onnx::TensorProto& t, const std::string& what, const std::string& folder);

}  // namespace onnx_detail
}  // namespace rlx::io
