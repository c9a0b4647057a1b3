// MPI's lifetime for a program whose entry point is rlx's own (the rlx CLI). A library
// user initialises MPI themselves; rlx only joins in.
#pragma once

namespace rlx::dist {

// Whether this process was started by an MPI launcher (mpirun / mpiexec / srun set their
// variables): only then does the CLI initialise MPI, so a plain run stays a plain process.
bool launched_by_mpi();

// Initialises MPI (when built with it, launched by a launcher and not yet initialised) and
// finalises what it initialised when destroyed. Without MPI it does nothing.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  bool active() const { return owned_; }
  // Ends every process of the job with this exit code (MPI_Abort), or this process alone
  // without MPI: a rank that fails on its own must not leave the others waiting.
  [[noreturn]] static void abort_job(int code);

 private:
  bool owned_ = false;
};

}  // namespace rlx::dist
