// The graph parser: a hand-written lexer, recursive descent into GraphSyntax, then
// GraphBuilder, which adds the nodes through Graph::add_param / add_multi so the text
// is checked by the same arity, attribute and shape rules as the front end.
#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>

#include "core/error.hpp"
#include "ir/op_registry.hpp"
#include "ir/text.hpp"

namespace rlx::ir {
namespace text {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '_' || c == '.';
}

// The scope key of a %name / @name token: quoted names that are not identifiers keep a
// leading quote so %"3" (a parameter called "3") never meets %3 (node 3).
std::string key_of(const Token& t) { return t.quoted && !is_identifier(t.text) ? "\"" + t.text : t.text; }
std::string shown(const std::string& key) { return key.starts_with('"') ? "%" + quote(key.substr(1)) : "%" + key; }

std::string all_dtype_names() {
  std::string s;
  for (DType t : kAllDTypes) s += (s.empty() ? "" : ", ") + std::string(dtype_name(t));
  return s;
}

// ---- attribute literals: parsed as written, then coerced to the op's attribute kinds ----

struct Lit {
  enum Kind { Int, Float, Bool, String, Ident, List, Dense, Pair } kind = Int;
  std::string text;  // number spelling, string contents, identifier
  bool b = false;
  std::vector<Lit> items;  // List, Dense, Pair
  bool splat = false;      // dense<v>: one value for every element
  bool has_type = false;   // dense<...> : f32[2]
  TensorType type;
  int line = 0;
};

std::string lit_kind(const Lit& l) {
  switch (l.kind) {
    case Lit::Int: return "int";
    case Lit::Float: return "float";
    case Lit::Bool: return "bool";
    case Lit::String: return "string";
    case Lit::Ident: return dtype_from_name(l.text) ? "dtype" : "identifier '" + l.text + "'";
    case Lit::List: return "list";
    case Lit::Dense: return "tensor";
    case Lit::Pair: return "complex pair";
  }
  return "?";
}

const char* expected_kind(AttrKind k) {
  switch (k) {
    case AttrKind::Int: return "int";
    case AttrKind::Float: return "float";
    case AttrKind::Bool: return "bool";
    case AttrKind::String: return "string";
    case AttrKind::Ints: return "list of ints";
    case AttrKind::Floats: return "list of floats";
    case AttrKind::DType: return "dtype";
    case AttrKind::Tensor: return "tensor";
  }
  return "?";
}

Lit parse_literal(Parser& p);

std::vector<Lit> parse_items(Parser& p, std::string_view close, std::string_view what) {
  std::vector<Lit> items;
  if (!p.at(close)) {
    do items.push_back(parse_literal(p));
    while (p.accept(","));
  }
  p.expect(close, what);
  return items;
}

Lit parse_literal(Parser& p) {
  const Token& t = p.peek();
  Lit l;
  l.line = t.line;
  Parser::Nest nest(p, t.line);
  switch (t.kind) {
    case Token::Int: l.kind = Lit::Int; l.text = p.next().text; return l;
    case Token::Float: l.kind = Lit::Float; l.text = p.next().text; return l;
    case Token::String: l.kind = Lit::String; l.text = p.next().text; return l;
    case Token::Ident:
      if (t.text == "true" || t.text == "false") {
        l.kind = Lit::Bool;
        l.b = p.next().text == "true";
      } else if (t.text == "nan" || t.text == "inf") {
        l.kind = Lit::Float;
        l.text = p.next().text;
      } else if (t.text == "dense" && p.at("<", 1)) {
        p.next();
        p.next();
        l.kind = Lit::Dense;
        if (p.accept("[")) {
          l.items = parse_items(p, "]", "to close the values of dense<[...]>");
        } else {
          l.items.push_back(parse_literal(p));
          l.splat = true;
        }
        p.expect(">", "to close dense<...>");
        if (p.accept(":")) {
          l.has_type = true;
          l.type = p.parse_type();
        }
      } else {
        l.kind = Lit::Ident;
        l.text = p.next().text;
      }
      return l;
    case Token::Punct:
      if (t.text == "[") {
        p.next();
        l.kind = Lit::List;
        l.items = parse_items(p, "]", "to close the list");
        return l;
      }
      if (t.text == "(") {
        p.next();
        l.kind = Lit::Pair;
        l.items.push_back(parse_literal(p));
        p.expect(",", "between the real and imaginary parts");
        l.items.push_back(parse_literal(p));
        p.expect(")", "to close the complex value");
        return l;
      }
      break;
    default: break;
  }
  p.fail_expected("an attribute value");
}

int64_t lit_int(Parser& p, const Lit& l) {
  int64_t v = 0;
  auto r = std::from_chars(l.text.data(), l.text.data() + l.text.size(), v);
  if (r.ec != std::errc() || r.ptr != l.text.data() + l.text.size())
    p.fail(l.line, "integer '" + l.text + "' is out of range for int64");
  return v;
}

template <class F>
F lit_float(Parser& p, const Lit& l) {
  F v = 0;
  auto r = std::from_chars(l.text.data(), l.text.data() + l.text.size(), v);
  if (r.ec != std::errc() || r.ptr != l.text.data() + l.text.size())
    p.fail(l.line, "number '" + l.text + "' is out of range for " + (sizeof(F) == 4 ? "f32" : "f64"));
  return v;
}

bool is_number(const Lit& l) { return l.kind == Lit::Int || l.kind == Lit::Float; }

// Reads dense<...> as a host tensor of type t, flat and row-major.
Tensor read_dense(Parser& p, const Lit& l, const TensorType& t) {
  int64_t n = numel(t.shape);  // parse_type has checked it
  p.charge_constant(l.line, t, int64_t(dtype_storage_bytes(t.dtype, n)));
  if (!(int64_t(l.items.size()) == n || (l.splat && n > 0)))
    p.fail(l.line, "dense<...> has " + std::to_string(l.items.size()) + " value(s) but " + t.str() + " has " +
                       std::to_string(n) + " element(s)");
  Tensor out = Tensor::zeros(t.dtype, t.shape);
  auto bad = [&](const Lit& e, const std::string& want) {
    p.fail(e.line, "dense<...> of " + std::string(dtype_name(t.dtype)) + " expects " + want + ", got " + lit_kind(e));
  };
  auto integer = [&](const Lit& e, int64_t lo, int64_t hi) {
    if (e.kind != Lit::Int) bad(e, "integers");
    int64_t v = lit_int(p, e);
    if (v < lo || v > hi)
      p.fail(e.line, "value " + e.text + " is out of range for " + dtype_name(t.dtype) + " [" + std::to_string(lo) +
                         ", " + std::to_string(hi) + "]");
    return v;
  };
  auto real32 = [&](const Lit& e) {
    if (!is_number(e)) bad(e, "numbers");
    return lit_float<float>(p, e);
  };
  // A splat converts its one value once and copies it (a splat may fill a constant of up to
  // kMaxConstantBytes: converting the text again for each element costs seconds).
  const int64_t converted = l.splat ? std::min<int64_t>(n, 1) : n;
  for (int64_t i = 0; i < converted; ++i) {
    const Lit& e = l.items[l.splat ? 0 : size_t(i)];
    switch (t.dtype) {
      case DType::Bool:
        if (e.kind != Lit::Bool) bad(e, "true or false");
        out.data<bool>()[i] = e.b;
        break;
      case DType::I8: out.data<int8_t>()[i] = int8_t(integer(e, INT8_MIN, INT8_MAX)); break;
      case DType::U8: out.data<uint8_t>()[i] = uint8_t(integer(e, 0, UINT8_MAX)); break;
      case DType::I32: out.data<int32_t>()[i] = int32_t(integer(e, INT32_MIN, INT32_MAX)); break;
      case DType::I64: out.data<int64_t>()[i] = integer(e, INT64_MIN, INT64_MAX); break;
      case DType::I4: {
        // Packed two per byte, element 2k in the low nibble.
        auto v = uint8_t(integer(e, -8, 7) & 0xf);
        out.data<uint8_t>()[i / 2] |= uint8_t(v << (4 * (i % 2)));
        break;
      }
      case DType::F16: out.data<f16>()[i] = f16(real32(e)); break;
      case DType::BF16: out.data<bf16>()[i] = bf16(real32(e)); break;
      case DType::F32: out.data<float>()[i] = real32(e); break;
      case DType::F64:
        if (!is_number(e)) bad(e, "numbers");
        out.data<double>()[i] = lit_float<double>(p, e);
        break;
      case DType::C64:
        if (e.kind == Lit::Pair)
          out.data<c64>()[i] = c64(real32(e.items[0]), real32(e.items[1]));
        else if (is_number(e))
          out.data<c64>()[i] = c64(real32(e), 0.0f);
        else
          bad(e, "(re, im) pairs");
        break;
    }
  }
  if (l.splat && n > 1) {
    auto* bytes = static_cast<unsigned char*>(out.raw());
    if (t.dtype == DType::I4) {
      // Two elements a byte: both nibbles of every byte, the last byte's high nibble left 0
      // when n is odd.
      const unsigned char v = bytes[0] & 0xf;
      const int64_t nbytes = (n + 1) / 2;
      std::memset(bytes, v | (v << 4), size_t(nbytes));
      if (n % 2) bytes[nbytes - 1] = v;
    } else {
      // Doubling: the filled prefix copied after itself, log2(n) copies.
      const size_t total = size_t(n) * dtype_size(t.dtype);
      for (size_t have = dtype_size(t.dtype); have < total; have *= 2)
        std::memcpy(bytes + have, bytes, std::min(have, total - have));
    }
  }
  return out;
}

// Converts literal `l` of attribute `name` to the kind the op declares for it. Attributes
// the op does not declare keep the literal's own kind; Graph::add judges them.
AttrValue coerce(Parser& p, const OpDef& op, const std::string& name, const Lit& l, const NodeSyntax& n) {
  const AttrSpec* spec = op.attr_spec(name);
  AttrKind kind;
  if (spec) {
    kind = spec->kind;
  } else {
    switch (l.kind) {
      case Lit::Int: kind = AttrKind::Int; break;
      case Lit::Float: kind = AttrKind::Float; break;
      case Lit::Bool: kind = AttrKind::Bool; break;
      case Lit::String: kind = AttrKind::String; break;
      case Lit::Ident: kind = AttrKind::DType; break;
      case Lit::Dense: kind = AttrKind::Tensor; break;
      case Lit::List:
        kind = std::any_of(l.items.begin(), l.items.end(), [](const Lit& e) { return e.kind != Lit::Int; })
                   ? AttrKind::Floats
                   : AttrKind::Ints;
        break;
      default: kind = AttrKind::Float; break;
    }
  }
  std::string where = "attribute '" + name + "' of op '" + op.name + "'";
  auto mismatch = [&](const std::string& got) {
    p.fail(l.line, where + " expects " + expected_kind(kind) + ", got " + got);
  };
  switch (kind) {
    case AttrKind::Int:
      if (l.kind != Lit::Int) mismatch(lit_kind(l));
      return lit_int(p, l);
    case AttrKind::Float:
      if (!is_number(l)) mismatch(lit_kind(l));
      return lit_float<double>(p, l);
    case AttrKind::Bool:
      if (l.kind != Lit::Bool) mismatch(lit_kind(l));
      return l.b;
    case AttrKind::String:
      if (l.kind != Lit::String) mismatch(lit_kind(l));
      return l.text;
    case AttrKind::DType: {
      if (l.kind != Lit::Ident) mismatch(lit_kind(l));
      auto t = dtype_from_name(l.text);
      if (!t) p.fail(l.line, where + " expects a dtype (" + all_dtype_names() + "), got '" + l.text + "'");
      return *t;
    }
    case AttrKind::Ints: {
      if (l.kind != Lit::List) mismatch(lit_kind(l));
      std::vector<int64_t> v;
      for (const Lit& e : l.items) {
        if (e.kind != Lit::Int) mismatch("a list containing " + lit_kind(e));
        v.push_back(lit_int(p, e));
      }
      return v;
    }
    case AttrKind::Floats: {
      if (l.kind != Lit::List) mismatch(lit_kind(l));
      std::vector<double> v;
      for (const Lit& e : l.items) {
        if (!is_number(e)) mismatch("a list containing " + lit_kind(e));
        v.push_back(lit_float<double>(p, e));
      }
      return v;
    }
    case AttrKind::Tensor: {
      if (l.kind != Lit::Dense) mismatch(lit_kind(l));
      if (l.has_type) return read_dense(p, l, l.type);
      if (!n.typed || n.types.empty())
        p.fail(l.line, where + ": dense<...> takes its shape from the result type; write ': " +
                           std::string("<type>") + "' after the node's attributes");
      return read_dense(p, l, n.types[0]);
    }
  }
  p.fail(l.line, where + ": unsupported attribute kind");
}

int64_t numeric_id(const std::string& key) {
  if (key.empty() || key.size() > 18 || (key.size() > 1 && key[0] == '0')) return -1;
  for (char c : key)
    if (!is_digit(c)) return -1;
  return std::stoll(key);
}

}  // namespace

