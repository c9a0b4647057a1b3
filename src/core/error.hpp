// rlx error hierarchy: every failure a user can cause ends in one of these,
// carrying what went wrong, where, and what was expected.
#pragma once
#include <stdexcept>
#include <string>

namespace rlx {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Bad user input: a malformed file, an unknown option, an impossible shape.
class InputError : public Error {
 public:
  using Error::Error;
};

// A text-IR or file parse failure, with file and line.
class ParseError : public InputError {
 public:
  ParseError(std::string file, int line, const std::string& msg)
      : InputError(file + ":" + std::to_string(line) + ": " + msg), file_(std::move(file)), line_(line) {}
  const std::string& file() const { return file_; }
  int line() const { return line_; }

 private:
  std::string file_;
  int line_;
};

// A shape/dtype rule rejected a node.
class ShapeError : public InputError {
 public:
  using InputError::InputError;
};

// A device failed at run time (out of memory, a faulting kernel, a missing driver):
// names the kernel and the IR node it ran for. The process survives it.
class DeviceError : public Error {
 public:
  using Error::Error;
};

// An internal invariant broke: a bug in rlx, not in the user's input.
class InternalError : public Error {
 public:
  using Error::Error;
};

}  // namespace rlx
