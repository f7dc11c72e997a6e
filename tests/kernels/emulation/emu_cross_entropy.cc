// The CUDA kernels of kernels/cuda/cross_entropy.cu, compiled as C++ for the CUDA
// emulator (device/cuda/emulator.h).
#include "kernels/cuda/cross_entropy.cu"  // NOLINT(bugprone-suspicious-include)