// ---------------------------------------------------------------- lexer

std::string describe(const Token& t) {
  switch (t.kind) {
    case Token::End: return "end of file";
    case Token::String: {
      std::string s = t.text.size() > 24 ? t.text.substr(0, 24) + "..." : t.text;
      return "string " + quote(s);
    }
    case Token::Value: return "'%" + (t.quoted ? quote(t.text) : t.text) + "'";
    case Token::Global: return "'@" + (t.quoted ? quote(t.text) : t.text) + "'";
    default: return "'" + t.text + "'";
  }
}

Lexer::Lexer(std::string_view src, std::string file) : src_(src), file_(std::move(file)) {
  // A file that ends too early is reported on its last line with text.
  size_t last = src.find_last_not_of(" \t\r\n");
  if (last != std::string_view::npos) eof_line_ = 1 + int(std::count(src.begin(), src.begin() + last, '\n'));
}

const Token& Lexer::peek(size_t ahead) {
  while (ahead_.size() <= ahead) ahead_.push_back(scan());
  return ahead_[ahead];
}

Token Lexer::next() {
  peek();
  Token t = std::move(ahead_.front());
  ahead_.pop_front();
  return t;
}

void Lexer::fail(const std::string& msg) const { throw ParseError(file_, line_, msg); }

Token Lexer::scan() {
  const size_t n = src_.size();
  for (;;) {
    while (pos_ < n && (src_[pos_] == ' ' || src_[pos_] == '\t' || src_[pos_] == '\r' || src_[pos_] == '\n'))
      if (src_[pos_++] == '\n') ++line_;
    if (pos_ + 1 < n && src_[pos_] == '/' && src_[pos_ + 1] == '/') {
      while (pos_ < n && src_[pos_] != '\n') ++pos_;
      continue;
    }
    break;
  }
  Token t;
  t.line = line_;
  if (pos_ >= n) {
    t.line = eof_line_;
    return t;
  }
  auto string_body = [&]() {
    // At the opening quote.
    int start = line_;
    std::string s;
    ++pos_;
    for (;;) {
      if (pos_ >= n || src_[pos_] == '\n') {
        line_ = start;
        fail("unterminated string (expected a closing '\"' on this line)");
      }
      char c = src_[pos_++];
      if (c == '"') return s;
      if (c != '\\') {
        s += c;
        continue;
      }
      if (pos_ >= n) continue;  // reported as unterminated
      char e = src_[pos_++];
      switch (e) {
        case '"': s += '"'; break;
        case '\\': s += '\\'; break;
        case 'n': s += '\n'; break;
        case 't': s += '\t'; break;
        case 'r': s += '\r'; break;
        case 'x': {
          auto hex = [](char h) {
            if (h >= '0' && h <= '9') return h - '0';
            if (h >= 'a' && h <= 'f') return h - 'a' + 10;
            if (h >= 'A' && h <= 'F') return h - 'A' + 10;
            return -1;
          };
          int hi = pos_ < n ? hex(src_[pos_]) : -1, lo = pos_ + 1 < n ? hex(src_[pos_ + 1]) : -1;
          if (hi < 0 || lo < 0) fail("expected two hex digits after '\\x' in a string");
          s += char(hi * 16 + lo);
          pos_ += 2;
          break;
        }
        default: fail(std::string("unknown escape '\\") + e + "' in a string (expected \\\" \\\\ \\n \\t \\r \\xHH)");
      }
    }
  };
  char c = src_[pos_];
  if (c == '%' || c == '@') {
    t.kind = c == '%' ? Token::Value : Token::Global;
    ++pos_;
    if (pos_ < n && src_[pos_] == '"') {
      t.text = string_body();
      t.quoted = true;
    } else {
      size_t b = pos_;
      while (pos_ < n && is_name_char(src_[pos_])) ++pos_;
      if (pos_ == b) fail(std::string("expected a name after '") + c + "'");
      t.text = std::string(src_.substr(b, pos_ - b));
    }
    return t;
  }
  if (c == '"') {
    t.kind = Token::String;
    t.text = string_body();
    return t;
  }
  auto word_at = [&](size_t i, std::string_view w) {
    return src_.substr(i, w.size()) == w && (i + w.size() >= n || !is_name_char(src_[i + w.size()]));
  };
  if (c == '-' && pos_ + 1 < n && src_[pos_ + 1] == '>') {
    pos_ += 2;
    t.kind = Token::Punct;
    t.text = "->";
    return t;
  }
  if (c == '-' && (word_at(pos_ + 1, "inf") || word_at(pos_ + 1, "nan"))) {
    t.kind = Token::Float;
    t.text = std::string(src_.substr(pos_, 4));
    pos_ += 4;
    return t;
  }
  if (is_digit(c) || (c == '-' && pos_ + 1 < n && is_digit(src_[pos_ + 1]))) {
    size_t b = pos_;
    bool real = false;
    if (c == '-') ++pos_;
    while (pos_ < n && is_digit(src_[pos_])) ++pos_;
    if (pos_ < n && src_[pos_] == '.') {
      real = true;
      ++pos_;
      while (pos_ < n && is_digit(src_[pos_])) ++pos_;
    }
    if (pos_ < n && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t e = pos_ + 1;
      if (e < n && (src_[e] == '+' || src_[e] == '-')) ++e;
      if (e < n && is_digit(src_[e])) {
        real = true;
        pos_ = e;
        while (pos_ < n && is_digit(src_[pos_])) ++pos_;
      }
    }
    t.text = std::string(src_.substr(b, pos_ - b));
    if (pos_ < n && is_name_char(src_[pos_])) {
      size_t e = pos_;
      while (e < n && is_name_char(src_[e])) ++e;
      fail("malformed number '" + std::string(src_.substr(b, e - b)) + "'");
    }
    t.kind = real ? Token::Float : Token::Int;
    return t;
  }
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') {
    size_t b = pos_;
    while (pos_ < n && is_name_char(src_[pos_])) ++pos_;
    t.kind = Token::Ident;
    t.text = std::string(src_.substr(b, pos_ - b));
    return t;
  }
  if (std::strchr("(){}[]<>,:=#+", c) && c != '\0') {
    ++pos_;
    t.kind = Token::Punct;
    t.text = std::string(1, c);
    return t;
  }
  auto u = static_cast<unsigned char>(c);
  if (u > 0x20 && u < 0x7f) fail(std::string("unexpected character '") + c + "'");
  static const char* hex = "0123456789abcdef";
  fail(std::string("unexpected byte 0x") + hex[u >> 4] + hex[u & 0xf] + " (the text form is ASCII outside strings)");
}

