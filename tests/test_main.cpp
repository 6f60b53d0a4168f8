// GoogleTest entry point shared by every test binary: the same BLAS fix as `pipeplan` itself.
#include <gtest/gtest.h>

#include "common/blas_env.h"

int main(int argc, char** argv) {
  pipeplan::reexec_with_best_blas_kernels(argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
