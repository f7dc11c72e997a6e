// The CUDA kernels of kernels/cuda/rope.cu, compiled as C++ for the CUDA
// emulator (device/cuda/emulator.h).
#include "kernels/cuda/rope.cu"  // NOLINT(bugprone-suspicious-include)