// ---------------------------------------------------------------- parser

std::string ValueRef::str() const { return shown(name) + (index >= 0 ? "#" + std::to_string(index) : ""); }

bool Parser::at(std::string_view s, size_t ahead) {
  const Token& t = peek(ahead);
  return (t.kind == Token::Punct || t.kind == Token::Ident) && t.text == s;
}

bool Parser::accept(std::string_view s) {
  if (!at(s)) return false;
  next();
  return true;
}

Token Parser::expect(std::string_view s, std::string_view context) {
  if (!at(s)) fail_expected("'" + std::string(s) + "'" + (context.empty() ? "" : " " + std::string(context)));
  return next();
}

void Parser::fail(int line, const std::string& msg) const { throw ParseError(file(), line, msg); }

void Parser::charge_constant(int line, const TensorType& type, int64_t bytes) {
  if (bytes > limits_.constant_bytes - constant_bytes_)
    fail(line, "dense<...> of type " + type.str() + " needs " + std::to_string(bytes) + " bytes" +
                   (constant_bytes_ ? " after " + std::to_string(constant_bytes_) + " in the file's earlier constants" : "") +
                   ", more than the constants of one file in the text form may hold (" +
                   std::to_string(limits_.constant_bytes) + "); pass large data as an input");
  constant_bytes_ += bytes;
}

