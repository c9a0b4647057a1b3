// ONNX models (ModelProto, .onnx) imported as an L1 ir::Graph. docs/io.md lists the operators and
// opsets, how symbolic dimensions are bound and which checks a file must pass.
//
//   io::OnnxModelFile f("model.onnx");                    // parses and checks the file once
//   io::OnnxImportOptions o;
//   o.input_shapes = {{"input_ids", {2, 16}}, {"attention_mask", {2, 16}}};
//   o.evaluate = evaluator_for(DeviceRegistry::get().at("reference"));  // runtime/device.hpp
//   io::OnnxGraph m = f.import_graph(o);
//   // m.graph's parameters: the model's inputs (m.inputs), then its weights (m.weight_names);
//   // run it with the inputs followed by m.weights.
//
// Every node the importer makes is located by its ONNX node's name (the op type and output
// name when the node has none), so a dispatch report or a shape error names the model's node.
// Shape computations (Shape -> Gather -> Concat -> Reshape, ConstantOfShape, Range) whose
// inputs are known at import are evaluated there with `evaluate`, so the graph is static.
// The file is untrusted: anything wrong with it is an InputError naming the file.
// Built when libonnx-dev and protobuf are found (the "onnx" feature); otherwise opening a
// model throws an InputError saying this rlx was built without ONNX.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.hpp"
#include "ir/graph.hpp"

namespace rlx::io {

struct OnnxImportOptions {
  // The shape of a model input by name: required for an input with symbolic dimensions
  // ("batch", "sequence"); where the file has a fixed dimension it must agree.
  std::map<std::string, Shape> input_shapes;
  // Runs one node on host tensors (passes::Evaluator's signature; pass
  // evaluator_for(reference device)). Empty: nothing is folded, and a node whose attribute
  // comes from a computed tensor (Reshape's shape from Shape -> Concat) fails the import.
  std::function<std::optional<std::vector<Tensor>>(const ir::Node&, const ir::Graph&, const std::vector<Tensor>&)> evaluate;
  // Initializers used as data become graph parameters (false: constants inside the graph).
  bool weights_as_parameters = true;
  // Folding stops at results with more elements than this (they stay in the graph).
  int64_t max_folded_elements = int64_t(1) << 20;
};

struct OnnxGraph {
  ir::Graph graph;                        // results: the model's outputs, in order
  std::vector<std::string> inputs;        // the first graph parameters, in the model's order
  std::vector<std::string> outputs;
  std::vector<std::string> weight_names;  // the parameters after the inputs
  std::vector<Tensor> weights;            // host, one per weight_names entry
  int64_t opset = 0;                      // the default domain's
};

class OnnxModelFile {
 public:
  // Reads and parses path (protobuf, at most 2 GiB), checks the graph (every input defined,
  // no cycle, no name defined twice, every operator supported: an error lists every node
  // that is not) and reads the initializers.
  explicit OnnxModelFile(const std::string& path);
  // The same for bytes in memory; `name` stands for the file in messages. Tensors with
  // external data are refused (there is no folder to read them from).
  static OnnxModelFile from_bytes(std::string_view bytes, const std::string& name = "<onnx bytes>");
  ~OnnxModelFile();
  OnnxModelFile(OnnxModelFile&&) noexcept;
  OnnxModelFile& operator=(OnnxModelFile&&) noexcept;

  const std::string& path() const;
  int64_t opset() const;
  std::string producer() const;  // producer_name and version
  // The model's inputs (initializers excluded) with their element type and dimensions, a
  // symbolic dimension as -1 (its name in input_dim_names).
  std::vector<std::string> input_names() const;
  std::vector<std::string> output_names() const;
  TensorType input_type(const std::string& name) const;
  std::vector<std::string> input_dim_names(const std::string& name) const;
  // The graph for the given input shapes. InputError naming the file and the node.
  OnnxGraph import_graph(const OnnxImportOptions& options = {}) const;

  struct Impl;

 private:
  OnnxModelFile() = default;
  std::unique_ptr<Impl> impl_;
};

// The operators the importer converts (ONNX op types of the default domain), sorted.
std::vector<std::string> onnx_supported_ops();

}  // namespace rlx::io
