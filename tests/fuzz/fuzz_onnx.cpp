// ONNX importer (src/io/onnx.hpp), on the bytes in memory (OnnxModelFile::from_bytes: the
// parse, the graph's checks and the initializers as for a file; external data refused). A
// model that reads is imported with every symbolic dimension bound to 2 and the reference
// device's evaluator folding what is known (at most 4096 elements a result, so no input of a
// few KiB makes the importer allocate much). Every node of an imported graph must carry a
// location (its ONNX node's name, an input's or an output's), and the graph must have one
// result per model output.
#include <cstdint>
#include <string>
#include <string_view>

#include "common.hpp"
#include "core/error.hpp"
#include "io/onnx.hpp"
#include "runtime/device.hpp"

using namespace rlx;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  RLX_FUZZ_GUARD({
    const io::OnnxModelFile f =
        io::OnnxModelFile::from_bytes(std::string_view(reinterpret_cast<const char*>(data), size), "input");
    io::OnnxImportOptions o;
    o.evaluate = evaluator_for(DeviceRegistry::get().at("reference"));
    o.max_folded_elements = 4096;
    for (const std::string& name : f.input_names()) {
      Shape s = f.input_type(name).shape;
      for (int64_t& d : s)
        if (d < 0) d = 2;
      o.input_shapes[name] = s;
    }
    const io::OnnxGraph g = f.import_graph(o);
    if (g.graph.results.size() != f.output_names().size()) fuzz::finding("the graph's results are not the model's outputs");
    if (g.weights.size() != g.weight_names.size()) fuzz::finding("weights and their names differ in number");
    for (const ir::Node& n : g.graph.nodes)
      if (!n.loc.known()) fuzz::finding("node " + std::to_string(n.id) + " has no location");
  })
  return 0;
}