Parser::Nest::Nest(Parser& p, int line) : p_(p) {
  if (p_.depth_ >= kMaxNesting) p_.fail(line, "nested more than " + std::to_string(kMaxNesting) + " levels deep");
  ++p_.depth_;
}

void Parser::fail_expected(std::string_view what) {
  const Token& t = peek();
  fail(t.line, "expected " + std::string(what) + ", found " + describe(t));
}

void Parser::expect_end() {
  if (peek().kind != Token::End) fail_expected("end of file");
}

int64_t Parser::parse_int(std::string_view what) {
  if (peek().kind != Token::Int) fail_expected(what);
  Lit l;
  l.line = peek().line;
  l.text = next().text;
  return lit_int(*this, l);
}

std::string Parser::parse_string(std::string_view what) {
  if (peek().kind != Token::String) fail_expected(what);
  return next().text;
}

std::string Parser::parse_global(std::string_view what) {
  if (peek().kind != Token::Global) fail_expected(what);
  return next().text;
}

ValueRef Parser::parse_value_ref() {
  if (peek().kind != Token::Value) fail_expected("a value (%name)");
  Token t = next();
  ValueRef r;
  r.name = key_of(t);
  r.line = t.line;
  if (accept("#")) {
    int64_t i = parse_int("a result index after '#'");
    if (i > std::numeric_limits<int>::max()) fail(r.line, "result index " + std::to_string(i) + " is too large");
    r.index = int(i);
  }
  return r;
}

