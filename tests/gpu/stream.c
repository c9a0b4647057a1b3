// STREAM triad per MPI process, all processes at once (tests/gpu/scaling.sh): the memory
// bandwidth that bounds a distributed CG iteration on 1..N cores.
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int r, p; MPI_Comm_rank(MPI_COMM_WORLD, &r); MPI_Comm_size(MPI_COMM_WORLD, &p);
  long n = 1L << 25; double *a = malloc(n * 8), *b = malloc(n * 8), *c = malloc(n * 8);
  for (long i = 0; i < n; ++i) a[i] = 0, b[i] = 1, c[i] = 2;
  double best = 1e9;
  for (int k = 0; k < 10; ++k) {
    MPI_Barrier(MPI_COMM_WORLD); double t = MPI_Wtime();
    for (long i = 0; i < n; ++i) a[i] = b[i] + 3.0 * c[i];
    MPI_Barrier(MPI_COMM_WORLD); t = MPI_Wtime() - t; if (t < best) best = t;
  }
  if (r == 0) printf("STREAM triad %d processes: %.1f GB/s in all (%.1f per process), a[7]=%g\n", p, 3.0 * 8 * n * p / best / 1e9, 3.0 * 8 * n / best / 1e9, a[7]);
  MPI_Finalize();
}
