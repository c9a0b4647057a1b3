// The ONNX reader: the protobuf, its tensors, the graph's checks, and the import loop that
// walks the nodes in order, folds what is known and converts the rest (onnx_ops.cpp).
#include "io/onnx.hpp"

#include <google/protobuf/io/coded_stream.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/checked.hpp"
#include "io/file_bytes.hpp"
#include "io/onnx_import.hpp"
#include "ir/op_registry.hpp"

namespace rlx::io {

namespace fs = std::filesystem;
using namespace onnx_detail;

namespace onnx_detail {

std::optional<DType> dtype_of_onnx(int32_t t) {
  switch (t) {
    case onnx::TensorProto::FLOAT: return DType::F32;
    case onnx::TensorProto::UINT8: return DType::U8;
    case onnx::TensorProto::INT8: return DType::I8;
    case onnx::TensorProto::INT32: return DType::I32;
    case onnx::TensorProto::INT64: return DType::I64;
    case onnx::TensorProto::BOOL: return DType::Bool;
    case onnx::TensorProto::FLOAT16: return DType::F16;
    case onnx::TensorProto::DOUBLE: return DType::F64;
    case onnx::TensorProto::BFLOAT16: return DType::BF16;
    default: return std::nullopt;
  }
}

std::string onnx_type_name(int32_t t) {
  if (onnx::TensorProto::DataType_IsValid(t)) return onnx::TensorProto::DataType_Name(onnx::TensorProto::DataType(t));
  return "data type " + std::to_string(t);
}

namespace {

// The elements of a typed field, stored into out (n of them, already checked).
template <class Field, class Store>
void copy_field(const Field& f, int64_t n, Store store) {
  for (int64_t i = 0; i < n; ++i) store(i, f.Get(int(i)));
}

// External data: a file beside the model (no absolute path, no "..") and a byte range in it.
std::string read_external(const onnx::TensorProto& t, const std::string& what, const std::string& folder, size_t bytes) {
  if (folder.empty()) throw InputError(what + ": its data is in an external file, which a model read from memory cannot reach");
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& e : t.external_data()) {
    auto number = [&](const std::string& v) {
      if (v.empty() || v.size() > 18 || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
        throw InputError(what + ": external data " + e.key() + " '" + printable(v) + "' is not a byte count");
      return std::stoll(v);
    };
    if (e.key() == "location") location = e.value();
    else if (e.key() == "offset") offset = number(e.value());
    else if (e.key() == "length") length = number(e.value());
    else if (e.key() != "checksum")
      throw InputError(what + ": external data key '" + printable(e.key()) + "' is not supported (location, offset, length)");
  }
  const fs::path rel(location);
  if (location.empty() || rel.is_absolute() ||
      std::any_of(rel.begin(), rel.end(), [](const fs::path& p) { return p == ".."; }))
    throw InputError(what + ": external data location '" + printable(location) +
                     "' must be a file name relative to the model's folder (no absolute path, no '..')");
  if (length >= 0 && size_t(length) != bytes)
    throw InputError(what + ": external data length " + std::to_string(length) + " bytes, its type needs " + std::to_string(bytes));
  const std::string file = (fs::path(folder) / rel).string();
  std::ifstream f(file, std::ios::binary);
  std::error_code ec;
  const auto size = fs::file_size(file, ec);
  if (!f || ec) throw InputError(what + ": cannot open its external data file " + file);
  if (uint64_t(offset) > size || size - uint64_t(offset) < bytes)
    throw InputError(what + ": " + file + " holds " + std::to_string(size) + " bytes, the tensor needs " + std::to_string(bytes) +
                     " from offset " + std::to_string(offset));
  std::string data(bytes, '\0');
  f.seekg(offset);
  f.read(data.data(), std::streamsize(bytes));
  if (!f) throw InputError(what + ": reading " + file + " failed");
  return data;
}

}  // namespace

Tensor read_tensor(const onnx::TensorProto& t, const std::string& what, const std::string& folder) {
  const std::optional<DType> dt = dtype_of_onnx(t.data_type());
  if (!dt) throw InputError(what + ": element type " + onnx_type_name(t.data_type()) + " is not supported");
  if (t.has_segment()) throw InputError(what + ": segmented tensors are not supported");
  Shape shape;
  int64_t n = 1;
  for (int64_t d : t.dims()) {
    if (d < 0) throw InputError(what + ": negative dimension " + std::to_string(d));
    shape.push_back(d);
    n = checked_mul(n, d, what + " (its element count)");
  }
  const size_t bytes = dtype_storage_bytes(*dt, n);
  const bool external = t.data_location() == onnx::TensorProto::EXTERNAL;
  // (raw, external or typed: the data's length must match the dims before anything is allocated)
  const std::string* raw = t.has_raw_data() ? &t.raw_data() : nullptr;
  std::string ext;
  if (external) {
    ext = read_external(t, what, folder, bytes);
    raw = &ext;
  }
  if (raw) {
    if (raw->size() != bytes)
      throw InputError(what + ": raw data of " + std::to_string(raw->size()) + " bytes, " + shape_str(shape) + " " +
                       dtype_name(*dt) + " needs " + std::to_string(bytes));
    Tensor r = Tensor::empty(*dt, shape);
    if (bytes) std::memcpy(r.raw(), raw->data(), bytes);
    if (*dt == DType::Bool)
      for (int64_t i = 0; i < n; ++i) r.data<bool>()[i] = reinterpret_cast<const unsigned char*>(raw->data())[i] != 0;
    return r;
  }
  auto count_is = [&](int64_t have, const char* field) {
    if (have != n)
      throw InputError(what + ": " + field + " holds " + std::to_string(have) + " values, " + shape_str(shape) + " needs " +
                       std::to_string(n));
  };
  // (the typed field each element type uses, its count checked before allocating)
  switch (*dt) {
    case DType::F32: count_is(t.float_data_size(), "float_data"); break;
    case DType::F64: count_is(t.double_data_size(), "double_data"); break;
    case DType::I64: count_is(t.int64_data_size(), "int64_data"); break;
    default: count_is(t.int32_data_size(), "int32_data");
  }
  Tensor r = Tensor::empty(*dt, shape);
  switch (*dt) {
    case DType::F32: copy_field(t.float_data(), n, [&](int64_t i, float v) { r.data<float>()[i] = v; }); break;
    case DType::F64: copy_field(t.double_data(), n, [&](int64_t i, double v) { r.data<double>()[i] = v; }); break;
    case DType::I64: copy_field(t.int64_data(), n, [&](int64_t i, int64_t v) { r.data<int64_t>()[i] = v; }); break;
    case DType::F16:
    case DType::BF16:
      // (int32_data holds each 16-bit pattern in the low half)
      copy_field(t.int32_data(), n, [&](int64_t i, int32_t v) {
        const uint16_t bits = uint16_t(v);
        std::memcpy(static_cast<char*>(r.raw()) + 2 * i, &bits, 2);
      });
      break;
    case DType::Bool:
      copy_field(t.int32_data(), n, [&](int64_t i, int32_t v) { r.data<bool>()[i] = v != 0; });
      break;
    default:
      visit_dtype(*dt, [&](auto z) {
        using T = decltype(z);
        if constexpr (std::is_integral_v<T>)
          copy_field(t.int32_data(), n, [&](int64_t i, int32_t v) { r.data<T>()[i] = T(v); });
      });
  }
  return r;
}

}  // namespace onnx_detail

// ---- NodeContext ----

const onnx::AttributeProto* NodeContext::attr(const char* name) const {
  for (const auto& a : n_.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

void NodeContext::fail(const std::string& why) const { throw InputError(why); }

Var NodeContext::var(size_t i) const {
  if (!has(i)) fail("input " + std::to_string(i) + " is missing");
  return materialize_(i);
}

const TensorType& NodeContext::type(size_t i) const {
  if (!has(i)) fail("input " + std::to_string(i) + " is missing");
  return types_[i];
}

std::vector<int64_t> NodeContext::ints(size_t i, const char* what) const {
  const Tensor* t = known(i);
  if (!has(i)) fail(std::string(what) + " (input " + std::to_string(i) + ") is missing");
  if (!t)
    fail(std::string(what) + " (input " + std::to_string(i) + ", '" + n_.input(int(i)) +
         "') must be known when the model is imported; it is computed from the inputs' values");
  if (t->dtype() != DType::I64 && t->dtype() != DType::I32)
    fail(std::string(what) + " must be i64 or i32, got " + dtype_name(t->dtype()));
  std::vector<int64_t> v(size_t(t->numel()));
  for (int64_t k = 0; k < t->numel(); ++k)
    v[size_t(k)] = t->dtype() == DType::I64 ? t->data<int64_t>()[k] : t->data<int32_t>()[k];
  return v;
}

namespace {
const char* kind_name(int t) {
  return onnx::AttributeProto::AttributeType_IsValid(t)
             ? onnx::AttributeProto::AttributeType_Name(onnx::AttributeProto::AttributeType(t)).c_str()
             : "?";
}
}  // namespace

#define RLX_ATTR_CHECK(kind)                                                                                     \
  if (a->type() != onnx::AttributeProto::kind)                                                                   \
    fail(std::string("attribute ") + name + " must be " + #kind + ", the file has " + kind_name(a->type()));

int64_t NodeContext::attr_int(const char* name, int64_t def) const {
  const auto* a = attr(name);
  if (!a) return def;
  RLX_ATTR_CHECK(INT)
  return a->i();
}
double NodeContext::attr_float(const char* name, double def) const {
  const auto* a = attr(name);
  if (!a) return def;
  RLX_ATTR_CHECK(FLOAT)
  return a->f();
}
std::string NodeContext::attr_string(const char* name, const std::string& def) const {
  const auto* a = attr(name);
  if (!a) return def;
  RLX_ATTR_CHECK(STRING)
  return a->s();
}
std::vector<int64_t> NodeContext::attr_ints(const char* name, std::vector<int64_t> def) const {
  const auto* a = attr(name);
  if (!a) return def;
  RLX_ATTR_CHECK(INTS)
  return {a->ints().begin(), a->ints().end()};
}
const onnx::TensorProto* NodeContext::attr_tensor(const char* name) const {
  const auto* a = attr(name);
  if (!a) return nullptr;
  RLX_ATTR_CHECK(TENSOR)
  return &a->t();
}
#undef RLX_ATTR_CHECK

// ---- the file ----

namespace {

bool default_domain(const std::string& d) { return d.empty() || d == "ai.onnx"; }

std::string node_label(const onnx::NodeProto& n) {
  const std::string out = n.output_size() ? n.output(0) : std::string();
  return "'" + printable(n.name().empty() ? out : n.name()) + "' (" + printable(n.op_type()) + ")";
}

// Node order: every input defined before use (graph inputs, initializers, earlier outputs),
// no name defined twice, no cycle; every operator supported (the error lists all that are not).
void check_graph(OnnxModelFile::Impl& m) {
  const onnx::GraphProto& g = m.model.graph();
  const std::string& path = m.path;
  std::map<std::string, int> producer;  // name -> node index, or -1 for inputs and initializers
  auto define = [&](const std::string& name, int by, const std::string& what) {
    if (name.empty()) throw InputError(path + ": " + what + " has an empty name");
    if (!producer.emplace(name, by).second) throw InputError(path + ": the value '" + printable(name) + "' is defined twice (" + what + ")");
  };
  for (const auto& t : g.initializer()) define(t.name(), -1, "an initializer");
  if (g.sparse_initializer_size()) throw InputError(path + ": sparse initializers are not supported");
  for (const auto& v : g.input()) {
    if (m.initializers.count(v.name())) continue;  // (IR < 4 lists initializers as inputs)
    define(v.name(), -1, "a graph input");
    m.inputs.push_back(v.name());
    m.input_info[v.name()] = &v;
  }
  std::vector<std::string> unsupported;
  const auto& table = converters();
  for (int i = 0; i < g.node_size(); ++i) {
    const onnx::NodeProto& n = g.node(i);
    for (const auto& o : n.output())
      if (!o.empty()) define(o, i, "an output of node " + node_label(n));
    if (!default_domain(n.domain()) || !table.count(n.op_type()))
      unsupported.push_back(node_label(n) + (default_domain(n.domain()) ? "" : " in domain '" + printable(n.domain()) + "'"));
  }
  if (!unsupported.empty()) {
    std::string list;
    for (const auto& u : unsupported) list += "\n  " + u;
    throw InputError(path + ": " + std::to_string(unsupported.size()) + " node" + (unsupported.size() == 1 ? "" : "s") +
                     " with an operator the ONNX importer does not support:" + list);
  }
  // Kahn's order over node -> node edges (inputs of other kinds are ready from the start).
  std::vector<int> pending(size_t(g.node_size()), 0);
  std::vector<std::vector<int>> users(size_t(g.node_size()));
  for (int i = 0; i < g.node_size(); ++i)
    for (const auto& in : g.node(i).input()) {
      if (in.empty()) continue;
      auto it = producer.find(in);
      if (it == producer.end())
        throw InputError(path + ": node " + node_label(g.node(i)) + " reads '" + printable(in) + "', which nothing defines");
      if (it->second >= 0) {
        ++pending[size_t(i)];
        users[size_t(it->second)].push_back(i);
      }
    }
  std::vector<int> ready;
  for (int i = g.node_size() - 1; i >= 0; --i)
    if (!pending[size_t(i)]) ready.push_back(i);
  while (!ready.empty()) {
    const int i = ready.back();
    ready.pop_back();
    m.order.push_back(&g.node(i));
    // (users in reverse so that equal-rank nodes keep the file's order)
    for (auto it = users[size_t(i)].rbegin(); it != users[size_t(i)].rend(); ++it)
      if (--pending[size_t(*it)] == 0) ready.push_back(*it);
  }
  if (int(m.order.size()) != g.node_size()) {
    for (int i = 0; i < g.node_size(); ++i)
      if (pending[size_t(i)]) throw InputError(path + ": the graph has a cycle through node " + node_label(g.node(i)));
  }
  for (const auto& o : g.output())
    if (!producer.count(o.name())) throw InputError(path + ": the graph output '" + printable(o.name()) + "' is not defined");
}

void load(OnnxModelFile::Impl& m, const unsigned char* data, size_t size) {
  if (size > size_t(INT_MAX)) throw InputError(m.path + ": " + std::to_string(size) + " bytes; protobuf models are at most 2 GiB");
  google::protobuf::io::CodedInputStream in(data, int(size));
  in.SetRecursionLimit(64);
  if (!m.model.ParseFromCodedStream(&in) || !in.ConsumedEntireMessage())
    throw InputError(m.path + ": not an ONNX model (the protobuf message does not parse: truncated or another format)");
  if (!m.model.has_graph() || m.model.graph().node_size() == 0) throw InputError(m.path + ": the model has no graph nodes");
  for (const auto& o : m.model.opset_import())
    if (default_domain(o.domain())) m.opset = o.version();
  if (m.opset == 0) throw InputError(m.path + ": no opset_import for the default ONNX domain");
  if (m.opset < 7 || m.opset > 23)
    throw InputError(m.path + ": opset " + std::to_string(m.opset) + " is outside the importer's 7..23");
  for (const auto& t : m.model.graph().initializer())
    m.initializers.emplace(t.name(), read_tensor(t, m.path + ": initializer '" + printable(t.name()) + "'", m.folder));
  check_graph(m);
  for (const auto& name : m.inputs) {
    const auto& ty = m.input_info.at(name)->type();
    if (!ty.has_tensor_type()) throw InputError(m.path + ": the input '" + printable(name) + "' is not a tensor");
    if (!dtype_of_onnx(ty.tensor_type().elem_type()))
      throw InputError(m.path + ": the input '" + printable(name) + "' has element type " +
                       onnx_type_name(ty.tensor_type().elem_type()) + ", which rlx lacks");
    if (!ty.tensor_type().has_shape()) throw InputError(m.path + ": the input '" + printable(name) + "' has no shape (not even a rank)");
  }
}

}  // namespace

OnnxModelFile::OnnxModelFile(const std::string& path) : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  impl_->folder = fs::path(path).parent_path().string();
  if (impl_->folder.empty()) impl_->folder = ".";
  const auto bytes = FileBytes::map(path, "an .onnx file");
  load(*impl_, bytes->data(), bytes->size());
}

OnnxModelFile OnnxModelFile::from_bytes(std::string_view bytes, const std::string& name) {
  OnnxModelFile f;
  f.impl_ = std::make_unique<Impl>();
  f.impl_->path = name;
  load(*f.impl_, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  return f;
}

OnnxModelFile::~OnnxModelFile() = default;
OnnxModelFile::OnnxModelFile(OnnxModelFile&&) noexcept = default;
OnnxModelFile& OnnxModelFile::operator=(OnnxModelFile&&) noexcept = default;

const std::string& OnnxModelFile::path() const { return impl_->path; }
int64_t OnnxModelFile::opset() const { return impl_->opset; }
std::string OnnxModelFile::producer() const {
  return impl_->model.producer_name() + (impl_->model.producer_version().empty() ? "" : " " + impl_->model.producer_version());
}
std::vector<std::string> OnnxModelFile::input_names() const { return impl_->inputs; }
std::vector<std::string> OnnxModelFile::output_names() const {
  std::vector<std::string> r;
  for (const auto& o : impl_->model.graph().output()) r.push_back(o.name());
  return r;
}

TensorType OnnxModelFile::input_type(const std::string& name) const {
  auto it = impl_->input_info.find(name);
  if (it == impl_->input_info.end()) throw InputError(impl_->path + ": the model has no input '" + name + "'");
  const auto& tt = it->second->type().tensor_type();
  TensorType t{*dtype_of_onnx(tt.elem_type()), {}};
  for (const auto& d : tt.shape().dim()) t.shape.push_back(d.has_dim_value() ? d.dim_value() : -1);
  return t;
}

std::vector<std::string> OnnxModelFile::input_dim_names(const std::string& name) const {
  input_type(name);
  std::vector<std::string> r;
  for (const auto& d : impl_->input_info.at(name)->type().tensor_type().shape().dim()) r.push_back(d.dim_param());
  return r;
}

// ---- the import ----

namespace {

struct Slot {
  std::optional<Tensor> known;
  Var var;
  bool weight = false;  // an initializer
};

class Importer {
 public:
  Importer(const OnnxModelFile::Impl& m, const OnnxImportOptions& o) : m_(m), o_(o) {}

  OnnxGraph run() {
    out_.opset = m_.opset;
    ir::Graph& g = out_.graph;
    g.name = "onnx";
    for (const auto& [name, t] : m_.initializers) slots_[name] = Slot{t, {}, true};
    for (const auto& [name, shape] : o_.input_shapes)
      if (!m_.input_info.count(name)) throw InputError(m_.path + ": input_shapes names '" + name + "', which is not a model input");
    for (const auto& name : m_.inputs) bind_input(name);
    for (const onnx::NodeProto* n : m_.order) convert(*n);
    for (const auto& o : m_.model.graph().output()) {
      out_.outputs.push_back(o.name());
      LocationScope at(ir::Location{.name = o.name()});
      g.results.push_back(var_of(o.name()).value());
    }
    return std::move(out_);
  }

 private:
  void bind_input(const std::string& name) {
    const auto& tt = m_.input_info.at(name)->type().tensor_type();
    const DType dt = *dtype_of_onnx(tt.elem_type());
    Shape file_shape;
    std::vector<std::string> dim_names;
    for (const auto& d : tt.shape().dim()) {
      if (d.has_dim_value() && d.dim_value() < 0)
        throw InputError(m_.path + ": input '" + name + "' has the negative dimension " + std::to_string(d.dim_value()));
      file_shape.push_back(d.has_dim_value() ? d.dim_value() : -1);
      dim_names.push_back(d.has_dim_param() ? d.dim_param() : "?");
    }
    Shape s = file_shape;
    auto given = o_.input_shapes.find(name);
    if (given != o_.input_shapes.end()) {
      if (given->second.size() != file_shape.size())
        throw InputError(m_.path + ": input '" + name + "' has rank " + std::to_string(file_shape.size()) + ", input_shapes gives " +
                         shape_str(given->second));
      for (size_t i = 0; i < s.size(); ++i)
        if (file_shape[i] >= 0 && given->second[i] != file_shape[i])
          throw InputError(m_.path + ": input '" + name + "' has dimension " + std::to_string(i) + " fixed at " +
                           std::to_string(file_shape[i]) + ", input_shapes gives " + shape_str(given->second));
      s = given->second;
    }
    int64_t n = 1;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] < 0)
        throw InputError(m_.path + ": input '" + name + "' dimension " + std::to_string(i) + " is symbolic ('" +
                         printable(dim_names[i]) + "'): bind it with OnnxImportOptions::input_shapes");
      n = checked_mul(n, s[i], m_.path + ": input '" + name + "'");
    }
    LocationScope at(ir::Location{.name = name});
    slots_[name] = Slot{std::nullopt, input(out_.graph, name, dt, s), false};
    out_.inputs.push_back(name);
  }

  // The value `name` in the graph: a known tensor becomes a parameter (an initializer, when
  // weights are parameters) or a constant the first time something reads it as data.
  Var var_of(const std::string& name) {
    Slot& s = slots_.at(name);
    if (s.var.defined()) return s.var;
    if (s.weight && o_.weights_as_parameters) {
      LocationScope at(ir::Location{.name = name});  // (a weight is located by its initializer's name)
      s.var = input(out_.graph, name, s.known->dtype(), s.known->shape());
      out_.weight_names.push_back(name);
      out_.weights.push_back(*s.known);
    } else {
      s.var = constant(out_.graph, *s.known);
    }
    return s.var;
  }

  void convert(const onnx::NodeProto& n) {
    const std::string label = node_label(n);
    const std::string loc = n.name().empty() ? n.op_type() + ":" + (n.output_size() ? n.output(0) : "") : n.name();
    std::vector<std::optional<Tensor>> known;
    std::vector<TensorType> types;
    bool all_known = true;
    for (const auto& in : n.input()) {
      if (in.empty()) {
        known.emplace_back();
        types.emplace_back();
        continue;
      }
      const Slot& s = slots_.at(in);
      known.push_back(s.known);
      types.push_back(s.known ? s.known->type() : s.var.type());
      all_known = all_known && s.known.has_value();
    }
    const Converter& convert = converters().at(n.op_type());
    std::vector<Result> results;
    try {
      if (all_known && o_.evaluate) results = fold(n, convert, known, types);
      if (results.empty()) {
        LocationScope at(ir::Location{.name = loc});
        NodeContext c(n, m_.opset, out_.graph, known, [&](size_t i) { return var_of(n.input(int(i))); }, types,
                      o_.max_folded_elements);
        results = convert(c);
      }
    } catch (const Error& e) {
      throw InputError(m_.path + ": node " + label + ": " + e.what());
    }
    for (int i = 0; i < n.output_size(); ++i) {
      if (n.output(i).empty()) continue;
      if (size_t(i) >= results.size())
        throw InputError(m_.path + ": node " + label + ": the output '" + printable(n.output(i)) + "' is not supported");
      slots_[n.output(i)] = Slot{results[size_t(i)].known, results[size_t(i)].var, false};
    }
  }

  // A node whose inputs are all known runs at import: converted into a scratch graph of
  // constants, which `evaluate` runs node by node. Empty when some node cannot run there (an
  // L1 op, a result too large): the node is then converted into the model's graph.
  std::vector<Result> fold(const onnx::NodeProto& n, const Converter& convert, const std::vector<std::optional<Tensor>>& known,
                           const std::vector<TensorType>& types) {
    ir::Graph scratch;
    std::vector<Var> consts(known.size());
    NodeContext c(n, m_.opset, scratch, known,
                  [&](size_t i) {
                    if (!consts[i].defined()) consts[i] = constant(scratch, *known[i]);
                    return consts[i];
                  },
                  types, o_.max_folded_elements);
    std::vector<Result> r = convert(c);
    std::vector<Tensor> values(scratch.nodes.size());
    const auto& constant_op = ir::OpRegistry::get().at("constant");
    const auto& reshape_op = ir::OpRegistry::get().at("reshape");
    for (size_t k = 0; k < scratch.nodes.size(); ++k) {
      const ir::Node& node = scratch.nodes[k];
      if (node.op == &constant_op) {
        values[k] = node.attrs.get_tensor("value");
        continue;
      }
      if (node.outputs.size() != 1 || numel(node.outputs[0].shape) > o_.max_folded_elements || !node.regions.empty())
        return {};
      std::vector<Tensor> args;
      for (const ir::Value& v : node.inputs) args.push_back(values[size_t(v.node)]);
      if (node.op == &reshape_op) {  // (a view in the runtime, no device kernel: the same bytes, a new shape)
        values[k] = args[0].clone().reshape(node.outputs[0].shape);
        continue;
      }
      std::optional<std::vector<Tensor>> res;
      try {
        res = o_.evaluate(node, scratch, args);
      } catch (const Error&) {
        return {};
      }
      if (!res || res->size() != 1) return {};
      values[k] = (*res)[0];
    }
    for (Result& x : r)
      if (!x.known) {
        if (x.var.graph() != &scratch) return {};
        x = Result(values[size_t(x.var.value().node)]);
      }
    return r;
  }

  const OnnxModelFile::Impl& m_;
  const OnnxImportOptions& o_;
  OnnxGraph out_;
  std::map<std::string, Slot> slots_;
};

}  // namespace

OnnxGraph OnnxModelFile::import_graph(const OnnxImportOptions& options) const { return Importer(*impl_, options).run(); }

std::vector<std::string> onnx_supported_ops() {
  std::vector<std::string> r;
  for (const auto& [name, c] : converters()) r.push_back(name);
  return r;
}

}  // namespace rlx::io