std::vector<ValueRef> Parser::parse_value_list(std::string_view context) {
  expect("(", context);
  std::vector<ValueRef> refs;
  if (!at(")")) {
    do refs.push_back(parse_value_ref());
    while (accept(","));
  }
  expect(")", "to close the list of values");
  return refs;
}

TensorType Parser::parse_type() {
  if (peek().kind != Token::Ident) fail_expected("a type (like f32[4,8])");
  const Token dt_token = next();  // a copy: the lexer's queue drops consumed tokens
  auto dt = dtype_from_name(dt_token.text);
  if (!dt) fail(dt_token.line, "unknown dtype '" + dt_token.text + "' (expected one of " + all_dtype_names() + ")");
  TensorType type;
  type.dtype = *dt;
  expect("[", "after the dtype (a scalar is f32[])");
  if (!at("]")) {
    do {
      if (type.shape.size() >= kMaxRank) fail(dt_token.line, "a type has more than " + std::to_string(kMaxRank) + " dimensions");
      type.shape.push_back(parse_int("an extent"));
    } while (accept(","));
  }
  expect("]", "to close the shape");
  for (int64_t d : type.shape)
    if (d < 0) fail(dt_token.line, "negative extent in type " + type.str());
  try {
    dtype_storage_bytes(type.dtype, numel(type.shape));
  } catch (const SizeError& e) {
    fail(dt_token.line, "type " + type.str() + " is too large: " + e.what());
  }
  return type;
}

