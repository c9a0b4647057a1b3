// ONNX import (src/io/onnx.hpp): the models of data/onnx (a torch-exported MLP and CNN, and
// one graph per opset form of Squeeze/Unsqueeze/ReduceMean/ReduceSum/Split with torch's shape
// computations) imported, run on every device here and compared with onnxruntime's outputs
// (make_onnx_models.py wrote both); the dispatch report names the ONNX nodes; every class of
// bad model refused with a message naming the file and the node; truncations and garbage end
// in an InputError, never a crash.
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "io/npy.hpp"
#include "io/onnx.hpp"
#include "runtime/device.hpp"
#include "runtime/runtime.hpp"
#include "tests/support/errors.hpp"

using namespace rlx;
namespace fs = std::filesystem;

namespace {

const std::string kDir = std::string(RLX_DATA) + "/onnx/";

#ifdef RLX_HAVE_ONNX

io::OnnxImportOptions options_for(const std::map<std::string, Shape>& shapes) {
  io::OnnxImportOptions o;
  o.input_shapes = shapes;
  o.evaluate = evaluator_for(DeviceRegistry::get().at("reference"));
  return o;
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// Largest |got - want| over max(1, largest |want|): f32 arithmetic in a different order
// than onnxruntime's, through a few layers.
double normalized_error(const Tensor& got, const Tensor& want) {
  BOOST_TEST_REQUIRE((got.shape() == want.shape()), "shape " << shape_str(got.shape()) << " vs " << shape_str(want.shape()));
  BOOST_TEST_REQUIRE((got.dtype() == DType::F32));
  double err = 0, scale = 1;
  for (int64_t i = 0; i < got.numel(); ++i) {
    err = std::max(err, std::abs(double(got.data<float>()[i]) - double(want.data<float>()[i])));
    scale = std::max(scale, std::abs(double(want.data<float>()[i])));
  }
  return err / scale;
}

constexpr double kTolerance = 2e-5;

// Imports `model` with its reference input bound, runs it on every runnable device and checks
// each output against onnxruntime's; returns the import for further checks.
io::OnnxGraph check_model(const std::string& model, const std::string& input, int outputs) {
  const Tensor x = io::read_npy(kDir + model + "_in_" + input + ".npy");
  const io::OnnxModelFile f(kDir + model + ".onnx");
  io::OnnxGraph g = f.import_graph(options_for({{input, x.shape()}}));
  BOOST_TEST_REQUIRE(g.outputs.size() == size_t(outputs));
  std::vector<Tensor> in{x};
  in.insert(in.end(), g.weights.begin(), g.weights.end());
  for (Device* d : DeviceRegistry::get().runnable()) {
    const Program p = compile(g.graph, *d);
    const std::vector<Tensor> out = run(p, *d, in);
    for (int i = 0; i < outputs; ++i) {
      const Tensor want = io::read_npy(kDir + model + "_out" + std::to_string(i) + ".npy");
      const double e = normalized_error(out[size_t(i)], want);
      BOOST_TEST(e <= kTolerance, model << " output " << g.outputs[size_t(i)] << " on " << d->name() << ": error " << e);
      BOOST_TEST_MESSAGE(model << " " << g.outputs[size_t(i)] << " on " << d->name() << ": normalized error " << e);
    }
  }
  return g;
}

bool has_location(const ir::Graph& g, const std::string& name) {
  return std::any_of(g.nodes.begin(), g.nodes.end(), [&](const ir::Node& n) { return n.loc.name == name; });
}

BOOST_AUTO_TEST_SUITE(onnx)

BOOST_AUTO_TEST_CASE(a_torch_exported_mlp_matches_onnxruntime_on_every_device) {
  const io::OnnxGraph g = check_model("mlp", "x", 1);
  BOOST_TEST(g.opset == 17);
  BOOST_TEST(g.weights.size() == 6u);  // three Gemms' weights and biases, as parameters
  // The dispatch report names the model's nodes.
  const std::string report = compile(g.graph, DeviceRegistry::get().at("cpu")).report.table();
  for (const char* node : {"/fc1/Gemm", "/Erf", "/fc3/Gemm", "/Softmax"})
    BOOST_TEST(report.find(node) != std::string::npos, node << " not in\n" << report);
}

BOOST_AUTO_TEST_CASE(a_torch_exported_cnn_matches_onnxruntime_on_every_device) {
  // Conv, BatchNormalization, MaxPool, AveragePool with padding outside the count, GlobalAveragePool, Flatten, Gemm
  const io::OnnxGraph g = check_model("cnn", "image", 1);
  BOOST_TEST(has_location(g.graph, "/bn/BatchNormalization"));
}

BOOST_AUTO_TEST_CASE(opset_forms_and_shape_computations_match_onnxruntime) {
  for (const char* m : {"ops11", "ops13", "ops18"}) {
    BOOST_TEST_CONTEXT(m) {
      const io::OnnxGraph g = check_model(m, "x", std::string(m) == "ops18" ? 6 : 5);
      // Shape -> Gather -> Unsqueeze -> Concat -> Reshape and Range/ConstantOfShape/Expand were folded at import.
      for (const char* folded : {"shape", "batch", "flat_shape", "positions", "ones", "bshape", "wexp"})
        BOOST_TEST(!has_location(g.graph, folded), folded << " was not folded");
      BOOST_TEST(has_location(g.graph, "flat"));
    }
  }
}

BOOST_AUTO_TEST_CASE(bytes_and_constants_import_as_the_file_does) {
  const Tensor x = io::read_npy(kDir + "mlp_in_x.npy");
  const io::OnnxModelFile f = io::OnnxModelFile::from_bytes(read_bytes(kDir + "mlp.onnx"), "mlp bytes");
  io::OnnxImportOptions o = options_for({{"x", x.shape()}});
  o.weights_as_parameters = false;
  const io::OnnxGraph g = f.import_graph(o);
  BOOST_TEST(g.weights.empty());
  BOOST_TEST(g.graph.params.size() == 1u);
  Device& cpu = DeviceRegistry::get().at("cpu");
  const Tensor y = run(compile(g.graph, cpu), cpu, {x})[0];
  BOOST_TEST(normalized_error(y, io::read_npy(kDir + "mlp_out0.npy")) <= kTolerance);
  BOOST_TEST(f.input_names() == std::vector<std::string>{"x"});
  BOOST_TEST(f.input_dim_names("x")[0] == "batch");
  BOOST_TEST((f.input_type("x").shape == Shape{-1, 16}));
}

BOOST_AUTO_TEST_CASE(an_unsupported_operator_fails_the_import_listing_every_such_node) {
  test::expect_error([] { io::OnnxModelFile f(kDir + "bad_unsupported.onnx"); },
                     {"bad_unsupported.onnx", "3 nodes", "'where_nonzero' (NonZero)", "'my_einsum' (Einsum)",
                      "'custom' (FancyOp) in domain 'com.example'"});
  try {
    io::OnnxModelFile f(kDir + "bad_unsupported.onnx");
  } catch (const InputError& e) {
    BOOST_TEST(std::string(e.what()).find("fine_relu") == std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(malformed_graphs_and_tensors_are_refused_naming_the_file) {
  auto refused = [](const std::string& file, std::vector<std::string> parts) {
    parts.insert(parts.begin(), file);
    test::expect_error([&] { io::OnnxModelFile f(kDir + file); }, parts);
  };
  refused("bad_cycle.onnx", {"cycle through node"});
  refused("bad_undefined.onnx", {"'reads_nothing' (Add) reads 'nowhere'", "nothing defines"});
  refused("bad_twice.onnx", {"'y' is defined twice"});
  refused("bad_short_raw.onnx", {"initializer 'w'", "raw data of 20 bytes", "needs 24"});
  refused("bad_huge_dims.onnx", {"initializer 'w'", "larger than rlx accepts"});
  refused("bad_external_escape.onnx", {"initializer 'w'", "relative to the model's folder"});
  const io::OnnxModelFile sym(kDir + "bad_symbolic.onnx");
  test::expect_error([&] { sym.import_graph(options_for({})); }, {"bad_symbolic.onnx", "'x' dimension 0 is symbolic ('batch')", "input_shapes"});
  const io::OnnxModelFile mlp(kDir + "mlp.onnx");
  test::expect_error([&] { mlp.import_graph(options_for({{"x", {3, 17}}})); }, {"mlp.onnx", "fixed at 16"});
  test::expect_error([&] { mlp.import_graph(options_for({{"y", {3, 16}}})); }, {"names 'y', which is not a model input"});
  test::expect_error([] { io::OnnxModelFile f(kDir + "missing.onnx"); }, {"missing.onnx"});
  // Without an evaluator the shape computation stays in the graph and Reshape cannot get its shape.
  io::OnnxImportOptions no_fold = options_for({{"x", {3, 6, 4}}});
  no_fold.evaluate = nullptr;
  test::expect_error([&] { io::OnnxModelFile(kDir + "ops13.onnx").import_graph(no_fold); },
                     {"ops13.onnx", "'flat' (Reshape)", "must be known when the model is imported"});
}

BOOST_AUTO_TEST_CASE(truncated_and_garbage_bytes_end_in_an_input_error) {
  const std::string bytes = read_bytes(kDir + "cnn.onnx");
  BOOST_TEST_REQUIRE(bytes.size() > 1000u);
  int refused = 0, parsed = 0;
  for (size_t cut = 0; cut < bytes.size(); cut += 37) {
    try {
      const io::OnnxModelFile f = io::OnnxModelFile::from_bytes(bytes.substr(0, cut), "cut");
      f.import_graph(options_for({{"image", {2, 1, 12, 12}}}));
      ++parsed;  // (a cut between whole fields can leave a smaller valid model)
    } catch (const InputError&) {
      ++refused;
    }
  }
  BOOST_TEST(refused > 0);
  BOOST_TEST_MESSAGE("cnn.onnx cut every 37 bytes: " << refused << " refused, " << parsed << " still imported");
  test::expect_error([] { io::OnnxModelFile::from_bytes("\x08\x07garbage\xff\xff\xff", "junk"); }, {"junk", "not an ONNX model"});
  test::expect_error([] { io::OnnxModelFile::from_bytes("", "empty"); }, {"empty", "no graph nodes"});
}

BOOST_AUTO_TEST_CASE(the_supported_operator_list_covers_bert_and_small_cnns) {
  const std::vector<std::string> ops = io::onnx_supported_ops();
  for (const char* op : {"Gather", "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Erf", "Tanh", "MatMul", "Gemm", "Transpose",
                         "Reshape", "Unsqueeze", "Squeeze", "Concat", "Slice", "Shape", "Cast", "Constant", "ConstantOfShape",
                         "Equal", "Where", "Expand", "Softmax", "ReduceMean", "LayerNormalization", "Relu", "Sigmoid", "Identity",
                         "Dropout", "Range", "Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "Flatten",
                         "BatchNormalization", "Split", "GatherND", "Gelu"})
    BOOST_TEST(std::count(ops.begin(), ops.end(), std::string(op)) == 1, op);
}

BOOST_AUTO_TEST_SUITE_END()

#else

BOOST_AUTO_TEST_CASE(onnx_import_says_it_was_left_out_of_this_build) {
  test::expect_error([] { io::OnnxModelFile f(kDir + "mlp.onnx"); }, {"mlp.onnx", "built without ONNX"});
}

#endif

}  // namespace
