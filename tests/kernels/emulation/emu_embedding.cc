// The CUDA kernels of kernels/cuda/embedding.cu, compiled as C++ for the CUDA
// emulator (device/cuda/emulator.h).
#include "kernels/cuda/embedding.cu"  // NOLINT(bugprone-suspicious-include)
