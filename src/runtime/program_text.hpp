// The L3 text form: a compiled program (its L2 graph, kernels, buffer slots and arena
// size) printed as readable text that parses back; docs/ir.md, "L3 text form".
//
//   std::string s = print_program(compile(g, DeviceRegistry::get().at("reference")));
//   Program q = parse_program(s, "model.l3");   // print_program(q) == s
#pragma once
#include <string>
#include <string_view>

#include "ir/text.hpp"
#include "runtime/program.hpp"

namespace rlx {

std::string print_program(const Program& p);
// Throws ParseError(filename, line, …). The constant pool comes back as host tensors: the
// value attributes of the constant nodes. The dispatch report is not part of the text.
Program parse_program(std::string_view text, const std::string& filename = "<input>",
                      const ir::ParseLimits& limits = {});

}  // namespace rlx
