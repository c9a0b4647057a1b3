// rlx-bench-partition: rlx's parallel partitioning against PETSc's on the same distributed
// matrix, in the same run. The matrix is the 3D 7-point Poisson matrix of side n with its
// unknowns numbered at random (as `rlx gen --shuffle SEED`), split contiguously, so both
// start from a split that cuts nearly every edge. Each side partitions with PT-Scotch into
// one part per rank and moves the rows:
//   rlx    ptscotch_parts (the symmetrised graph from each rank's rows, SCOTCH_dgraphPart)
//          then DistCsrMatrix::redistribute;
//   PETSc  MatConvert to MATMPIADJ, MatPartitioningApply (MATPARTITIONINGPTSCOTCH), then
//          ISBuildTwoSided and MatCreateSubMatrix (the usual way to move an AIJ by a
//          partition), on the same rows handed to PETSc without a copy (to_petsc).
// Times are rank 0's clock between barriers, medians of -reps alternating runs; the quality
// of each partition is the halo of an SpMV with the moved matrix (bytes sent, all ranks).
//   mpirun -n 2 build/bin/rlx-bench-partition -n 96 -reps 3      (-peer 0: rlx alone)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "dist/mpi.hpp"
#include "solvers/petsc/interop.hpp"
#include "solvers/sparse/dist_partition.hpp"
#include "solvers/sparse/partition.hpp"
#include "solvers/sparse/poisson.hpp"

using namespace rlx;
using namespace rlx::sparse;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

int64_t halo_sent(const DistCsrMatrix& A) {
  return A.communicator().all_reduce(int64_t(8 * A.halo().pattern().sends()), ReduceOp::Sum);
}

}  // namespace

int main(int argc, char** argv) {
  PetscCall(PetscInitialize(&argc, &argv, nullptr, nullptr));
  PetscInt n = 64, reps = 3, shuffle = 1, peer = 1;
  PetscCall(PetscOptionsGetInt(nullptr, nullptr, "-n", &n, nullptr));
  PetscCall(PetscOptionsGetInt(nullptr, nullptr, "-reps", &reps, nullptr));
  PetscCall(PetscOptionsGetInt(nullptr, nullptr, "-shuffle", &shuffle, nullptr));
  PetscCall(PetscOptionsGetInt(nullptr, nullptr, "-peer", &peer, nullptr));  // 0: rlx alone (for a profile)
  const dist::Communicator comm = dist::from_mpi(PETSC_COMM_WORLD);
  if (reps < 1 || n < 1) {
    if (comm.rank() == 0) std::fprintf(stderr, "rlx-bench-partition: -n and -reps must be at least 1\n");
    PetscCall(PetscFinalize());
    return 2;
  }
  const bool root = comm.rank() == 0;
  try {
    if (!have_ptscotch()) throw InputError("this rlx was built without PT-Scotch");
    CsrMatrix A;
    if (root) {  // (rlx gen poisson --dim 3 --n n --shuffle SEED's numbering)
      A = poisson3d(n);
      std::vector<int64_t> order(static_cast<size_t>(A.rows()));
      std::iota(order.begin(), order.end(), int64_t(0));
      std::mt19937_64 rng{uint64_t(shuffle)};
      std::shuffle(order.begin(), order.end(), rng);
      A = permute_symmetric(A, order);
    }
    const DistCsrMatrix C = DistCsrMatrix::scatter(comm, A);
    A = CsrMatrix{};
    const petsc::PetscMat P = petsc::to_petsc(C);
    std::vector<double> rlx_part, rlx_move, petsc_part, petsc_move;
    int64_t rlx_halo = 0, petsc_halo = 0;
    for (PetscInt r = 0; r < reps; ++r) {
      comm.barrier();
      double t0 = now();
      const std::vector<int64_t> parts = ptscotch_parts(C);
      comm.barrier();
      double t1 = now();
      const DistCsrMatrix R = DistCsrMatrix::redistribute(C, parts, "ptscotch");
      comm.barrier();
      double t2 = now();
      rlx_part.push_back(t1 - t0), rlx_move.push_back(t2 - t1);
      rlx_halo = halo_sent(R);
      if (!peer) continue;

      Mat adj, B;
      MatPartitioning mp;
      IS is, rows;
      comm.barrier();
      t0 = now();
      PetscCall(MatConvert(P, MATMPIADJ, MAT_INITIAL_MATRIX, &adj));
      PetscCall(MatPartitioningCreate(PETSC_COMM_WORLD, &mp));
      PetscCall(MatPartitioningSetAdjacency(mp, adj));
      PetscCall(MatPartitioningSetType(mp, MATPARTITIONINGPTSCOTCH));
      PetscCall(MatPartitioningApply(mp, &is));
      comm.barrier();
      t1 = now();
      PetscCall(ISBuildTwoSided(is, nullptr, &rows));
      PetscCall(MatCreateSubMatrix(P, rows, rows, MAT_INITIAL_MATRIX, &B));
      comm.barrier();
      t2 = now();
      petsc_part.push_back(t1 - t0), petsc_move.push_back(t2 - t1);
      petsc_halo = halo_sent(petsc::from_petsc(B));
      PetscCall(MatDestroy(&B));
      PetscCall(ISDestroy(&rows));
      PetscCall(ISDestroy(&is));
      PetscCall(MatPartitioningDestroy(&mp));
      PetscCall(MatDestroy(&adj));
    }
    if (root) {
      std::printf("shuffled poisson3d:%lld (%lld rows) on %d ranks, halo before: %lld bytes per SpMV\n", (long long)n,
                  (long long)C.global_rows(), comm.size(), (long long)halo_sent(C));
      std::printf("%-6s %12s %12s %12s %16s\n", "", "partition_s", "move_s", "total_s", "halo_bytes");
      std::printf("%-6s %12.4f %12.4f %12.4f %16lld\n", "rlx", median(rlx_part), median(rlx_move),
                  median(rlx_part) + median(rlx_move), (long long)rlx_halo);
      if (peer)
        std::printf("%-6s %12.4f %12.4f %12.4f %16lld\n", "PETSc", median(petsc_part), median(petsc_move),
                    median(petsc_part) + median(petsc_move), (long long)petsc_halo);
    } else {
      halo_sent(C);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: error: %s\n", comm.rank(), e.what());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  PetscCall(PetscFinalize());
  return 0;
}