bool Parser::parse_loc(Location& loc) {
  if (!accept("loc")) return false;
  expect("(", "after 'loc'");
  int line = peek().line;
  std::string first = parse_string("a file or name string in loc(...)");
  if (accept(":")) {
    loc.file = first;
    int64_t l = parse_int("a line number");
    if (l > std::numeric_limits<int>::max()) fail(line, "line number " + std::to_string(l) + " is too large");
    loc.line = int(l);
    if (accept(",")) loc.name = parse_string("a name string");
  } else {
    loc.name = first;
  }
  expect(")", "to close loc(...)");
  return true;
}

ParamSyntax Parser::parse_param() {
  if (peek().kind != Token::Value) fail_expected("a parameter (%name: type)");
  Token t = next();
  ParamSyntax p;
  p.name = key_of(t);
  p.param_name = t.text;
  p.line = t.line;
  expect(":", "after parameter " + describe(t));
  p.type = parse_type();
  parse_loc(p.loc);
  return p;
}

NodeSyntax Parser::parse_node(const NoteFn& note) {
  if (peek().kind != Token::Value) fail_expected("a node definition (%name = op(...))");
  Token name = next();
  NodeSyntax n;
  n.name = key_of(name);
  n.line = name.line;
  if (accept(":")) {
    int64_t k = parse_int("the number of results after " + describe(name) + ":");
    if (k > std::numeric_limits<int>::max()) fail(n.line, "too many results");
    n.results = int(k);
  }
  expect("=", "after " + describe(name));
  // `host` before the op name marks a host-staged node (no op is called host).
  if (at("host") && peek(1).kind == Token::Ident) {
    next();
    n.host = true;
  }
  const Token& opt = peek();
  if (opt.kind != Token::Ident) fail_expected("an op name");
  n.op = OpRegistry::get().find(opt.text);
  if (!n.op) fail(opt.line, "unknown op '" + opt.text + "'");
  next();
  n.inputs = parse_value_list("after op '" + n.op->name + "'");

  // Attributes `{name=value, ...}`; a `{` that opens regions starts with `label(`.
  std::vector<std::pair<std::string, Lit>> attrs;
  if (at("{") && (at("}", 1) || (peek(1).kind == Token::Ident && at("=", 2)))) {
    next();
    if (!at("}")) {
      do {
        if (peek().kind != Token::Ident) fail_expected("an attribute name");
        Token an = next();
        for (const auto& [prev, _] : attrs)
          if (prev == an.text) fail(an.line, "duplicate attribute '" + an.text + "'");
        expect("=", "after attribute '" + an.text + "'");
        attrs.emplace_back(an.text, parse_literal(*this));
      } while (accept(","));
    }
    expect("}", "to close the attributes");
  }
  if (accept(":")) {
    n.typed = true;
    if (accept("(")) {
      if (!at(")")) {
        do n.types.push_back(parse_type());
        while (accept(","));
      }
      expect(")", "to close the result types");
    } else {
      n.types.push_back(parse_type());
    }
  }
  for (const auto& [an, lit] : attrs) n.attrs.set(an, coerce(*this, *n.op, an, lit, n));
  parse_loc(n.loc);
  if (note) note(*this, n);
  if (accept("{")) {
    while (!at("}")) n.regions.push_back(parse_region());
    next();
  }
  return n;
}

