// The text IR (docs/ir.md), as `rlx compile FILE` and `rlx run FILE` read it: parse, print
// and parse back (the text form's promise: the same text again), verify, compile for the
// `reference` device, and print the L2 graph and the L3 program as `--emit l2|l3` do (the
// L3 text parses back to the same text, too).
#include <cstdint>
#include <string_view>

#include "common.hpp"
#include "core/error.hpp"
#include "ir/text.hpp"
#include "passes/passes.hpp"
#include "runtime/program_text.hpp"
#include "runtime/runtime.hpp"

using namespace rlx;

namespace {

// The file's constants are capped at 16 MiB here (ParseLimits; 256 MiB by default): the
// pipeline below holds several copies of each (the graph, its reprint, the compiled program's
// pool), so constants near the default cap pass libFuzzer's 2 GiB memory limit and its 10 s
// timeout under the sanitizers; under 16 MiB, only work and memory the cap does not govern
// are findings. The L3 text is read back under the default: folding may add constants the
// input did not have.
const ir::ParseLimits kLimits{int64_t(16) << 20};

template <class Parse>
void reads_back(const std::string& text, Parse parse, const char* what) {
  std::string again;
  try {
    again = parse(text);
  } catch (const rlx::Error& e) {
    fuzz::finding(std::string(what) + " as printed does not parse back: " + e.what() + "\n" + text);
  }
  if (again != text) fuzz::finding(std::string(what) + " printed, parsed and printed again differs:\n" + text + "\n---\n" + again);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  RLX_FUZZ_GUARD({
    ir::Graph g = ir::parse_graph(text, "fuzz.rlx", kLimits);
    std::string l1 = ir::print_graph(g);
    reads_back(l1, [](const std::string& s) { return ir::print_graph(ir::parse_graph(s, "l1.rlx", kLimits)); }, "the graph");
    passes::verify(g);
    static Device& reference = DeviceRegistry::get().at("reference");
    Program p = compile(g, reference);
    (void)ir::print_graph(p.graph);
    std::string l3 = print_program(p);
    reads_back(l3, [](const std::string& s) { return print_program(parse_program(s, "l3.rlx")); }, "the L3 program");
  })
  return 0;
}
