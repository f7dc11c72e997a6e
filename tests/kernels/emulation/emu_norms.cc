// The CUDA kernels of kernels/cuda/norms.cu, compiled as C++ for the CUDA
// emulator (device/cuda/emulator.h).
#include "kernels/cuda/norms.cu"  // NOLINT(bugprone-suspicious-include)