void Parser::parse_body(GraphSyntax& g) {
  for (;;) {
    if (peek().kind == Token::Value) {
      g.nodes.push_back(parse_node());
    } else if (accept("return")) {
      if (peek().kind == Token::Value) {
        do g.results.push_back(parse_value_ref());
        while (accept(","));
      }
      expect("}", "after the returned values");
      return;
    } else {
      fail_expected("a node definition or 'return'");
    }
  }
}

GraphSyntax Parser::parse_region() {
  const Token& t = peek();
  if (t.kind != Token::Ident && t.kind != Token::String) fail_expected("a region (like body(%b0: f32[]) { ... }) or '}'");
  Nest nest(*this, t.line);
  GraphSyntax g;
  g.line = t.line;
  g.name = next().text;
  expect("(", "after region " + g.name);
  if (!at(")")) {
    do g.params.push_back(parse_param());
    while (accept(","));
  }
  expect(")", "to close the region parameters");
  expect("{", "to open region " + g.name);
  parse_body(g);
  return g;
}

GraphSyntax Parser::parse_graph() {
  GraphSyntax g;
  g.line = peek().line;
  expect("graph", "to start a graph");
  g.name = parse_global("a graph name (like @main)");
  expect("(", "after the graph name");
  if (!at(")")) {
    do g.params.push_back(parse_param());
    while (accept(","));
  }
  expect(")", "to close the parameter list");
  expect("{", "to open the graph body");
  parse_body(g);
  return g;
}

// ---------------------------------------------------------------- builder

void GraphBuilder::fail(int line, const std::string& msg) const { throw ParseError(file_, line, msg); }

Value GraphBuilder::resolve(const ValueRef& r) const {
  auto it = scope_.find(r.name);
  if (it == scope_.end()) {
    auto l = lines_.find(r.name);
    if (l != lines_.end())
      fail(r.line, shown(r.name) + " is used before its definition on line " + std::to_string(l->second));
    for (const GraphBuilder* o = outer_; o; o = o->outer_)
      if (o->lines_.count(r.name))
        fail(r.line, "unknown value " + shown(r.name) +
                         ": it is defined outside this region, and a region sees only its own parameters and nodes");
    fail(r.line, "unknown value " + shown(r.name));
  }
  const Defined& d = it->second;
  if (r.index < 0) {
    if (d.results != 1)
      fail(r.line, shown(r.name) + " has " + std::to_string(d.results) + " results; name one as " + shown(r.name) +
                       "#0");
    return Value{d.node, 0};
  }
  if (r.index >= d.results)
    fail(r.line, r.str() + " does not exist: " + shown(r.name) + " has " + std::to_string(d.results) + " result(s)");
  return Value{d.node, r.index};
}

int32_t GraphBuilder::node_id(const std::string& name) const {
  auto it = scope_.find(name);
  if (it == scope_.end()) throw InternalError("GraphBuilder::node_id: " + shown(name) + " was not built");
  return it->second.node;
}

// Where no loc(...) is written, a node is located at its own line of the text, so
// reports and errors point into the file the user wrote.
Location GraphBuilder::at_line(const Location& written, int line) const {
  if (written.known()) return written;
  Location l;
  l.file = file_;
  l.line = line;
  l.implicit = true;
  return l;
}

