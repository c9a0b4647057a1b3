// The MPI side of dist::Communicator, for programs that speak MPI themselves. Only in
// builds with MPI (RLX_HAVE_MPI); includes <mpi.h>.
#pragma once
#ifndef RLX_HAVE_MPI
#error "dist/mpi.hpp needs an rlx built with MPI (RLX_HAVE_MPI)"
#endif
// rlx calls MPI's C interface; OpenMPI's and MPICH's deprecated C++ bindings stay out (they
// would need libmpi_cxx at link time).
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include "dist/communicator.hpp"

namespace rlx::dist {

// A user's communicator (not duplicated, not freed: the caller keeps it alive while rlx
// uses it). MPI must be initialised.
Communicator from_mpi(MPI_Comm comm);
// The MPI communicator under c (MPI_COMM_SELF for the one-process group).
MPI_Comm mpi_comm(const Communicator& c);

}  // namespace rlx::dist
