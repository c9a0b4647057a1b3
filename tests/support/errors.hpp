// Checking a refusal: the exception's type and every phrase its message must hold.
#pragma once
#include <boost/test/unit_test.hpp>
#include <exception>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace rlx::test {

// Expects f() to throw E whose message contains every one of `parts`; another exception
// type, or none, is an error.
template <class E = InputError, class F>
void expect_error(F&& f, std::vector<std::string> parts) {
  try {
    f();
  } catch (const E& e) {
    std::string m = e.what();
    for (auto& p : parts) BOOST_CHECK_MESSAGE(m.find(p) != std::string::npos, "message '" << m << "' lacks '" << p << "'");
    return;
  } catch (const std::exception& e) {
    BOOST_ERROR("wrong exception type: " << e.what());
    return;
  }
  BOOST_ERROR("no exception; expected one mentioning " << parts.at(0));
}

}  // namespace rlx::test
