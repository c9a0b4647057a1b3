// The tally of a reader's truncation and mutation sweep: each attempt either reads or is
// refused with an InputError; any other exception is a test error naming the attempt.
#pragma once
#include <boost/test/unit_test.hpp>
#include <exception>
#include <string>

#include "core/error.hpp"

namespace rlx::test {

struct Outcomes {
  int read = 0, refused = 0;
  template <class F>
  void attempt(const std::string& what, F&& read_it) {
    try {
      read_it();
      ++read;
    } catch (const InputError&) {
      ++refused;
    } catch (const std::exception& e) {
      BOOST_ERROR(what << ": not an InputError: " << e.what());
    }
  }
};

}  // namespace rlx::test
