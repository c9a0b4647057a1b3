// The ONNX importer of a build without libonnx-dev and protobuf (the "onnx" feature off):
// opening a model says so.
#include "core/error.hpp"
#include "io/onnx.hpp"

namespace rlx::io {

struct OnnxModelFile::Impl {};

namespace {
[[noreturn]] void absent(const std::string& what) {
  throw InputError(what + ": this rlx was built without ONNX support (configure with libonnx-dev, libprotobuf-dev and "
                          "protobuf-compiler installed; the feature line says onnx=ON)");
}
}  // namespace

OnnxModelFile::OnnxModelFile(const std::string& path) { absent(path); }
OnnxModelFile OnnxModelFile::from_bytes(std::string_view, const std::string& name) { absent(name); }
OnnxModelFile::~OnnxModelFile() = default;
OnnxModelFile::OnnxModelFile(OnnxModelFile&&) noexcept = default;
OnnxModelFile& OnnxModelFile::operator=(OnnxModelFile&&) noexcept = default;
const std::string& OnnxModelFile::path() const { absent("onnx"); }
int64_t OnnxModelFile::opset() const { absent("onnx"); }
std::string OnnxModelFile::producer() const { absent("onnx"); }
std::vector<std::string> OnnxModelFile::input_names() const { absent("onnx"); }
std::vector<std::string> OnnxModelFile::output_names() const { absent("onnx"); }
TensorType OnnxModelFile::input_type(const std::string&) const { absent("onnx"); }
std::vector<std::string> OnnxModelFile::input_dim_names(const std::string&) const { absent("onnx"); }
OnnxGraph OnnxModelFile::import_graph(const OnnxImportOptions&) const { absent("onnx"); }
std::vector<std::string> onnx_supported_ops() { return {}; }

}  // namespace rlx::io