Graph GraphBuilder::build(const GraphSyntax& s, Order order) {
  scope_.clear();
  lines_.clear();
  Graph g;
  g.name = s.name;
  auto declare = [&](const std::string& name, int line) {
    auto [it, fresh] = lines_.emplace(name, line);
    if (!fresh)
      fail(line, "duplicate definition of " + shown(name) + " (first defined on line " + std::to_string(it->second) +
                     ")");
  };
  for (const auto& p : s.params) declare(p.name, p.line);
  for (const auto& n : s.nodes) declare(n.name, n.line);

  // Names that are node ids keep them: parameters fill the ids no node names.
  const int64_t total = int64_t(s.params.size() + s.nodes.size());
  std::vector<int64_t> ids(s.nodes.size(), -1);
  bool by_id = true;
  int64_t prev = -1;
  for (size_t i = 0; i < s.nodes.size(); ++i) {
    const NodeSyntax& n = s.nodes[i];
    int64_t id = numeric_id(n.name);
    if (order == Order::Ids) {
      if (id < 0) fail(n.line, "expected a node id (%<number>) as the name, found " + shown(n.name));
      if (id >= total)
        fail(n.line, "node id " + shown(n.name) + " is out of range: the graph has " + std::to_string(total) +
                         " nodes");
    } else if (id < 0 || id >= total || id <= prev) {
      by_id = false;
      break;
    }
    ids[i] = prev = id;
  }
  std::vector<std::pair<bool, size_t>> seq;  // (is a parameter, index into params or nodes)
  if (by_id) {
    std::vector<int64_t> at(size_t(total), -1);
    for (size_t i = 0; i < ids.size(); ++i) at[size_t(ids[i])] = int64_t(i);
    std::map<std::string, int64_t> param_id;
    size_t param = 0;
    for (int64_t id = 0; id < total; ++id) {
      if (at[size_t(id)] >= 0) {
        seq.emplace_back(false, size_t(at[size_t(id)]));
      } else {
        param_id[s.params[param].name] = id;
        seq.emplace_back(true, param++);
      }
    }
    // Hand-written text may name nodes %0, %1, ... and still use a parameter whose gap
    // comes later: then parameters simply come first.
    if (order == Order::Text)
      for (size_t i = 0; i < s.nodes.size() && by_id; ++i)
        for (const ValueRef& r : s.nodes[i].inputs) {
          auto it = param_id.find(r.name);
          if (it != param_id.end() && it->second > ids[i]) by_id = false;
        }
  }
  if (!by_id) {
    seq.clear();
    for (size_t i = 0; i < s.params.size(); ++i) seq.emplace_back(true, i);
    for (size_t i = 0; i < s.nodes.size(); ++i) seq.emplace_back(false, i);
  }

  for (const auto& [is_param, i] : seq) {
    if (is_param) {
      const ParamSyntax& p = s.params[i];
      try {
        Value v = g.add_param(p.param_name, p.type, at_line(p.loc, p.line));
        scope_[p.name] = {v.node, 1};
      } catch (const ParseError&) {
        throw;
      } catch (const InputError& e) {
        fail(p.line, e.what());
      }
      continue;
    }
    const NodeSyntax& n = s.nodes[i];
    std::vector<Value> inputs;
    for (const ValueRef& r : n.inputs) inputs.push_back(resolve(r));
    std::vector<std::shared_ptr<Graph>> regions;
    for (const GraphSyntax& r : n.regions) {
      GraphBuilder sub(file_);
      sub.outer_ = this;
      regions.push_back(std::make_shared<Graph>(sub.build(r, r.by_ids ? Order::Ids : Order::Text)));
    }
    try {
      g.add_multi(n.op, std::move(inputs), n.attrs, at_line(n.loc, n.line), std::move(regions));
    } catch (const ParseError&) {
      throw;
    } catch (const InputError& e) {
      fail(n.line, e.what());
    }
    Node& node = g.nodes.back();
    node.host = n.host;
    const std::string op = "op '" + n.op->name + "'";
    if (n.results >= 0 && size_t(n.results) != node.outputs.size())
      fail(n.line, shown(n.name) + ":" + std::to_string(n.results) + " declares " + std::to_string(n.results) +
                       " result(s) but " + op + " produces " + std::to_string(node.outputs.size()));
    if (n.typed) {
      if (n.types.size() != node.outputs.size())
        fail(n.line, op + " produces " + std::to_string(node.outputs.size()) + " result(s) but the text gives " +
                         std::to_string(n.types.size()) + " type(s)");
      for (size_t k = 0; k < n.types.size(); ++k) {
        const TensorType& got = node.outputs[k];
        const TensorType& want = n.types[k];
        if (got == want) continue;
        std::string what = got.dtype == want.dtype ? "shape mismatch" : "type mismatch";
        std::string which = n.types.size() > 1 ? " result " + std::to_string(k) : "";
        fail(n.line, what + ": " + op + " infers " + got.str() + " for " + shown(n.name) + which +
                         " but the text says " + want.str());
      }
    }
    scope_[n.name] = {node.id, int(node.outputs.size())};
  }
  for (const ValueRef& r : s.results) g.results.push_back(resolve(r));
  return g;
}

}  // namespace text

Graph parse_graph(std::string_view src, const std::string& filename, const ParseLimits& limits) {
  text::Parser p(src, filename, limits);
  text::GraphSyntax s = p.parse_graph();
  p.expect_end();
  text::GraphBuilder b(filename);
  return b.build(s);
}

}  // namespace rlx::ir
